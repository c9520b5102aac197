package httpapi_test

import (
	"strings"
	"testing"
)

func TestAckFailedRetriesThenDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "r", "options": map[string]any{"retryLimit": 2}}), 200)
	e.push(item{"queue": "r", "transactionId": "bad", "payload": map[string]any{"v": 1}}, item{"queue": "r", "transactionId": "next"})
	for attempt := 0; attempt <= 2; attempt++ {
		p := e.pop("/api/v1/pop/queue/r")
		if p == nil || p.Messages[0].TransactionID != "bad" || p.Messages[0].RetryCount != attempt {
			t.Fatalf("attempt %d: %+v", attempt, p)
		}
		a := e.ack("bad", p.PartitionID, p.LeaseID, "failed", "error", "boom")
		wantDLQ := attempt == 2
		if a["success"] != true || a["dlq"] != wantDLQ || a["leaseReleased"] != true {
			t.Fatalf("attempt %d ack: %v", attempt, a)
		}
	}
	p := e.pop("/api/v1/pop/queue/r")
	if p == nil || p.Messages[0].TransactionID != "next" {
		t.Fatalf("after DLQ the cursor moves on: %+v", p)
	}
	dlq := e.expect(e.do("GET", "/api/v1/dlq?queue=r", nil), 200).obj(t)
	msgs := dlq["messages"].([]any)
	if dlq["total"].(float64) != 1 || len(msgs) != 1 {
		t.Fatalf("dlq: %v", dlq)
	}
	m := msgs[0].(map[string]any)
	if m["transactionId"] != "bad" || m["errorMessage"] != "boom" || m["retryCount"].(float64) != 2 ||
		m["consumerGroup"] != "__QUEUE_MODE__" || m["data"].(map[string]any)["v"].(float64) != 1 {
		t.Fatalf("dlq entry: %v", m)
	}
	if _, ok := dlq["pagination"].(map[string]any)["limit"]; !ok {
		t.Fatalf("dlq pagination: %v", dlq)
	}
	for _, m := range e.expect(e.do("GET", "/api/v1/messages?queue=r", nil), 200).obj(t)["messages"].([]any) {
		row := m.(map[string]any)
		if want := map[string]float64{"bad": 2, "next": 0}[row["transactionId"].(string)]; row["retryCount"] != want {
			t.Fatalf("messages list retryCount: %v, want %v", row, want)
		}
	}
}

func TestAckRetryAndDLQStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "s", "transactionId": "a"}, item{"queue": "s", "transactionId": "b"})
	p := e.pop("/api/v1/pop/queue/s")
	if a := e.ack("a", p.PartitionID, p.LeaseID, "retry"); a["success"] != true || a["leaseReleased"] != true {
		t.Fatalf("retry: %v", a)
	}
	p = e.pop("/api/v1/pop/queue/s")
	if p.Messages[0].TransactionID != "a" || p.Messages[0].RetryCount != 0 {
		t.Fatalf("retry must redeliver without charging the budget: %+v", p)
	}
	if a := e.ack("a", p.PartitionID, p.LeaseID, "dlq"); a["dlq"] != true {
		t.Fatalf("dlq: %v", a)
	}
	p = e.pop("/api/v1/pop/queue/s")
	if p.Messages[0].TransactionID != "b" {
		t.Fatalf("after dlq: %+v", p)
	}
}

func TestAckLeaseCompareAndSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "c", "transactionId": "a"}, item{"queue": "c", "transactionId": "b"})
	p := e.pop("/api/v1/pop/queue/c?batch=2")
	if a := e.ack("a", p.PartitionID, "01900000-0000-7000-8000-000000000000", "completed"); a["success"] != false || a["error"] != "Invalid or expired lease" {
		t.Fatalf("wrong lease token: %v", a)
	}
	if a := e.ack("zzz", p.PartitionID, p.LeaseID, "completed"); a["error"] != "Message not found" {
		t.Fatalf("unknown txid: %v", a)
	}
	if a := e.ack("a", "not-a-uuid", p.LeaseID, "completed"); a["error"] != "Message not found" {
		t.Fatalf("malformed partition id: %v", a)
	}
	// Completing b first commits a implicitly (the cursor passes it), and
	// the cursor reaching the end of the batch ends the lease.
	if a := e.ack("b", p.PartitionID, p.LeaseID, "completed"); a["success"] != true || a["leaseReleased"] != true {
		t.Fatalf("ack b: %v", a)
	}
	if a := e.ack("a", p.PartitionID, p.LeaseID, "completed"); a["success"] != false || !strings.HasPrefix(a["error"].(string), "already committed") {
		t.Fatalf("ack behind the cursor: %v", a)
	}
	// An ack without a token still needs a live lease, and covers only
	// messages handed out under it.
	e.push(item{"queue": "c", "transactionId": "c"})
	if a := e.ack("c", p.PartitionID, "", "completed"); a["success"] != false {
		t.Fatalf("ack of a message nobody leased: %v", a)
	}
	e.push(item{"queue": "c", "transactionId": "d"})
	p2 := e.pop("/api/v1/pop/queue/c?batch=1")
	if p2 == nil || p2.Messages[0].TransactionID != "c" {
		t.Fatalf("pop c: %+v", p2)
	}
	if a := e.ack("d", p.PartitionID, p2.LeaseID, "completed"); a["success"] != false || a["error"] != "Invalid or expired lease" {
		t.Fatalf("ack of a message past the leased batch: %v", a)
	}
}

func TestAckBatchAndValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "ab", "transactionId": "1"}, item{"queue": "ab", "transactionId": "2"}, item{"queue": "ab", "transactionId": "3"})
	p := e.pop("/api/v1/pop/queue/ab?batch=3")
	body := map[string]any{"consumerGroup": nil, "acknowledgments": []any{
		map[string]any{"transactionId": "3", "partitionId": p.PartitionID, "leaseId": p.LeaseID, "status": "completed"},
		map[string]any{"transactionId": "1", "partitionId": p.PartitionID, "leaseId": p.LeaseID, "status": true},
		map[string]any{"transactionId": "2", "partitionId": p.PartitionID, "leaseId": p.LeaseID},
	}}
	res := e.expect(e.do("POST", "/api/v1/ack/batch", body), 200).arr(t)
	for i, r := range res {
		if r["success"] != true || int(r["index"].(float64)) != i || r["queueName"] != "ab" || r["partitionName"] != "Default" {
			t.Fatalf("batch result %d: %v", i, r)
		}
	}
	if res[0]["leaseReleased"] != true {
		t.Fatalf("acking the whole batch releases the lease: %v", res)
	}
	for _, c := range []struct{ path, body, want string }{
		{"/api/v1/ack", `{"partitionId":"x"}`, "transactionId is required"},
		{"/api/v1/ack", `{"transactionId":"x"}`, "partitionId is required"},
		{"/api/v1/ack", `{"transactionId":"x","partitionId":"y","leaseId":5}`, "leaseId must be a string"},
		{"/api/v1/ack/batch", `{}`, "acknowledgments array is required"},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"x"}]}`, "acknowledgments[0].partitionId is required"},
	} {
		r := e.do("POST", c.path, c.body)
		if r.status != 400 || !strings.Contains(r.obj(t)["error"].(string), c.want) {
			t.Errorf("%s %s: %d %s", c.path, c.body, r.status, r.body)
		}
	}
}

// The DLQ listing honours partition, from and to (queenctl's filtered
// drain deletes what the listing returns, so an ignored filter would
// delete too much); a bad time is a 400 naming it.
func TestDLQListingFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "f", "partition": "p1", "transactionId": "a"}, item{"queue": "f", "partition": "p2", "transactionId": "b"})
	for _, part := range []string{"p1", "p2"} {
		p := e.pop("/api/v1/pop/queue/f/partition/" + part)
		e.ack(p.Messages[0].TransactionID, p.PartitionID, p.LeaseID, "dlq")
	}
	count := func(query string) float64 {
		t.Helper()
		return e.expect(e.do("GET", "/api/v1/dlq?queue=f"+query, nil), 200).obj(t)["total"].(float64)
	}
	past, future := "2000-01-01T00:00:00Z", "2999-01-01%2000:00:00"
	for query, want := range map[string]float64{"": 2, "&partition=p1": 1, "&partition=nope": 0,
		"&from=" + past: 2, "&from=" + future: 0, "&to=" + past: 0, "&partition=p2&to=" + future: 1} {
		if got := count(query); got != want {
			t.Errorf("dlq%s: total %v, want %v", query, got, want)
		}
	}
	if big := e.expect(e.do("GET", "/api/v1/dlq?queue=f&limit=99999", nil), 200).obj(t); big["pagination"].(map[string]any)["limit"] != float64(10000) {
		t.Fatalf("a limit above the ceiling is clamped: %v", big["pagination"])
	}
	e.expect(e.do("GET", "/api/v1/dlq?queue=f&limit=0", nil), 400)
	if r := e.do("GET", "/api/v1/dlq?queue=f&from=yesterday", nil); r.status != 400 || !strings.HasPrefix(r.obj(t)["error"].(string), "from:") {
		t.Fatalf("bad from: %d %s", r.status, r.body)
	}
}
