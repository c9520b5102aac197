package httpapi_test

import (
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/config"
)

// Traces are recorded against a message, refused with a 400 naming what is
// missing, 404 for an unknown message, read back per message, per name and
// as names, kept per tenant, and deleted with their message.
func TestTracesRecordReadAndGoWithTheirMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.TenancyHeader = true })
	e.push(item{"queue": "tr", "transactionId": "m1", "payload": map[string]any{"n": 1}}, item{"queue": "tr", "transactionId": "m2"})
	p := e.pop("/api/v1/pop/queue/tr?batch=2")
	if p == nil || len(p.Messages) != 2 {
		t.Fatalf("pop: %+v", p)
	}
	pid := p.Messages[0].PartitionID
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"partitionId": pid, "data": 1}, "transactionId and partitionId are required"},
		{map[string]any{"transactionId": "m1", "data": 1}, "transactionId and partitionId are required"},
		{map[string]any{"transactionId": "m1", "partitionId": pid}, "data is required"},
		{map[string]any{"transactionId": "m1", "partitionId": pid, "data": nil}, "data is required"},
		{map[string]any{"transactionId": "m1", "partitionId": "nope", "data": 1}, "partitionId must be a UUID"},
		{map[string]any{"transactionId": "m1", "partitionId": pid, "data": 1, "traceNames": 5}, "traceNames must be a string or an array of strings"},
	} {
		r := e.do("POST", "/api/v1/traces", c.body)
		if r.status != 400 || r.obj(t)["error"] != c.want {
			t.Fatalf("%v: %d %s, want 400 %q", c.body, r.status, r.body, c.want)
		}
	}
	if r := e.do("POST", "/api/v1/traces", map[string]any{"transactionId": "m1", "partitionId": pid, "data": "a\u0000b"}); r.status != 400 ||
		!strings.HasPrefix(r.obj(t)["error"].(string), "data contains") {
		t.Fatalf("NUL in data: %d %s", r.status, r.body)
	}
	r := e.do("POST", "/api/v1/traces", map[string]any{"transactionId": "none", "partitionId": pid, "data": 1})
	if r.status != 404 || r.obj(t)["success"] != false {
		t.Fatalf("unknown message: %d %s", r.status, r.body)
	}
	first := e.expect(e.do("POST", "/api/v1/traces", map[string]any{"transactionId": "m1", "partitionId": pid,
		"data": map[string]any{"step": 1}, "traceNames": []string{"order-7", "order-7", "checkout"}, "consumerGroup": nil}), 201).obj(t)
	if first["success"] != true || first["traceId"] == "" {
		t.Fatalf("record: %v", first)
	}
	e.expect(e.do("POST", "/api/v1/traces", map[string]any{"transactionId": "m1", "partitionId": pid,
		"data": "done", "traceNames": "order-7", "eventType": "processed", "consumerGroup": "g"}), 201)
	e.expect(e.do("POST", "/api/v1/traces", map[string]any{"transactionId": "m2", "partitionId": pid,
		"data": 2, "traceNames": []string{"order-7"}}), 201)

	of := e.expect(e.do("GET", "/api/v1/traces/"+pid+"/m1", nil), 200).obj(t)["traces"].([]any)
	if len(of) != 2 {
		t.Fatalf("traces of m1: %v", of)
	}
	t0, t1 := of[0].(map[string]any), of[1].(map[string]any)
	if t0["event_type"] != "info" || t0["consumer_group"] != "__QUEUE_MODE__" || t0["worker_id"] != "test" ||
		len(t0["trace_names"].([]any)) != 2 || t1["event_type"] != "processed" || t1["consumer_group"] != "g" || t1["data"] != "done" {
		t.Fatalf("traces of m1: %v", of)
	}
	if none := e.expect(e.do("GET", "/api/v1/traces/"+pid+"/absent", nil), 200).obj(t)["traces"].([]any); len(none) != 0 {
		t.Fatalf("traces of an untraced message: %v", none)
	}
	byName := e.expect(e.do("GET", "/api/v1/traces/by-name/order-7?limit=2", nil), 200).obj(t)
	if byName["total"].(float64) != 3 || len(byName["traces"].([]any)) != 2 {
		t.Fatalf("by name: %v", byName)
	}
	b0 := byName["traces"].([]any)[0].(map[string]any)
	if b0["queue_name"] != "tr" || b0["partition_name"] != "Default" || b0["transaction_id"] != "m1" || b0["message_payload"] == nil {
		t.Fatalf("by name row: %v", b0)
	}
	names := e.expect(e.do("GET", "/api/v1/traces/names", nil), 200).obj(t)
	if names["total"].(float64) != 2 {
		t.Fatalf("names: %v", names)
	}
	for _, n := range names["trace_names"].([]any) {
		n := n.(map[string]any)
		if n["trace_name"] == "order-7" && (n["trace_count"].(float64) != 3 || n["message_count"].(float64) != 2) {
			t.Fatalf("order-7: %v", n)
		}
	}
	if r := e.do("GET", "/api/v1/traces/names?limit=0", nil); r.status != 400 {
		t.Fatalf("limit 0: %d", r.status)
	}
	// Another tenant sees none of it.
	other := "22222222-2222-4222-8222-222222222222"
	if n := e.expect(e.do("GET", "/api/v1/traces/names", nil, "x-queen-tenant", other), 200).obj(t); n["total"].(float64) != 0 {
		t.Fatalf("another tenant's names: %v", n)
	}
	if r := e.do("POST", "/api/v1/traces", map[string]any{"transactionId": "m1", "partitionId": pid, "data": 1}, "x-queen-tenant", other); r.status != 404 {
		t.Fatalf("trace from another tenant: %d %s", r.status, r.body)
	}
	// A deleted message takes its traces with it.
	e.expect(e.do("DELETE", "/api/v1/messages/"+pid+"/m1", nil), 200)
	if of := e.expect(e.do("GET", "/api/v1/traces/"+pid+"/m1", nil), 200).obj(t)["traces"].([]any); len(of) != 0 {
		t.Fatalf("traces outlived their message: %v", of)
	}
}
