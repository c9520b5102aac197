package httpapi_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

func TestPopEmptyIs204AndShapeOnHit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.do("GET", "/api/v1/pop/queue/none", nil); r.status != 204 || len(r.body) != 0 {
		t.Fatalf("pop of unknown queue: %d %q", r.status, r.body)
	}
	e.push(item{"queue": "q", "payload": map[string]any{"k": "v"}, "transactionId": "t1"})
	r := e.expect(e.do("GET", "/api/v1/pop/queue/q?batch=5", nil), 200)
	body := r.obj(t)
	for _, f := range []string{"success", "queue", "partition", "partitionId", "leaseId", "consumerGroup", "messages", "partitionsClaimed"} {
		if _, ok := body[f]; !ok {
			t.Fatalf("pop body lacks %s: %s", f, r.body)
		}
	}
	msg := body["messages"].([]any)[0].(map[string]any)
	for _, f := range []string{"id", "transactionId", "traceId", "data", "producerSub", "createdAt", "partitionId", "partition", "leaseId", "consumerGroup"} {
		if _, ok := msg[f]; !ok {
			t.Fatalf("message lacks %s: %v", f, msg)
		}
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000000Z", msg["createdAt"].(string)); err != nil {
		t.Fatalf("createdAt format: %v", err)
	}
}

func TestFIFOWithinPartitionAcrossBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var want []string
	for i := 0; i < 12; i++ {
		txid := fmt.Sprintf("m%02d", i)
		want = append(want, txid)
		e.push(item{"queue": "fifo", "partition": "p", "transactionId": txid})
	}
	var got []string
	for {
		p := e.pop("/api/v1/pop/queue/fifo/partition/p?batch=5")
		if p == nil {
			break
		}
		got = append(got, p.txids()...)
		for _, m := range p.Messages {
			e.ack(m.TransactionID, m.PartitionID, m.LeaseID, "completed")
		}
	}
	if !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "lq", "options": map[string]any{"leaseTime": 30}}), 200)
	e.push(item{"queue": "lq", "transactionId": "x"})
	first := e.pop("/api/v1/pop/queue/lq")
	if first == nil {
		t.Fatal("no message")
	}
	if e.pop("/api/v1/pop/queue/lq") != nil {
		t.Fatal("a second consumer got the partition while the lease is live")
	}
	e.advanceDB(31 * time.Second)
	second := e.pop("/api/v1/pop/queue/lq")
	if second == nil || second.Messages[0].TransactionID != "x" || second.LeaseID == first.LeaseID {
		t.Fatalf("after expiry the message should be redelivered under a new lease: %+v", second)
	}
	// The first consumer's lease is gone: its ack must not complete the
	// message now held by the second.
	if a := e.ack("x", first.PartitionID, first.LeaseID, "completed"); a["success"] != false || a["error"] != "Invalid or expired lease" {
		t.Fatalf("stale ack: %v", a)
	}
	if a := e.ack("x", second.PartitionID, second.LeaseID, "completed"); a["success"] != true {
		t.Fatalf("live ack: %v", a)
	}
}

func TestLeaseSecondsOverride(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "ls", "transactionId": "x"})
	if e.pop("/api/v1/pop/queue/ls?leaseSeconds=5") == nil {
		t.Fatal("no message")
	}
	e.advanceDB(6 * time.Second)
	if e.pop("/api/v1/pop/queue/ls") == nil {
		t.Fatal("leaseSeconds=5 should have expired after 6 s (queue leaseTime is 300)")
	}
}

func TestConsumerGroupsFanOutAndSubscriptionModes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "fan", "transactionId": "old"})
	// Group a subscribes from the beginning; group b only to new messages.
	a := e.pop("/api/v1/pop/queue/fan?consumerGroup=a&subscriptionMode=all&autoAck=true")
	if a == nil || a.Messages[0].TransactionID != "old" || a.LeaseID != "" {
		t.Fatalf("group a (all, autoAck): %+v", a)
	}
	if b := e.pop("/api/v1/pop/queue/fan?consumerGroup=b&subscriptionMode=new"); b != nil {
		t.Fatalf("group b (new) must not see old messages: %+v", b)
	}
	e.advanceDB(time.Second) // the next push is strictly after b's subscription
	e.push(item{"queue": "fan", "transactionId": "fresh"})
	for _, g := range []string{"a", "b"} {
		p := e.pop("/api/v1/pop/queue/fan?consumerGroup=" + g + "&autoAck=true")
		if p == nil || !equal(p.txids(), []string{"fresh"}) || p.ConsumerGroup != g {
			t.Fatalf("group %s: %+v", g, p)
		}
	}
	// Queue mode is its own cursor: it still sees both.
	q := e.pop("/api/v1/pop/queue/fan?batch=10")
	if q == nil || !equal(q.txids(), []string{"old", "fresh"}) {
		t.Fatalf("queue mode: %+v", q)
	}
	// subscriptionFrom: a timestamp between the two pushes.
	e.push(item{"queue": "sf", "transactionId": "before"})
	e.advanceDB(time.Minute)
	from := time.Now().Add(e.shiftNow() - time.Second).UTC().Format(time.RFC3339Nano)
	e.push(item{"queue": "sf", "transactionId": "after"})
	p := e.pop("/api/v1/pop/queue/sf?batch=10&consumerGroup=c&subscriptionFrom=" + from)
	if p == nil || !equal(p.txids(), []string{"after"}) {
		t.Fatalf("subscriptionFrom: %+v", p)
	}
	// Any other mode is all (the JS and Python clients send from_beginning).
	e.push(item{"queue": "fb", "transactionId": "old"})
	if p := e.pop("/api/v1/pop/queue/fb?consumerGroup=fresh&subscriptionMode=from_beginning"); p == nil || !equal(p.txids(), []string{"old"}) {
		t.Fatalf("subscriptionMode=from_beginning: %+v", p)
	}
	e.push(item{"queue": "nw", "transactionId": "old"})
	if p := e.pop("/api/v1/pop/queue/nw?consumerGroup=late&subscriptionMode=%20New-Only%20"); p != nil {
		t.Fatalf("subscriptionMode= New-Only  (trimmed, any case) is new: %+v", p)
	}
}

func (e *env) shiftNow() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shift
}

func TestMultiPartitionPopAndExtendRenewsAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := 0; i < 3; i++ {
		e.push(item{"queue": "mp", "partition": fmt.Sprint("p", i), "transactionId": fmt.Sprint("t", i)})
	}
	p := e.pop("/api/v1/pop/queue/mp?batch=10&partitions=3")
	if p == nil || p.Claimed != 3 || len(p.Messages) != 3 {
		t.Fatalf("multi-partition pop: %+v", p)
	}
	for _, m := range p.Messages {
		if m.LeaseID != p.LeaseID {
			t.Fatal("all messages of one pop share one leaseId")
		}
	}
	r := e.expect(e.do("POST", "/api/v1/lease/"+p.LeaseID+"/extend", `{}`), 200).obj(t)
	if r["success"] != true || r["renewed"].(float64) != 3 || r["newExpiresAt"] == nil || r["lease_expires_at"] == nil {
		t.Fatalf("extend: %v", r)
	}
	r = e.expect(e.do("POST", "/api/v1/lease/"+p.LeaseID+"/extend", map[string]any{"seconds": 900}), 200).obj(t)
	e.advanceDB(600 * time.Second) // past leaseTime 300, inside the extension
	if e.pop("/api/v1/pop/queue/mp?partitions=3") != nil {
		t.Fatal("extended leases expired early")
	}
	// An empty body is accepted too; an unknown lease renews nothing.
	r = e.expect(e.do("POST", "/api/v1/lease/nope/extend", nil), 200).obj(t)
	if r["success"] != false || r["renewed"].(float64) != 0 {
		t.Fatalf("unknown lease: %v", r)
	}
	for _, body := range []string{`{"seconds":"ten"}`, `{"seconds":0}`, `{"seconds":99999999999}`} {
		if r := e.do("POST", "/api/v1/lease/x/extend", body); r.status != 400 {
			t.Fatalf("bad seconds %s: %d", body, r.status)
		}
	}
	for _, q := range []string{"leaseSeconds=99999999999", "leaseSeconds=-1", "batch=0", "batch=10001", "partitions=0", "partitions=10001"} {
		if r := e.do("GET", "/api/v1/pop/queue/mp?"+q, nil); r.status != 400 || r.obj(t)["error"] == nil {
			t.Fatalf("pop with %s: %d %s", q, r.status, r.body)
		}
	}
}

func TestExclusiveLeasesUnderConcurrentPops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := 0; i < 4; i++ {
		for j := 0; j < 5; j++ {
			e.push(item{"queue": "ex", "partition": fmt.Sprint("p", i), "transactionId": fmt.Sprintf("p%d-%d", i, j)})
		}
	}
	var mu sync.Mutex
	holders := map[string]string{}
	var wg sync.WaitGroup
	for c := 0; c < 12; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := e.pop("/api/v1/pop/queue/ex?batch=100")
			if p == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := holders[p.Partition]; ok {
				t.Errorf("partition %s leased twice: %s and %s", p.Partition, prev, p.LeaseID)
			}
			holders[p.Partition] = p.LeaseID
			if len(p.Messages) != 5 {
				t.Errorf("partition %s: %d messages", p.Partition, len(p.Messages))
			}
		}()
	}
	wg.Wait()
	if len(holders) != 4 {
		t.Fatalf("%d partitions claimed, want 4", len(holders))
	}
}

func TestLongPollWakesOnPushAndTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := time.Now()
	if r := e.do("GET", "/api/v1/pop/queue/lp?wait=true&timeout=300", nil); r.status != 204 {
		t.Fatalf("long poll timeout: %d", r.status)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("long poll returned after %v, before its timeout", el)
	}
	got := make(chan *popped, 1)
	go func() { got <- e.pop("/api/v1/pop/queue/lp?wait=true&timeout=10000") }()
	time.Sleep(150 * time.Millisecond)
	e.push(item{"queue": "lp", "transactionId": "wake"})
	select {
	case p := <-got:
		if p == nil || p.Messages[0].TransactionID != "wake" {
			t.Fatalf("long poll: %+v", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked pop not released by the push")
	}
}

func TestAbandonedLongPollClaimsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.doCtx(ctx, "GET", "/api/v1/pop/queue/ab?wait=true&timeout=10000", nil)
	}()
	time.Sleep(100 * time.Millisecond)
	cancel() // the client goes away while parked
	<-done
	time.Sleep(100 * time.Millisecond)
	e.push(item{"queue": "ab", "transactionId": "m"})
	time.Sleep(200 * time.Millisecond)
	if p := e.pop("/api/v1/pop/queue/ab"); p == nil {
		t.Fatal("the abandoned long poll took a lease and hid the partition")
	}
}

// The client leaves while its claim is running in PostgreSQL (held up here
// by a table lock): the claim finishes, and the broker must give the lease
// back at once rather than hide the partition for its 300 s lease.
func TestClaimFinishingAfterTheClientLeftIsReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "gone", "options": map[string]any{"leaseTime": 300}}), 200)
	e.push(item{"queue": "gone", "transactionId": "m"})
	if e.pop("/api/v1/pop/queue/gone?batch=1&autoAck=true") == nil { // warm the caches: the next pop goes straight to the claim
		t.Fatal("no message")
	}
	e.push(item{"queue": "gone", "transactionId": "m2"})
	lock, err := e.store.Pool().Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(context.Background(), "LOCK TABLE queen.messages IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.doCtx(ctx, "GET", "/api/v1/pop/queue/gone?batch=5", nil)
	}()
	waiting := func() int {
		var n int
		if err := e.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for waiting() == 0 { // until the claim waits on the lock
		if time.Now().After(deadline) {
			t.Fatal("the pop never reached the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if err := lock.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Until nothing but this query runs: the abandoned claim is done.
	for {
		var n int
		if err := e.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if p := e.pop("/api/v1/pop/queue/gone?batch=5"); p != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the claim that finished after its client left was not released: the partition is hidden for the lease")
}

func TestDelayedProcessingAndWindowBuffer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "d", "options": map[string]any{"delayedProcessing": 10}}), 200)
	e.push(item{"queue": "d", "transactionId": "d1"})
	if e.pop("/api/v1/pop/queue/d") != nil {
		t.Fatal("delayed message delivered early")
	}
	e.advanceDB(11 * time.Second)
	if p := e.pop("/api/v1/pop/queue/d"); p == nil {
		t.Fatal("delayed message not delivered after its delay")
	}

	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "w", "options": map[string]any{"windowBuffer": 5}}), 200)
	e.push(item{"queue": "w", "partition": "p", "transactionId": "w1"})
	if e.pop("/api/v1/pop/queue/w") != nil || e.pop("/api/v1/pop/queue/w/partition/p") != nil {
		t.Fatal("window buffer: served while the newest message is younger than the window")
	}
	e.advanceDB(6 * time.Second)
	if p := e.pop("/api/v1/pop/queue/w"); p == nil {
		t.Fatal("window buffer: not served after the window")
	}
}

func TestNamespaceTaskPopPrefersPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "billing.low", "options": map[string]any{"priority": 1}}), 200)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "billing.high", "options": map[string]any{"priority": 9}}), 200)
	e.push(item{"queue": "billing.low", "transactionId": "l"}, item{"queue": "billing.high", "transactionId": "h"})
	var got []string
	for {
		p := e.pop("/api/v1/pop?namespace=billing&autoAck=true")
		if p == nil {
			break
		}
		got = append(got, p.txids()...)
	}
	if !equal(got, []string{"h", "l"}) {
		t.Fatalf("discovery order %v", got)
	}
	if p := e.pop("/api/v1/pop?task=high"); p != nil {
		t.Fatalf("already consumed: %+v", p)
	}
	if r := e.do("GET", "/api/v1/pop", nil); r.status != 400 {
		t.Fatalf("pop without namespace or task: %d", r.status)
	}
}

func TestConcurrentProducersConsumersDeliverEveryAckedPushOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const producers, perProducer, consumers, partitions = 6, 60, 6, 2
	var (
		mu        sync.Mutex
		acked     = map[string]bool{}
		delivered = map[string]int{}
		wg        sync.WaitGroup
	)
	producing := make(chan struct{})
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				txid := fmt.Sprintf("p%d-%d", p, i)
				res := e.push(item{"queue": "race", "partition": fmt.Sprint(i % partitions), "transactionId": txid})
				if res[0]["status"] == "queued" {
					mu.Lock()
					acked[txid] = true
					mu.Unlock()
				}
			}
		}()
	}
	var cwg sync.WaitGroup
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			idle := 0
			for {
				p := e.pop("/api/v1/pop/queue/race?batch=7")
				if p == nil {
					select {
					case <-producing:
						idle++
						if idle > 5 {
							return
						}
					default:
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				var acks []map[string]any
				for _, m := range p.Messages {
					acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"})
				}
				res := e.expect(e.do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}), 200).arr(t)
				mu.Lock()
				for i, r := range res {
					if r["success"] == true {
						delivered[p.Messages[i].TransactionID]++
					} else {
						t.Errorf("ack failed: %v", r)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(producing)
	cwg.Wait()
	var lost, dup []string
	for txid := range acked {
		if delivered[txid] == 0 {
			lost = append(lost, txid)
		}
	}
	for txid, n := range delivered {
		if n > 1 {
			dup = append(dup, txid)
		}
	}
	sort.Strings(lost)
	if len(lost) > 0 || len(dup) > 0 || len(acked) != producers*perProducer {
		t.Fatalf("acked %d; lost %v; delivered twice %v", len(acked), lost, dup)
	}
}

// autopilot=true leaves the unset knobs to the broker: a missing batch
// becomes 200 (what Queen's clients expect of a broker without a
// controller), a given one is kept, and the sizes used are echoed back.
func TestAutopilotPopSizesTheBatchItWasLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	items := make([]item, 250)
	for i := range items {
		items[i] = item{"queue": "ap", "transactionId": fmt.Sprintf("m%d", i)}
	}
	e.push(items...)
	var got struct {
		popped
		Autopilot *struct{ Batch, Partitions int } `json:"autopilot"`
	}
	e.expect(e.do("GET", "/api/v1/pop/queue/ap?autopilot=true&consumerGroup=a", nil), 200).json(t, &got)
	if len(got.Messages) != 200 || got.Autopilot == nil || got.Autopilot.Batch != 200 || got.Autopilot.Partitions != 1 {
		t.Fatalf("autopilot without batch: %d messages, %+v", len(got.Messages), got.Autopilot)
	}
	got.Autopilot = nil
	e.expect(e.do("GET", "/api/v1/pop/queue/ap?autopilot=true&batch=5&consumerGroup=b", nil), 200).json(t, &got)
	if len(got.Messages) != 5 || got.Autopilot == nil || got.Autopilot.Batch != 5 {
		t.Fatalf("autopilot with a batch: %d messages, %+v", len(got.Messages), got.Autopilot)
	}
	got.Autopilot = nil
	e.expect(e.do("GET", "/api/v1/pop/queue/ap?consumerGroup=c", nil), 200).json(t, &got)
	if len(got.Messages) != 1 || got.Autopilot != nil {
		t.Fatalf("no autopilot: %d messages, %+v", len(got.Messages), got.Autopilot)
	}
}
