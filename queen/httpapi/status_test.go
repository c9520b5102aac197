package httpapi_test

import (
	"context"
	"testing"
)

func TestStatusRoutesAreRealAndWellFormed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "sq", "namespace": "billing", "task": "invoice"}), 200)
	e.push(item{"queue": "sq", "partition": "p1", "transactionId": "a"}, item{"queue": "sq", "partition": "p2", "transactionId": "b"})
	p := e.pop("/api/v1/pop/queue/sq")
	if st := e.expect(e.do("GET", "/api/v1/status", nil), 200).obj(t); st["messages"].(map[string]any)["total"] != float64(0) ||
		len(st["queues"].([]any)) != 0 || st["queueStatsAge"] != float64(-1) {
		t.Fatalf("status before the first queue statistics refresh (the snapshot is empty): %v", st)
	}
	if _, err := e.store.RefreshQueueStats(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.expect(e.do("GET", "/api/v1/status", nil), 200).obj(t)
	msgs := st["messages"].(map[string]any)
	leases := st["leases"].(map[string]any)
	if msgs["total"] != float64(2) || leases["active"] != float64(1) || len(st["queues"].([]any)) != 1 ||
		st["bucketMinutes"] != float64(1) || len(st["throughput"].([]any)) != 0 {
		t.Fatalf("status: %v", st)
	}
	e.ack(p.Messages[0].TransactionID, p.PartitionID, p.LeaseID, "completed")
	qs := e.expect(e.do("GET", "/api/v1/status/queues?namespace=billing", nil), 200).obj(t)
	if rows := qs["queues"].([]any); len(rows) != 1 || rows[0].(map[string]any)["name"] != "sq" {
		t.Fatalf("status/queues: %v", qs)
	}
	if rows := e.expect(e.do("GET", "/api/v1/status/queues?task=other", nil), 200).obj(t)["queues"].([]any); len(rows) != 0 {
		t.Fatalf("task filter: %v", rows)
	}
	q := e.expect(e.do("GET", "/api/v1/status/queues/sq?includePartitions=true", nil), 200).obj(t)
	if parts := q["partitions"].([]any); len(parts) != 3 || q["totals"].(map[string]any)["pending"] != float64(1) {
		t.Fatalf("status/queues/sq (Default, p1, p2; one pending): %v", q)
	}
	e.expect(e.do("GET", "/api/v1/status/queues/nope", nil), 404)
	a := e.expect(e.do("GET", "/api/v1/status/analytics?interval=hour", nil), 200).obj(t)
	var sum float64
	for _, pt := range a["dataPoints"].([]any) {
		sum += pt.(map[string]any)["messages"].(float64)
	}
	if n := len(a["dataPoints"].([]any)); n < 24 || n > 25 || sum != 2 {
		t.Fatalf("analytics: %d points, %v messages: %v", n, sum, a)
	}
	e.expect(e.do("GET", "/api/v1/status?from=yesterday", nil), 400)
	ns := e.expect(e.do("GET", "/api/v1/resources/namespaces", nil), 200).obj(t)["namespaces"].([]any)
	if len(ns) != 1 || ns[0].(map[string]any)["namespace"] != "billing" || ns[0].(map[string]any)["queueCount"] != float64(1) ||
		ns[0].(map[string]any)["taskCount"] != float64(1) {
		t.Fatalf("namespaces: %v", ns)
	}
	if ts := e.expect(e.do("GET", "/api/v1/resources/tasks", nil), 200).obj(t)["tasks"].([]any); len(ts) != 1 || ts[0].(map[string]any)["namespaceCount"] != float64(1) {
		t.Fatalf("tasks: %v", ts)
	}
}
