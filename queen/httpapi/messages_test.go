package httpapi_test

import (
	"testing"
)

func TestMessageRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.push(item{"queue": "mq", "partition": "p", "transactionId": id, "payload": map[string]any{"id": id}})
	}
	p := e.pop("/api/v1/pop/queue/mq")
	status := func(query string) map[string]string {
		var body struct {
			Messages []struct {
				TransactionID string `json:"transactionId"`
				Status        string `json:"status"`
				QueueStatus   string `json:"queueStatus"`
			} `json:"messages"`
			Mode map[string]any `json:"mode"`
		}
		e.expect(e.do("GET", "/api/v1/messages?queue=mq"+query, nil), 200).json(t, &body)
		out := map[string]string{}
		for _, m := range body.Messages {
			out[m.TransactionID] = m.Status
		}
		if body.Mode["type"] != "queue" {
			t.Fatalf("mode: %v", body.Mode)
		}
		return out
	}
	if s := status(""); s["a"] != "processing" || s["b"] != "processing" || len(s) != 3 {
		t.Fatalf("while a lease is live every message past the cursor is processing: %v", s)
	}
	e.ack("a", p.PartitionID, p.LeaseID, "completed")
	if s := status(""); s["a"] != "completed" || s["b"] != "pending" || s["c"] != "pending" {
		t.Fatalf("after the ack: %v", s)
	}
	if s := status("&status=pending&limit=1"); len(s) != 1 || s["c"] != "pending" {
		t.Fatalf("status filter and limit, newest first: %v", s)
	}
	d := e.expect(e.do("GET", "/api/v1/messages/"+p.PartitionID+"/b", nil), 200).obj(t)
	if d["status"] != "pending" || d["payload"].(map[string]any)["id"] != "b" || d["data"] == nil || d["queueConfig"] == nil {
		t.Fatalf("get: %v", d)
	}
	e.expect(e.do("GET", "/api/v1/messages/"+p.PartitionID+"/nope", nil), 404)
	e.expect(e.do("GET", "/api/v1/messages/not-a-uuid/b", nil), 400)

	// Dead-letter b, see it, retry it, delete c.
	p = e.pop("/api/v1/pop/queue/mq")
	body := map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": "b", "partitionId": p.PartitionID, "status": "failed", "error": "bad"},
	}, "requiredLeases": []any{p.LeaseID}}
	e.expect(e.do("POST", "/api/v1/transaction", body), 200)
	if s := status(""); s["b"] != "dead_letter" {
		t.Fatalf("dead-lettered: %v", s)
	}
	r := e.expect(e.do("POST", "/api/v1/messages/"+p.PartitionID+"/b/retry", map[string]any{}), 200).obj(t)
	replayed := r["replayedAs"].(map[string]any)
	if r["dlqRowRemoved"] != true || replayed["status"] != "queued" {
		t.Fatalf("retry: %v", r)
	}
	e.expect(e.do("POST", "/api/v1/messages/"+p.PartitionID+"/b/retry", map[string]any{}), 404)
	if q := e.pop("/api/v1/pop/queue/mq?batch=10"); q == nil || len(q.Messages) != 2 || q.Messages[1].TransactionID != replayed["transaction_id"] {
		t.Fatalf("the retried copy comes after c: %+v", q)
	}
	if r := e.expect(e.do("DELETE", "/api/v1/messages/"+p.PartitionID+"/c", nil), 200).obj(t); r["success"] != true {
		t.Fatalf("delete: %v", r)
	}
	e.expect(e.do("DELETE", "/api/v1/messages/"+p.PartitionID+"/c", nil), 404)
}
