package httpapi_test

import (
	"context"
	"testing"
)

// TestRoutesThatDropWatermarksLetTheNextEmptyPopWriteThem: each route whose
// statement deletes a group's watermark rows tells the consumer, whose
// throttle would otherwise skip the check for 30 s after it last saw the
// row; the next empty pop writes the row again at once.
func TestRoutesThatDropWatermarksLetTheNextEmptyPopWriteThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rows := func() int {
		t.Helper()
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.consumer_watermarks
			WHERE queue_name = 'wmr' AND consumer_group = 'g'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	drain := func() {
		t.Helper()
		for e.pop("/api/v1/pop/queue/wmr?consumerGroup=g&autoAck=true&batch=10") != nil {
		}
	}
	e.push(item{"queue": "wmr", "transactionId": "m1"})
	drain()
	if n := rows(); n != 1 {
		t.Fatalf("after the first drain: %d watermark rows, want 1", n)
	}
	for _, step := range []struct {
		name, method, path string
		body               any
	}{
		{"a seek to a timestamp", "POST", "/api/v1/consumer-groups/g/queues/wmr/seek", map[string]any{"timestamp": "1970-01-01T00:00:00Z"}},
		{"a subscription change", "POST", "/api/v1/consumer-groups/g/subscription", map[string]any{"subscriptionTimestamp": "1970-01-01T00:00:00Z"}},
		{"a group delete on the queue", "DELETE", "/api/v1/consumer-groups/g/queues/wmr", nil},
		{"a group delete", "DELETE", "/api/v1/consumer-groups/g", nil},
		{"a queue delete", "DELETE", "/api/v1/resources/queues/wmr", nil},
	} {
		e.expect(e.do(step.method, step.path, step.body), 200)
		if n := rows(); n != 0 {
			t.Fatalf("%s kept the watermark (%d rows)", step.name, n)
		}
		if step.path == "/api/v1/resources/queues/wmr" {
			e.push(item{"queue": "wmr", "transactionId": "m2"})
		}
		drain()
		if n := rows(); n != 1 {
			t.Fatalf("after %s, the next empty pop wrote no watermark (%d rows)", step.name, n)
		}
	}
}
