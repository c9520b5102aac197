package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// Each broker's request latency over the window, from its recorded
// minutes: worker-metrics' workers carry the window's average and maximum
// (exact), p50 and p99 (the request-weighted median of the minutes' own)
// and the worst minute's p99; system-metrics' points carry each bucket's.
// b1's busy minute was its fast one, so its p50 and p99 are that
// minute's, while its worst minute's p99 and its maximum are the other's.
func TestPerBrokerLatency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m0 := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Minute)
	minute := func(broker string, at time.Time, n int64, sum, p50, p99, mx float64) store.BrokerMinute {
		return store.BrokerMinute{Minute: at, Broker: broker, Hostname: "h-" + broker, Port: 6632, Requests: n, LatencyCount: n,
			LatencySumMs: sum, LatencyP50Ms: p50, LatencyP99Ms: p99, LatencyMaxMs: mx, Gauges: []byte(`{}`)}
	}
	ctx := context.Background()
	if err := e.store.RecordMinutes(ctx, "b1", nil, []store.BrokerMinute{minute("b1", m0, 300, 600, 1, 10, 40),
		minute("b1", m0.Add(time.Minute), 100, 1500, 5, 50, 70)}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RecordMinutes(ctx, "b2", nil, []store.BrokerMinute{minute("b2", m0, 10, 10, 0.5, 2, 3)}); err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Requests                   int64
		AvgMs, P50Ms, P99Ms, MaxMs float64
		WorstMinuteP99Ms           float64
		Minutes                    int
	}
	window := "?from=" + m0.Add(-20*time.Minute).Format(time.RFC3339) + "&to=" + m0.Add(20*time.Minute).Format(time.RFC3339) // 1-minute buckets
	var wm struct {
		Workers []struct {
			WorkerID string
			Latency  summary
		}
	}
	e.expect(e.do("GET", "/api/v1/analytics/worker-metrics"+window, nil), 200).json(t, &wm)
	got := map[string]summary{}
	for _, w := range wm.Workers {
		got[w.WorkerID] = w.Latency
	}
	if want := (summary{Requests: 400, AvgMs: 5.25, P50Ms: 1, P99Ms: 10, MaxMs: 70, WorstMinuteP99Ms: 50, Minutes: 2}); got["b1"] != want {
		t.Errorf("b1: %+v, want %+v", got["b1"], want)
	}
	if want := (summary{Requests: 10, AvgMs: 1, P50Ms: 0.5, P99Ms: 2, MaxMs: 3, WorstMinuteP99Ms: 2, Minutes: 1}); got["b2"] != want {
		t.Errorf("b2: %+v, want %+v", got["b2"], want)
	}
	var sm struct {
		Replicas []struct {
			WorkerID   string
			TimeSeries []struct{ Latency summary }
		}
	}
	e.expect(e.do("GET", "/api/v1/analytics/system-metrics"+window, nil), 200).json(t, &sm)
	var p99s []float64
	for _, r := range sm.Replicas {
		if r.WorkerID == "b1" {
			for _, p := range r.TimeSeries {
				p99s = append(p99s, p.Latency.P99Ms)
			}
		}
	}
	if len(p99s) != 2 || p99s[0] != 10 || p99s[1] != 50 {
		t.Errorf("b1's points' p99: %v, want [10 50]", p99s)
	}
}
