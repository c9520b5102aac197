package httpapi_test

import (
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/config"
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

// TestFindByTransaction: GET /api/v1/messages/by-transaction finds the
// tenant's messages with one exact transactionId in every queue and
// partition (newest first), narrows to a queue when given, bounds the
// answer by its limit, and sees no other tenant's messages.
func TestFindByTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.TenancyHeader = true })
	const t1, t2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	push := func(tenant, queue, partition, txid string) {
		e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": queue, "partition": partition,
			"transactionId": txid, "payload": map[string]any{"q": queue}}}}, "x-queen-tenant", tenant), 201)
	}
	push(t1, "fa", "p1", "order-7")
	push(t1, "fa", "p2", "order-7")
	push(t1, "fb", "Default", "order-7")
	push(t1, "fb", "Default", "order-70") // a longer id is no match
	push(t2, "fa", "p1", "order-7")       // another tenant's
	type found struct {
		TransactionID string `json:"transactionId"`
		Limit         int    `json:"limit"`
		Messages      []struct {
			TransactionID, Queue, Partition, PartitionID, Status, CreatedAt string
		} `json:"messages"`
	}
	find := func(query string) found {
		t.Helper()
		var f found
		e.expect(e.do("GET", "/api/v1/messages/by-transaction?"+query, nil, "x-queen-tenant", t1), 200).json(t, &f)
		return f
	}
	f := find("transactionId=order-7")
	var where []string
	for _, m := range f.Messages {
		if m.TransactionID != "order-7" || m.Status != "pending" || m.PartitionID == "" {
			t.Fatalf("a found message: %+v", m)
		}
		where = append(where, m.Queue+"/"+m.Partition)
	}
	if !equal(where, []string{"fb/Default", "fa/p2", "fa/p1"}) || f.Limit != 50 || f.TransactionID != "order-7" {
		t.Fatalf("order-7 of tenant 1, newest first: %v (%+v)", where, f)
	}
	if f := find("transactionId=order-7&queue=fa&limit=1"); len(f.Messages) != 1 || f.Messages[0].Queue != "fa" || f.Limit != 1 {
		t.Fatalf("queue fa, limit 1: %+v", f)
	}
	if f := find("transactionId=order-7&queue=fb"); len(f.Messages) != 1 || f.Messages[0].Queue != "fb" {
		t.Fatalf("queue fb: %+v", f)
	}
	if f := find("transactionId=nothing"); f.Messages == nil || len(f.Messages) != 0 {
		t.Fatalf("no match is an empty list: %+v", f)
	}
	// The detail route opens what the look-up found.
	e.expect(e.do("GET", "/api/v1/messages/"+f.Messages[0].PartitionID+"/order-7", nil, "x-queen-tenant", t1), 200)
	e.expect(e.do("GET", "/api/v1/messages/by-transaction", nil, "x-queen-tenant", t1), 400)
	// Past a field's limit, or a NUL PostgreSQL cannot take: a 400 naming
	// the field, not a database error.
	for _, query := range []string{"transactionId=" + strings.Repeat("t", 1025), "transactionId=a%00b", "transactionId=a&queue=q%00"} {
		r := e.expect(e.do("GET", "/api/v1/messages/by-transaction?"+query, nil, "x-queen-tenant", t1), 400)
		if !strings.Contains(string(r.body), "transactionId") && !strings.Contains(string(r.body), "queue") {
			t.Errorf("%.40s: the refusal names no field: %s", query, r.body)
		}
	}
}
