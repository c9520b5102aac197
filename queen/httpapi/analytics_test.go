package httpapi_test

import (
	"context"
	"testing"
	"time"
)

// Every analytics route answers its well-formed envelope; retention shows
// what the retention pass deleted, per rule; postgres-stats reads the real
// statistics views; a bad window is a 400.
func TestAnalyticsRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "old", "options": map[string]any{"maxWaitTimeSeconds": 60}}), 200)
	e.push(item{"queue": "old", "transactionId": "1"}, item{"queue": "old", "transactionId": "2"})
	e.advanceDB(2 * time.Minute)
	res, err := e.store.RetentionPass(context.Background(), 100)
	if err != nil || res.Evicted != 2 {
		t.Fatalf("retention pass: %+v %v", res, err)
	}
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	to := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	ret := e.expect(e.do("GET", "/api/v1/analytics/retention?from="+from+"&to="+to+"&queue=old", nil), 200).obj(t)
	totals := ret["totals"].(map[string]any)
	if totals["evictionMsgs"].(float64) != 2 || totals["totalMsgs"].(float64) != 2 || totals["retentionMsgs"].(float64) != 0 ||
		len(ret["series"].([]any)) != 1 || ret["bucketMinutes"].(float64) != 5 {
		t.Fatalf("retention: %v", ret)
	}
	other := e.expect(e.do("GET", "/api/v1/analytics/retention?from="+from+"&to="+to+"&queue=else", nil), 200).obj(t)
	if len(other["series"].([]any)) != 0 {
		t.Fatalf("retention of another queue: %v", other)
	}
	for path, keys := range map[string][]string{
		"queue-ops":             {"timeRange", "bucketMinutes", "series", "queues"},
		"queue-parked-replicas": {"timeRange", "bucketMinutes", "series", "replicas"},
		"system-metrics":        {"timeRange", "bucketMinutes", "replicas", "replicaCount", "pointCount"},
		"worker-metrics":        {"timeRange", "bucketMinutes", "pointCount", "timeSeries", "workers", "queues", "summary"},
		"postgres-stats": {"timestamp", "database", "databaseCache", "tableCache", "indexCache", "cacheSummary", "deadTuples",
			"hotUpdates", "activeQueries", "autovacuumStatus", "bufferConfig", "bufferUsage", "tableSizes"},
	} {
		body := e.expect(e.do("GET", "/api/v1/analytics/"+path, nil), 200).obj(t)
		for _, k := range keys {
			if _, ok := body[k]; !ok {
				t.Errorf("%s: no %q in %v", path, k, body)
			}
		}
	}
	if q := e.expect(e.do("GET", "/api/v1/analytics/queue-ops", nil), 200).obj(t)["queues"].([]any); len(q) != 1 || q[0] != "old" {
		t.Fatalf("queue-ops queues: %v", q)
	}
	pg := e.expect(e.do("GET", "/api/v1/analytics/postgres-stats", nil), 200).obj(t)
	if len(pg["tableSizes"].([]any)) == 0 || pg["database"].(map[string]any)["sizeBytes"].(float64) <= 0 {
		t.Fatalf("postgres-stats is not real: %v", pg)
	}
	var lag []any
	e.expect(e.do("GET", "/api/v1/analytics/queue-lag", nil), 200).json(t, &lag)
	if lag == nil {
		t.Fatal("queue-lag: not a top-level array")
	}
	if r := e.do("GET", "/api/v1/analytics/retention?from=yesterday", nil); r.status != 400 {
		t.Fatalf("bad from: %d", r.status)
	}
	if r := e.do("GET", "/api/v1/analytics/queue-ops?from="+to+"&to="+from, nil); r.status != 400 {
		t.Fatalf("from after to: %d", r.status)
	}
}
