package httpapi_test

import (
	"bytes"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestPrometheusFamiliesParse: /metrics/prometheus is valid text exposition
// (read with the library's own parser) and carries the families operators
// chart: spool, switches, pool, cluster counters, per-queue depth and
// rates, DLQ depth, process and Go runtime.
func TestPrometheusFamiliesParse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "mq", "transactionId": "a"}, item{"queue": "mq", "transactionId": "b"})
	p := e.pop("/api/v1/pop/queue/mq")
	e.ack(p.Messages[0].TransactionID, p.PartitionID, p.LeaseID, "failed")
	r := e.expect(e.do("GET", "/metrics/prometheus", nil), 200)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, r.body)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
	metrics:
		for _, m := range f.Metric {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			}
			return 0, true
		}
		return 0, false
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64 // -1: any value
	}{
		{"queen_cluster_push_messages_total", map[string]string{"scope": "cluster"}, 2},
		{"queen_cluster_push_requests_total", map[string]string{"scope": "cluster"}, 1},
		{"queen_queue_messages_total", map[string]string{"queue": "mq", "op": "push"}, 2},
		{"queen_queue_messages_total", map[string]string{"queue": "mq", "op": "pop"}, 1},
		{"queen_queue_depth", map[string]string{"queue": "mq"}, -1},
		{"queen_dlq_depth", map[string]string{"scope": "cluster"}, -1},
		{"queen_file_buffer_pending", nil, 0},
		{"queen_maintenance_mode_enabled", nil, 0},
		{"queen_db_pool_size", nil, -1},
		{"queen_uptime_seconds", nil, -1},
		{"queen_analytics_dropped_queue_rows_total", nil, 0},
		{"queen_analytics_dropped_minutes_total", nil, 0},
		{"go_goroutines", nil, -1},
		{"process_cpu_seconds_total", nil, -1},
	} {
		v, ok := value(c.name, c.labels)
		if !ok || (c.want >= 0 && v != c.want) {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.Label {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// TestMetricsJSONHasQueensKeys: GET /metrics carries the keys Queen's
// clients decode, with real values where Go has them.
func TestMetricsJSONHasQueensKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.expect(e.do("GET", "/metrics", nil), 200).obj(t)
	want := map[string][]string{"requests": {"total", "rate"}, "messages": {"total", "rate"},
		"database": {"poolSize", "idleConnections", "waitingRequests"},
		"memory":   {"rss", "heapTotal", "heapUsed", "external", "arrayBuffers"}, "cpu": {"user", "system"}}
	if _, ok := m["uptime"]; !ok {
		t.Fatalf("no uptime: %v", m)
	}
	for obj, keys := range want {
		o, ok := m[obj].(map[string]any)
		if !ok {
			t.Fatalf("no %s: %v", obj, m)
		}
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Errorf("%s.%s missing", obj, k)
			}
		}
	}
	if m["memory"].(map[string]any)["rss"].(float64) <= 0 || m["database"].(map[string]any)["poolSize"].(float64) <= 0 {
		t.Fatalf("rss and poolSize must be real: %v", m)
	}
}
