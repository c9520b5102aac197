package consume_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/waker"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const tenant = config.DefaultTenant

// rig is a Consumer on a fresh database, a virtual clock and its own
// waker and drain channel, with the claims its observer saw.
type rig struct {
	st       *store.Store
	pool     *pgxpool.Pool
	hub      *waker.Hub
	clock    *clock.Sim
	draining chan struct{}
	c        *consume.Consumer

	mu     sync.Mutex
	claims []consume.Claim
	// timers counts the timers the consumer set: a pop that parks sets one.
	timers atomic.Int64
}

// counted is the rig's virtual clock, counting the timers set on it.
type counted struct {
	*clock.Sim
	n *atomic.Int64
}

func (c counted) NewTimer(d time.Duration) clock.Timer { c.n.Add(1); return c.Sim.NewTimer(d) }

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newRig(t *testing.T) *rig {
	t.Helper()
	pool := storetest.Pool(t)
	r := &rig{pool: pool, st: store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)}), hub: waker.New(),
		clock: clock.NewSim(start), draining: make(chan struct{})}
	r.c = consume.New(consume.Options{Store: r.st, Retry: storetest.Retry(r.st), Waker: r.hub, Clock: counted{r.clock, &r.timers}, Draining: r.draining,
		Wait:    consume.Wait{Initial: 100 * time.Millisecond, Threshold: 3, Factor: 2, Max: time.Second},
		OnClaim: func(c consume.Claim) { r.mu.Lock(); r.claims = append(r.claims, c); r.mu.Unlock() }})
	return r
}

// req is a leased pop of queue q: 300 s, so a claim nobody gives back
// hides the partition for the rest of the test.
func req(q string) consume.PopRequest {
	return consume.PopRequest{Tenant: tenant, Queue: q, Batch: 5, Partitions: 1, LeaseSeconds: 300}
}

func (r *rig) push(t *testing.T, q string, txids ...string) {
	t.Helper()
	items := make([]store.PushItem, len(txids))
	for i, id := range txids {
		items[i] = store.PushItem{Queue: q, TransactionID: id}
	}
	// Through a push path, as the broker pushes (store.Push left the store).
	if err := pushpath.New(pushpath.Options{Store: r.st, Retry: storetest.Retry(r.st)}).Replay(context.Background(), tenant, items); err != nil {
		t.Fatal(err)
	}
}

// popNow pops q once, without waiting, and names what it claimed.
func (r *rig) popNow(t *testing.T, q string) []string {
	t.Helper()
	res, err := r.c.Pop(context.Background(), consume.Request{Tenant: tenant, Queue: q}, r.c.One(req(q)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range res.Claim.Messages {
		got = append(got, m.TransactionID)
	}
	return got
}

func (r *rig) seen() []consume.Claim {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]consume.Claim(nil), r.claims...)
}

// popAsync runs a waiting pop of q in the background.
func (r *rig) popAsync(ctx context.Context, q string, timeout time.Duration, try consume.Try) <-chan consume.Result {
	done := make(chan consume.Result, 1)
	go func() {
		res, _ := r.c.Pop(ctx, consume.Request{Tenant: tenant, Queue: q, Wait: true, Timeout: timeout}, try)
		done <- res
	}()
	return done
}

// parked waits (in real time) until the pop has set its back-off timer.
func (r *rig) parked(t *testing.T) time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if at, ok := r.clock.NextTimer(); ok {
			return at
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the pop never parked")
	return time.Time{}
}

// A pop whose client is gone before it starts claims nothing: the try is
// never run, no claim is seen, the message stays for the next pop, and
// nothing is left parked.
func TestGoneClientClaimsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.push(t, "gone", "m")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tries := 0
	try := func(ctx context.Context) (consume.PopResult, error) { tries++; return r.c.One(req("gone"))(ctx) }
	res, err := r.c.Pop(ctx, consume.Request{Tenant: tenant, Queue: "gone", Wait: true, Timeout: time.Minute}, try)
	if err != nil || res.Outcome != consume.Gone {
		t.Fatalf("pop for a gone client: %+v %v", res, err)
	}
	if tries != 0 || len(r.seen()) != 0 {
		t.Fatalf("a gone client's pop ran %d tries and made claims %+v", tries, r.seen())
	}
	if got := r.popNow(t, "gone"); len(got) != 1 {
		t.Fatalf("next pop got %v, want the message", got)
	}
	if r.hub.Len() != 0 {
		t.Fatal("a pop left a waiter parked")
	}
}

// The client leaves while the claim runs: the claim is not cancelled (its
// context stays live), it finishes, the observer sees it, and it is given
// back at once: the partition is poppable again, not hidden for 300 s.
func TestClaimThatRacedADisconnectIsReleased(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.push(t, "raced", "m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	try := func(tctx context.Context) (consume.PopResult, error) {
		cancel() // the client hangs up while the claim runs
		if tctx.Err() != nil {
			t.Error("the running claim was cancelled with its client")
		}
		return r.c.One(req("raced"))(tctx)
	}
	res, err := r.c.Pop(ctx, consume.Request{Tenant: tenant, Queue: "raced"}, try)
	if err != nil || res.Outcome != consume.Gone {
		t.Fatalf("raced pop: %+v %v", res, err)
	}
	if c := r.seen(); len(c) != 1 || c[0].Messages != 1 || c[0].ClientGone || c[0].Queue != "raced" {
		t.Fatalf("claims seen: %+v", c)
	}
	if got := r.popNow(t, "raced"); len(got) != 1 || got[0] != "m" {
		t.Fatalf("next pop got %v: the raced claim was kept and hides the partition", got)
	}
}

// An empty wait tries again on the back-off schedule (100 ms three times,
// then doubling up to 1 s, never past the timeout) and answers empty
// exactly at its timeout, on the virtual clock.
func TestEmptyWaitEndsAtItsTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.push(t, "other", "x") // the tenant exists; queue "empty" has nothing
	var mu sync.Mutex
	var at []time.Duration
	try := func(ctx context.Context) (consume.PopResult, error) {
		mu.Lock()
		at = append(at, r.clock.Now().Sub(start))
		mu.Unlock()
		return r.c.One(req("empty"))(ctx)
	}
	done := r.popAsync(context.Background(), "empty", 5*time.Second, try)
	var res consume.Result
	for waiting := true; waiting; {
		select {
		case res = <-done:
			waiting = false
		case <-time.After(time.Millisecond):
			if next, ok := r.clock.NextTimer(); ok {
				r.clock.AdvanceTo(next)
			}
		}
	}
	if res.Outcome != consume.Empty || r.clock.Now() != start.Add(5*time.Second) {
		t.Fatalf("wait ended %v at +%v, want Empty at +5s", res.Outcome, r.clock.Now().Sub(start))
	}
	ms := func(d ...int) (out []time.Duration) {
		for _, x := range d {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	want := ms(0, 100, 200, 300, 500, 900, 1700, 2700, 3700, 4700, 5000)
	mu.Lock()
	defer mu.Unlock()
	if len(at) != len(want) {
		t.Fatalf("tries at %v, want %v", at, want)
	}
	for i := range want {
		if at[i] != want[i] {
			t.Fatalf("tries at %v, want %v", at, want)
		}
	}
}

// A wake ends a parked pop's wait at once: no virtual time passes, and
// the pop claims what the push brought.
func TestWakeEndsTheWaitEarly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.popAsync(ctx, "woken", time.Minute, r.c.One(req("woken")))
	r.parked(t)
	r.push(t, "woken", "m")
	r.hub.Notify(waker.Key(tenant, "woken"), 1)
	select {
	case res := <-done:
		if res.Outcome != consume.Claimed || len(res.Claim.Messages) != 1 || r.clock.Now() != start {
			t.Fatalf("woken pop: %+v at +%v", res, r.clock.Now().Sub(start))
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("the wake did not end the wait")
	}
}

// While the broker drains, a pop answers empty at once: one that would
// park does not, and one parked leaves its wait, with no virtual time
// passing either way.
func TestDrainingAnswersEmptyAtOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.popAsync(ctx, "drain", time.Minute, r.c.One(req("drain")))
	r.parked(t)
	close(r.draining)
	timers := r.timers.Load()
	for _, which := range []string{"parked", "new"} {
		select {
		case res := <-done:
			if res.Outcome != consume.Draining || r.clock.Now() != start {
				t.Fatalf("%s pop while draining: %v at +%v", which, res.Outcome, r.clock.Now().Sub(start))
			}
		case <-time.After(5 * time.Second):
			cancel()
			<-done
			t.Fatalf("the %s pop kept waiting through the drain", which)
		}
		done = r.popAsync(ctx, "drain", time.Minute, r.c.One(req("drain")))
	}
	cancel()
	<-done
	if n := r.timers.Load() - timers; n != 0 {
		t.Fatalf("pops started while draining set %d timers: they parked", n)
	}
}

// consumed is what the cursor row of q counts consumed, and whether it
// holds a lease.
func (r *rig) consumed(t *testing.T, q string) (n int64, leased bool) {
	t.Helper()
	if err := r.pool.QueryRow(context.Background(), `SELECT coalesce(sum(pc.total_messages_consumed), 0),
		count(*) FILTER (WHERE pc.lease_expires_at IS NOT NULL) > 0
		FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id WHERE q.name = $1`, q).Scan(&n, &leased); err != nil {
		t.Fatal(err)
	}
	return n, leased
}

// An autoAck pop's claim is a lease until the caller says its answer was
// written: nothing is consumed before Complete, everything after, and the
// partition is free again. A claim released instead (its answer never
// written) consumes nothing, comes back at once, and can no longer be
// completed.
func TestAutoAckCompletesOnlyOnceTheAnswerWasWritten(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.push(t, "aa", "m1")
	res, err := r.c.Pop(context.Background(), consume.Request{Tenant: tenant, Queue: "aa"}, r.c.One(req("aa")))
	if err != nil || res.Outcome != consume.Claimed {
		t.Fatalf("pop: %+v %v", res, err)
	}
	if n, leased := r.consumed(t, "aa"); n != 0 || !leased {
		t.Fatalf("before the answer was written: %d consumed, leased=%v; want 0 and a lease", n, leased)
	}
	if !r.c.Complete(tenant, res.Claim) {
		t.Fatal("Complete failed")
	}
	if n, leased := r.consumed(t, "aa"); n != 1 || leased {
		t.Fatalf("after Complete: %d consumed, leased=%v; want 1 and no lease", n, leased)
	}
	r.push(t, "aa", "m2")
	res, err = r.c.Pop(context.Background(), consume.Request{Tenant: tenant, Queue: "aa"}, r.c.One(req("aa")))
	if err != nil || len(res.Claim.Messages) != 1 || res.Claim.Messages[0].TransactionID != "m2" {
		t.Fatalf("second pop: %+v %v", res, err)
	}
	r.c.Release(res.Claim.LeaseID) // its answer could not be written
	if n, _ := r.consumed(t, "aa"); n != 1 {
		t.Fatalf("a released claim was consumed: %d", n)
	}
	if r.c.Complete(tenant, res.Claim) {
		t.Fatal("a released claim was completed")
	}
	if got := r.popNow(t, "aa"); len(got) != 1 || got[0] != "m2" {
		t.Fatalf("after the release the next pop got %v, want [m2]", got)
	}
}

// An autoAck pop's completion carries the pop's routed epoch: on a queue
// frozen since the claim it fails (the fence's moved), nothing consumed,
// the lease kept for the move to take along; once the queue is live again
// at another epoch, only a completion routed with that one completes.
func TestAutoAckCompletionMeetsTheFence(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.push(t, "aa-fence", "m1")
	routed := req("aa-fence")
	routed.Epoch = 1
	res, err := r.c.Pop(context.Background(), consume.Request{Tenant: tenant, Queue: "aa-fence"}, r.c.One(routed))
	if err != nil || res.Outcome != consume.Claimed || res.Claim.Epoch != 1 {
		t.Fatalf("pop: %+v %v (want a claim at epoch 1)", res, err)
	}
	ctx := context.Background()
	if _, err := r.st.Freeze(ctx, r.pool, tenant, "aa-fence", 1); err != nil {
		t.Fatal(err)
	}
	var acked error
	completed := r.c.CompleteWith(tenant, res.Claim, func(ctx context.Context, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
		out, err := r.c.Ack(ctx, tenant, group, items)
		acked = err
		return out, err
	})
	if completed || !store.Moved(acked) {
		t.Fatalf("the completion of a frozen queue's claim: completed=%v, ack error %v; want false and moved", completed, acked)
	}
	if n, leased := r.consumed(t, "aa-fence"); n != 0 || !leased {
		t.Fatalf("after the moved completion: %d consumed, leased=%v; want 0 and the lease kept", n, leased)
	}
	if _, err := r.st.Activate(ctx, r.pool, tenant, "aa-fence", 1, 2); err != nil {
		t.Fatal(err)
	}
	if r.c.Complete(tenant, res.Claim) {
		t.Fatal("a completion routed with the old epoch completed on the queue at epoch 2")
	}
	res.Claim.Epoch = 2
	if !r.c.Complete(tenant, res.Claim) {
		t.Fatal("the completion at the queue's epoch failed")
	}
	if n, leased := r.consumed(t, "aa-fence"); n != 1 || leased {
		t.Fatalf("after the completion: %d consumed, leased=%v; want 1 and no lease", n, leased)
	}
}
