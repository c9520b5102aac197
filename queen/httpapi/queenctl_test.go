package httpapi_test

import (
	"fmt"
	"testing"
	"time"
)

// TestQueenctlVerbRoutes walks contract-admin.md 4.10: every route a
// queenctl verb calls answers 2xx JSON in the shape the verb reads,
// including the cases where Queen answers 2xx for an object nobody used
// (a 404 there fails the verb). queenctl itself is not available here, so
// this is the checklist it would exercise, route by route.
func TestQueenctlVerbRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var items []item
	for i := 0; i < 50; i++ {
		items = append(items, item{"queue": "bench.q", "transactionId": fmt.Sprint("b", i), "payload": map[string]any{"i": i}})
	}
	e.push(items...)
	// "bench": a group consumes all 50, then the listing shows each consumed.
	for e.pop("/api/v1/pop/queue/bench.q?batch=100&consumerGroup=bench&autoAck=true") != nil {
	}
	list := e.expect(e.do("GET", "/api/v1/messages?queue=bench.q&limit=200", nil), 200).obj(t)
	msgs := list["messages"].([]any)
	if len(msgs) != 50 {
		t.Fatalf("messages list: %d rows", len(msgs))
	}
	for _, m := range msgs {
		if bs := m.(map[string]any)["busStatus"].(map[string]any); bs["consumedBy"].(float64) < 1 {
			t.Fatalf("bench: a consumed message shows busStatus %v", bs)
		}
	}
	// A popped, unacked message: messages get and messages traces.
	e.push(item{"queue": "q", "transactionId": "held"})
	p := e.pop("/api/v1/pop/queue/q")
	now := time.Now().UTC().Format(time.RFC3339)
	for _, c := range []struct {
		verb, method, path string
		body               any
		keys               []string
	}{
		{"cg list", "GET", "/api/v1/consumer-groups", nil, nil},
		{"cg lag", "GET", "/api/v1/consumer-groups/lagging?minLagSeconds=0", nil, nil},
		{"cg refresh-stats", "POST", "/api/v1/stats/refresh", nil, nil},
		{"cg seek --to now", "POST", "/api/v1/consumer-groups/never-used/queues/q/seek", map[string]any{"timestamp": now}, []string{"partitionsUpdated"}},
		{"replay --to beginning", "POST", "/api/v1/consumer-groups/never-used/queues/q/seek", map[string]any{"timestamp": "1970-01-01T00:00:00Z"}, []string{"partitionsUpdated"}},
		{"cg describe", "GET", "/api/v1/consumer-groups/never-used", nil, nil},
		{"messages list", "GET", "/api/v1/messages?queue=q&limit=5", nil, []string{"messages"}},
		{"partition describe", "GET", "/api/v1/messages?queue=q&partition=Default&limit=5", nil, []string{"messages"}},
		{"messages get", "GET", "/api/v1/messages/" + p.PartitionID + "/held", nil, []string{"transactionId", "partitionId"}},
		{"messages traces", "GET", "/api/v1/traces/" + p.PartitionID + "/held", nil, []string{"traces"}},
		{"partition list", "GET", "/api/v1/status/queues/q?includePartitions=true", nil, []string{"partitions", "queue"}},
		{"status", "GET", "/api/v1/status", nil, []string{"queues", "messages", "leases"}},
		{"queue stats", "GET", "/api/v1/status/queues", nil, []string{"queues", "pagination"}},
		{"namespace list", "GET", "/api/v1/resources/namespaces", nil, []string{"namespaces"}},
		{"task list", "GET", "/api/v1/resources/tasks", nil, []string{"tasks"}},
		{"queue list", "GET", "/api/v1/resources/queues", nil, []string{"queues"}},
		{"queue describe", "GET", "/api/v1/resources/queues/q", nil, []string{"name", "partitions"}},
		{"metrics", "GET", "/metrics", nil, []string{"uptime"}},
		{"analytics overview", "GET", "/api/v1/status/analytics", nil, []string{"dataPoints"}},
		{"analytics queue-ops", "GET", "/api/v1/analytics/queue-ops", nil, []string{"series"}},
		{"analytics queue-parked", "GET", "/api/v1/analytics/queue-parked-replicas", nil, []string{"replicas"}},
		{"analytics retention", "GET", "/api/v1/analytics/retention", nil, []string{"totals"}},
		{"analytics system", "GET", "/api/v1/analytics/system-metrics", nil, []string{"replicas"}},
		{"analytics worker", "GET", "/api/v1/analytics/worker-metrics", nil, []string{"summary"}},
		{"analytics postgres", "GET", "/api/v1/analytics/postgres-stats", nil, []string{"database"}},
		{"traces names", "GET", "/api/v1/traces/names", nil, []string{"trace_names"}},
		{"dlq list", "GET", "/api/v1/dlq?queue=q", nil, []string{"messages"}},
		{"maintenance", "GET", "/api/v1/system/maintenance", nil, nil},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status < 200 || r.status >= 300 {
			t.Errorf("%s (%s %s): %d %s", c.verb, c.method, c.path, r.status, r.body)
			continue
		}
		if len(c.keys) == 0 {
			continue
		}
		body := r.obj(t)
		for _, k := range c.keys {
			if _, ok := body[k]; !ok {
				t.Errorf("%s: no %q in %s", c.verb, k, r.body)
			}
		}
	}
	var lag []any
	e.expect(e.do("GET", "/api/v1/analytics/queue-lag", nil), 200).json(t, &lag)
}
