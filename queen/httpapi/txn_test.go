package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/config"
)

func TestTransactionPushAndAckAtomically(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "in", "transactionId": "job"})
	p := e.pop("/api/v1/pop/queue/in")
	body := map[string]any{
		"operations": []any{
			map[string]any{"type": "push", "items": []any{map[string]any{"queue": "out", "payload": 1, "transactionId": "result"}}},
			map[string]any{"type": "ack", "transactionId": "job", "partitionId": p.PartitionID, "status": "completed"},
		},
		"requiredLeases": []any{p.LeaseID},
	}
	r := e.expect(e.do("POST", "/api/v1/transaction", body), 200).obj(t)
	if r["success"] != true || r["transactionId"] == nil || len(r["results"].([]any)) != 2 {
		t.Fatalf("transaction: %v", r)
	}
	if e.pop("/api/v1/pop/queue/in") != nil {
		t.Fatal("acked in the transaction but redelivered")
	}
	if out := e.pop("/api/v1/pop/queue/out"); out == nil || out.Messages[0].TransactionID != "result" {
		t.Fatalf("pushed in the transaction but missing: %+v", out)
	}
}

func TestTransactionRollsBackEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "in", "transactionId": "job"})
	p := e.pop("/api/v1/pop/queue/in")
	// The ack names a message that does not exist: the push must not land.
	body := map[string]any{"operations": []any{
		map[string]any{"type": "push", "items": []any{map[string]any{"queue": "out", "transactionId": "r1"}}},
		map[string]any{"type": "ack", "transactionId": "ghost", "partitionId": p.PartitionID},
	}}
	r := e.expect(e.do("POST", "/api/v1/transaction", body), 200).obj(t)
	if r["success"] != false || !strings.Contains(r["error"].(string), "Message not found") {
		t.Fatalf("want rollback: %v", r)
	}
	if out := e.pop("/api/v1/pop/queue/out"); out != nil {
		t.Fatalf("rolled-back push is visible: %+v", out)
	}
	// A dead required lease aborts too.
	body = map[string]any{"operations": []any{
		map[string]any{"type": "push", "queue": "out", "transactionId": "r2"}, // flat form
	}, "requiredLeases": []any{"01900000-0000-7000-8000-000000000000"}}
	r = e.expect(e.do("POST", "/api/v1/transaction", body), 200).obj(t)
	if r["success"] != false || !strings.Contains(r["error"].(string), "invalid or expired") || r["reason"] != "ack_rejected" {
		t.Fatalf("dead lease: %v", r)
	}
	if out := e.pop("/api/v1/pop/queue/out"); out != nil {
		t.Fatalf("push under a dead lease is visible: %+v", out)
	}
	// The original lease is untouched and the job still ackable.
	if a := e.ack("job", p.PartitionID, p.LeaseID, "completed"); a["success"] != true {
		t.Fatalf("job ack after rollbacks: %v", a)
	}
	for _, c := range []struct{ body, want string }{
		{`{}`, "operations array is required"},
		{`{"operations":[]}`, "operations array is required"},
		{`{"operations":[{"type":"nope"}]}`, "operations[0].type must be push or ack"},
		{`{"operations":[{"type":"ack","transactionId":"x","partitionId":"y"}]}`, "operations[0].partitionId must be a UUID"},
		{`{"operations":[{"type":"push","items":[{"payload":1}]}]}`, "operations[0].items[0].queue is required"},
		{`{"operations":[{"type":"push","queue":"q"}],"requiredLeases":[1]}`, "requiredLeases[0]"},
	} {
		r := e.do("POST", "/api/v1/transaction", c.body)
		if r.status != 400 || !strings.Contains(r.obj(t)["error"].(string), c.want) {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}
}

func TestTransactionFailedAckGoesStraightToDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "in", "transactionId": "job"})
	p := e.pop("/api/v1/pop/queue/in")
	body := map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": "job", "partitionId": p.PartitionID, "status": "failed", "error": "bad"},
	}, "requiredLeases": []any{p.LeaseID}}
	r := e.expect(e.do("POST", "/api/v1/transaction", body), 200).obj(t)
	if r["success"] != true || r["results"].([]any)[0].(map[string]any)["dlq"] != true {
		t.Fatalf("failed ack in a transaction: %v", r)
	}
	if d := e.expect(e.do("GET", "/api/v1/dlq", nil), 200).obj(t); d["total"].(float64) != 1 {
		t.Fatalf("dlq: %v", d)
	}
}

// TestTransactionPushWakesAPopPerPartition: a committed transaction wakes,
// per queue, one parked pop for every partition it pushed into, as a push
// does. With a periodic re-check longer than the test, only a wake ends a
// parked pop; before the transaction's pushes carried their partition ids,
// both counted as one partition and the second pop slept to its timeout.
func TestTransactionPushWakesAPopPerPartition(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.PopWaitInitial, c.PopWaitMax = time.Minute, time.Minute })
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "tw"}), 200)
	got := make(chan *popped, 2)
	for range 2 {
		go func() { got <- e.pop("/api/v1/pop/queue/tw?wait=true&timeout=30000") }()
	}
	time.Sleep(500 * time.Millisecond) // both parked
	items := []any{
		map[string]any{"queue": "tw", "partition": "a", "payload": 1, "transactionId": "ta"},
		map[string]any{"queue": "tw", "partition": "b", "payload": 2, "transactionId": "tb"},
	}
	body := map[string]any{"operations": []any{map[string]any{"type": "push", "items": items}}}
	e.expect(e.do("POST", "/api/v1/transaction", body), 200)
	deadline := time.After(10 * time.Second)
	for range 2 {
		select {
		case p := <-got:
			if p == nil {
				t.Fatal("a woken pop found nothing")
			}
		case <-deadline:
			t.Fatal("a pop parked on a partition the transaction pushed into was not woken")
		}
	}
}
