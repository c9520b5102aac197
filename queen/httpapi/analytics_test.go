package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/leader"
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
	res, err := leader.RetentionPass(context.Background(), e.store, e.store.Pool(), 100)
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
	if len(pg["tableSizes"].([]any)) == 0 || pg["databaseStats"].(map[string]any)["sizeBytes"].(float64) <= 0 {
		t.Fatalf("postgres-stats is not real: %v", pg)
	}
	// Queen's field names, which its dashboard reads.
	if name, _ := pg["database"].(string); name == "" {
		t.Errorf("postgres-stats database is not the name: %v", pg["database"])
	}
	has := func(where string, obj any, keys ...string) {
		t.Helper()
		m, _ := obj.(map[string]any)
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("postgres-stats %s: no %q in %v", where, k, obj)
			}
		}
	}
	has("databaseCache", pg["databaseCache"], "cacheHitRatio", "diskReads", "cacheHits")
	summary := pg["cacheSummary"].(map[string]any)
	has("cacheSummary.tables", summary["tables"], "hitRatio")
	has("cacheSummary.indexes", summary["indexes"], "hitRatio")
	has("bufferConfig", pg["bufferConfig"], "sharedBuffersSize")
	has("tableCache[0]", pg["tableCache"].([]any)[0], "diskReads", "cacheHits", "cacheHitRatio")
	has("indexCache[0]", pg["indexCache"].([]any)[0], "diskReads", "cacheHits", "cacheHitRatio")
	has("tableSizes[0]", pg["tableSizes"].([]any)[0], "tableSize", "indexSize")
	has("deadTuples[0]", pg["deadTuples"].([]any)[0], "deadPercentage")
	has("hotUpdates[0]", pg["hotUpdates"].([]any)[0], "totalUpdates", "hotUpdatePercentage")
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

// After traffic and a flush, the analytics and status routes answer the
// recorded buckets: exact counts per queue, the pops' lag, the broker's
// gauges, and batch efficiency.
func TestRecordedAnalyticsAfterTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "rec", "options": map[string]any{"retryLimit": 0, "dlqAfterMaxRetries": true}}), 200)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "rec-empty"}), 200)
	e.push(item{"queue": "rec", "transactionId": "1"}, item{"queue": "rec", "transactionId": "2"}, item{"queue": "rec", "transactionId": "3"})
	e.push(item{"queue": "rec", "transactionId": "4"}, item{"queue": "rec", "transactionId": "5"})
	p := e.pop("/api/v1/pop/queue/rec?batch=3")
	if p == nil || len(p.Messages) != 3 {
		t.Fatalf("pop: %+v", p)
	}
	var acks []map[string]any
	for i, m := range p.Messages {
		status := "completed"
		if i == 2 {
			status = "failed"
		}
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.Messages[0].LeaseID, "status": status})
	}
	e.expect(e.do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}), 200)
	if e.pop("/api/v1/pop/queue/rec-empty") != nil {
		t.Fatal("rec-empty popped something")
	}
	e.push(item{"queue": "rec-auto", "transactionId": "a1"})
	if p := e.pop("/api/v1/pop/queue/rec-auto?autoAck=true"); p == nil || len(p.Messages) != 1 {
		t.Fatalf("autoAck pop: %+v", p)
	}
	e.flushAnalytics()

	window := "?from=" + time.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339) + "&to=" + time.Now().Add(2*time.Minute).UTC().Format(time.RFC3339)
	ops := e.expect(e.do("GET", "/api/v1/analytics/queue-ops"+window, nil), 200).obj(t)
	sum := map[string]float64{}
	for _, s := range ops["series"].([]any) {
		row := s.(map[string]any)
		for _, k := range []string{"pushRequests", "pushMessages", "popMessages", "popEmpty", "ackRequests", "ackSuccess", "ackFailed", "dlq", "autoAcked"} {
			sum[row["queueName"].(string)+"."+k] += row[k].(float64)
		}
	}
	want := map[string]float64{"rec.pushRequests": 2, "rec.pushMessages": 5, "rec.popMessages": 3, "rec.ackRequests": 1,
		"rec.ackSuccess": 2, "rec.ackFailed": 1, "rec.dlq": 1, "rec-empty.popEmpty": 1, "rec-auto.ackSuccess": 1, "rec-auto.autoAcked": 1,
		"rec-auto.ackRequests": 0}
	for k, v := range want {
		if sum[k] != v {
			t.Errorf("queue-ops %s = %v, want %v (series %v)", k, sum[k], v, ops["series"])
		}
	}
	var lag []map[string]any
	e.expect(e.do("GET", "/api/v1/analytics/queue-lag"+window, nil), 200).json(t, &lag)
	if len(lag) != 2 || lag[1]["queueName"] != "rec" || lag[1]["popCount"].(float64) != 3 || lag[1]["maxLagMs"].(float64) < lag[1]["avgLagMs"].(float64) {
		t.Fatalf("queue-lag: %v", lag)
	}
	wm := e.expect(e.do("GET", "/api/v1/analytics/worker-metrics"+window, nil), 200).obj(t)
	summary := wm["summary"].(map[string]any)
	if summary["totalPushMessages"].(float64) != 6 || summary["totalPopMessages"].(float64) != 4 || len(wm["timeSeries"].([]any)) == 0 ||
		len(wm["workers"].([]any)) != 1 || wm["workers"].([]any)[0].(map[string]any)["workerId"] != "test" {
		t.Fatalf("worker-metrics: %v", wm)
	}
	sm := e.expect(e.do("GET", "/api/v1/analytics/system-metrics"+window, nil), 200).obj(t)
	replicas := sm["replicas"].([]any)
	if len(replicas) != 1 || sm["replicaCount"].(float64) != 1 {
		t.Fatalf("system-metrics: %v", sm)
	}
	point := replicas[0].(map[string]any)["timeSeries"].([]any)[0].(map[string]any)
	rss := point["metrics"].(map[string]any)["memory"].(map[string]any)["rss_bytes"].(map[string]any)
	if rss["avg"].(float64) <= 0 || rss["max"].(float64) < rss["min"].(float64) || point["sampleCount"].(float64) < 1 {
		t.Fatalf("system-metrics point: %v", point)
	}
	st := e.expect(e.do("GET", "/api/v1/status"+window, nil), 200).obj(t)
	var ingested, processed float64
	for _, b := range st["throughput"].([]any) {
		ingested += b.(map[string]any)["ingested"].(float64)
		processed += b.(map[string]any)["processed"].(float64)
	}
	eff := st["messages"].(map[string]any)["batchEfficiency"].(map[string]any)
	// Pushes: 2+3 then 1 in three requests; pops: 3, then none, then 1.
	if ingested != 6 || processed != 3 || eff["push"].(float64) != 2 || eff["pop"].(float64) != 4.0/3 || eff["ack"].(float64) != 3 ||
		len(st["workers"].([]any)) != 1 || st["statsAge"].(float64) < 0 {
		t.Fatalf("status: ingested %v, batchEfficiency %v: %v", ingested, eff, st)
	}
}
