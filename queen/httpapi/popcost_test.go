package httpapi_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/config"
)

// waitForLockWaiter waits until some session waits on a lock: the claim
// under test has reached the lock the test holds.
func (e *env) waitForLockWaiter(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the pop never reached the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitIdle waits until no statement but its own runs in the database.
func (e *env) waitIdle(t *testing.T) {
	t.Helper()
	for {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An autoAck pop whose client leaves while its claim waits on a lock
// (held here by a separate session) must leave the message where it was:
// the claim commits after the client has gone, and before, it completed
// the message then and there, so the queue counted it consumed and nobody
// had it. Now the claim is leased like any pop's, given back when the
// answer cannot be delivered, and the next pop gets the message.
func TestAutoAckPopWhoseClientLeftKeepsItsMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "aa-gone", "options": map[string]any{"leaseTime": 300}}), 200)
	e.push(item{"queue": "aa-gone", "transactionId": "warm"})
	if e.pop("/api/v1/pop/queue/aa-gone?autoAck=true") == nil { // warm the caches: the next pop goes straight to the claim
		t.Fatal("no message")
	}
	e.push(item{"queue": "aa-gone", "transactionId": "kept"})
	lock, err := e.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.Background()) }()
	if _, err := lock.Exec(context.Background(), "LOCK TABLE queen.messages IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.doCtx(ctx, "GET", "/api/v1/pop/queue/aa-gone?autoAck=true&batch=5", nil)
	}()
	e.waitForLockWaiter(t)
	cancel()
	<-done
	if err := lock.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitIdle(t) // the abandoned claim has ended
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if p := e.pop("/api/v1/pop/queue/aa-gone?autoAck=true"); p != nil {
			if got := p.txids(); len(got) != 1 || got[0] != "kept" {
				t.Fatalf("later pop got %v, want [kept]", got)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	var consumed int64
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(pc.total_messages_consumed), 0)
		FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id WHERE q.name = 'aa-gone'`).Scan(&consumed); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("the autoAck pop whose client left consumed the message (queue counts %d consumed): nobody received it", consumed)
}

// An autoAck pop completes its messages before its answer ends: the
// client's next pop finds the partition free and the next message, the
// answer names no lease, and the cursor row holds no lease afterwards.
func TestAutoAckPopCompletesBeforeItsAnswerEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "aa-seq", "options": map[string]any{"leaseTime": 300}}), 200)
	for i := 0; i < 5; i++ {
		e.push(item{"queue": "aa-seq", "transactionId": fmt.Sprintf("m%d", i)})
	}
	var got []string
	for i := 0; i < 5; i++ {
		p := e.pop("/api/v1/pop/queue/aa-seq?autoAck=true")
		if p == nil {
			t.Fatalf("pop %d answered 204 after %v: the previous autoAck pop still held the partition", i, got)
		}
		if p.LeaseID != "" || p.Messages[0].LeaseID != "" {
			t.Fatalf("autoAck answer names a lease: %q %q", p.LeaseID, p.Messages[0].LeaseID)
		}
		got = append(got, p.txids()...)
	}
	if !equal(got, []string{"m0", "m1", "m2", "m3", "m4"}) {
		t.Fatalf("order %v", got)
	}
	if p := e.pop("/api/v1/pop/queue/aa-seq"); p != nil {
		t.Fatalf("autoAcked messages delivered again: %v", p.txids())
	}
	var leased, consumed int64
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pc.lease_expires_at IS NOT NULL),
		sum(pc.total_messages_consumed) FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.name = 'aa-seq'`).Scan(&leased, &consumed); err != nil {
		t.Fatal(err)
	}
	if leased != 0 || consumed != 5 {
		t.Fatalf("cursor rows: %d leased, %d consumed; want 0 and 5", leased, consumed)
	}
}

// A pop of 20 messages of 5 MB answers what QUEEN_MAX_POP_BYTES allows
// (each payload counts twice: the answer writes it as data and as
// payload), always at least one message; the messages it leaves stay
// available to the next pops, in order. Before, the answer was 200 MB and
// the broker's heap grew by most of a gigabyte for it. The pop's
// allocations (broker and this client together, as they share the
// process) are measured and bounded.
func TestPopAnswerObeysTheByteBudget(t *testing.T) {
	e := newEnv(t)
	budget := config.Default().MaxPopBytes
	const n, size = 20, 5 << 20
	// Incompressible text, as most big payloads are (the budget counts
	// the text, so a compressed one is answered no bigger).
	raw := make([]byte, size*3/4)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	payload := base64.StdEncoding.EncodeToString(raw)
	for i := 0; i < n; i++ {
		e.push(item{"queue": "big", "transactionId": fmt.Sprintf("b%02d", i), "payload": payload})
	}
	var got []string
	first := true
	for len(got) < n {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := e.do("GET", "/api/v1/pop/queue/big?batch=20&autoAck=true", nil)
		runtime.ReadMemStats(&after)
		e.expect(r, 200)
		var p popped
		r.json(t, &p)
		if len(p.Messages) == 0 {
			t.Fatal("a 200 without messages")
		}
		if int64(len(r.body)) > budget+4096*int64(len(p.Messages)) && len(p.Messages) > 1 {
			t.Fatalf("answer of %d bytes with %d messages: over the %d-byte budget", len(r.body), len(p.Messages), budget)
		}
		if first {
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("pop of 20 x 5 MB, budget %d: %d messages, answer %d bytes, %d MiB allocated, heap %d -> %d MiB",
				budget, len(p.Messages), len(r.body), allocated>>20, before.HeapAlloc>>20, after.HeapAlloc>>20)
			// The answer once, the client's copy of it and decoding,
			// pgx's buffers for what was picked: a few budgets, never
			// the 20 messages.
			if limit := 6 * uint64(budget); allocated > limit {
				t.Fatalf("the pop allocated %d MiB, more than %d MiB", allocated>>20, limit>>20)
			}
			first = false
		}
		got = append(got, p.txids()...)
	}
	for i, txid := range got {
		if want := fmt.Sprintf("b%02d", i); txid != want {
			t.Fatalf("message %d is %s, want %s: a budget cut skipped or repeated messages (%v)", i, txid, want, got)
		}
	}
	if p := e.pop("/api/v1/pop/queue/big"); p != nil {
		t.Fatalf("delivered again: %v", p.txids())
	}
}

// A push of more items than limits.PushItems is 413 naming items, and
// writes nothing, by either decoder (an escaped string sends the body to
// encoding/json); a push at the limit is taken.
func TestPushItemCountIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := func(queue string, n int) string {
		var b strings.Builder
		b.WriteString(`{"items":[`)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"queue":%q}`, queue)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	for _, queue := range []string{"many", `m\u0061ny`} {
		r := e.do("POST", "/api/v1/push", body(queue, 10001))
		if r.status != 413 || !strings.Contains(string(r.body), "items") {
			t.Fatalf("push of 10001 items (queue %s): %d %s", queue, r.status, r.body)
		}
	}
	if r := e.do("GET", "/api/v1/resources/queues/many", nil); r.status != 404 {
		t.Fatalf("the refused push wrote something: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/push", body("many", 10000)); r.status != 201 {
		t.Fatalf("push of 10000 items: %d %.200s", r.status, r.body)
	}
}

// A pop whose answer cannot be written (the client read the status line
// and hung up, here with 10 MB unread) gives its claim back: the message
// is delivered to the next pop at once, not after the 300 s lease
// (leased) nor never (autoAck, which completed it before).
func TestPopWhoseAnswerCannotBeWrittenIsReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	raw := make([]byte, 5<<20*3/4)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	payload := base64.StdEncoding.EncodeToString(raw)
	addr := strings.TrimPrefix(e.url, "http://")
	for _, mode := range []string{"autoAck=true", "autoAck=false"} {
		queue := "unwritten-" + mode[len("autoAck="):]
		e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"leaseTime": 300}}), 200)
		e.push(item{"queue": queue, "transactionId": "big", "payload": payload})
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /api/v1/pop/queue/%s?%s HTTP/1.1\r\nHost: x\r\n\r\n", queue, mode)
		status, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.Contains(status, "200") {
			t.Fatalf("%s: status line %q %v", mode, status, err)
		}
		_ = conn.Close() // megabytes unread: the broker's writes fail
		deadline := time.Now().Add(20 * time.Second)
		for {
			if p := e.pop("/api/v1/pop/queue/" + queue + "?autoAck=true"); p != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the answer nobody received kept its message (leased for 300 s, or consumed)", mode)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The released autoAck claim consumed nothing, and analytics says so:
	// each queue's one autoAcked message is the pop that was answered.
	e.flushAnalytics()
	window := "?from=" + time.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339) + "&to=" + time.Now().Add(2*time.Minute).UTC().Format(time.RFC3339)
	ops := e.expect(e.do("GET", "/api/v1/analytics/queue-ops"+window, nil), 200).obj(t)
	acked := map[string]float64{}
	for _, row := range ops["series"].([]any) {
		r := row.(map[string]any)
		acked[r["queueName"].(string)] += r["autoAcked"].(float64)
	}
	if acked["unwritten-true"] != 1 || acked["unwritten-false"] != 1 {
		t.Fatalf("autoAcked per queue %v, want 1 each (the released claim counted none)", acked)
	}
}

// A transaction's push operations together are one push: more items than
// limits.PushItems is 413 naming them, nothing written.
func TestTransactionPushItemCountIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	op := func(n int) map[string]any {
		items := make([]map[string]any, n)
		for i := range items {
			items[i] = map[string]any{"queue": "txn-many"}
		}
		return map[string]any{"type": "push", "items": items}
	}
	r := e.do("POST", "/api/v1/transaction", map[string]any{"operations": []any{op(6000), op(4001)}})
	if r.status != 413 || !strings.Contains(string(r.body), "items") {
		t.Fatalf("transaction pushing 10001 items: %d %.300s", r.status, r.body)
	}
	if r := e.do("GET", "/api/v1/resources/queues/txn-many", nil); r.status != 404 {
		t.Fatalf("the refused transaction wrote something: %d %s", r.status, r.body)
	}
}
