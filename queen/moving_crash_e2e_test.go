package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/store/storetest"
)

// crashTraffic is moveTraffic through brokers that may be killed. A push
// a broker did not answer, or answered with a 5xx, goes again, to the next
// live broker, under its transactionId (one that was stored answers
// duplicate), and counts as pushed once answered 201. A kill waits until
// no consumer's pop and ack is in flight: a pop whose answer the kill
// lost would hold its messages until their lease ends, which is right
// but slow.
type crashTraffic struct {
	*moveTraffic
	cycle   sync.RWMutex // a consumer's pop and ack hold it shared, a kill exclusive
	live    []string     // the brokers not killed, under moveTraffic.mu
	unknown int          // requests not answered, or answered 5xx but 503
}

// crashLease is the pops' lease: far above any freeze or outage the test
// makes, so an ack is never late, and what a lost pop answer leased comes
// back within the test's deadlines.
const crashLease = 60

func newCrashTraffic(queue string, bases ...string) *crashTraffic {
	return &crashTraffic{moveTraffic: &moveTraffic{queue: queue, delivered: map[string]int{}, order: map[string][]int{}, buffered: map[int]bool{}},
		live: bases}
}

// base is the i-th live broker, round robin.
func (tr *crashTraffic) base(i int) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.live[i%len(tr.live)]
}

// add sends traffic to base too.
func (tr *crashTraffic) add(base string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.live = append(tr.live, base)
}

// kill kills b -9 while no pop and ack is in flight, and sends nothing
// more to it.
func (tr *crashTraffic) kill(b *brokerProcess) {
	tr.cycle.Lock()
	defer tr.cycle.Unlock()
	b.kill()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, base := range tr.live {
		if base == b.url {
			tr.live = append(tr.live[:i:i], tr.live[i+1:]...)
			break
		}
	}
}

// retryable counts a request that must go again: 503 (the queue is
// moving, or its shard is down) or an answer that tells nothing.
func (tr *crashTraffic) retryable(code int, err error) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch {
	case err == nil && code == 503:
		tr.refusals++
	case err != nil || code >= 500:
		tr.unknown++
	default:
		return false
	}
	return true
}

// push pushes message n until a broker answers 201.
func (tr *crashTraffic) push(ctx context.Context, n int) error {
	body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p%d","transactionId":"m-%06d","payload":{"n":%d}}]}`, tr.queue, n%4, n, n)
	for try := 0; ctx.Err() == nil; try++ {
		code, answer, err := request("POST", tr.base(n+try)+"/api/v1/push", body)
		if tr.retryable(code, err) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if code != 201 {
			return fmt.Errorf("push %d: %d %s", n, code, answer)
		}
		tr.mu.Lock()
		tr.pushed = append(tr.pushed, fmt.Sprintf("m-%06d", n))
		if strings.Contains(answer, `"status":"buffered"`) {
			tr.buffered[n] = true // the brokers spool: a buffered push is ordered at its replay
		}
		tr.mu.Unlock()
		return nil
	}
	return ctx.Err()
}

// consume pops a batch through the i-th live broker and acks it there,
// and answers how many messages it got.
func (tr *crashTraffic) consume(ctx context.Context, i int) (int, error) {
	tr.cycle.RLock()
	defer tr.cycle.RUnlock()
	base := tr.base(i)
	code, body, err := request("GET", fmt.Sprintf("%s/api/v1/pop/queue/%s?batch=5&wait=false&leaseSeconds=%d", base, tr.queue, crashLease), "")
	switch {
	case tr.retryable(code, err), code == 204:
		return 0, nil
	case code != 200:
		return 0, fmt.Errorf("pop: %d %s", code, body)
	}
	n, acks, err := tr.record(body)
	if err != nil {
		return 0, err
	}
	return n, tr.ack(ctx, base, acks)
}

// ack acknowledges a batch until a broker answers for every item. An item
// refused is a broken lease, unless an earlier try's outcome is unknown
// and the item is already committed (that try did it).
func (tr *crashTraffic) ack(ctx context.Context, base, body string) error {
	unsure, began, tries := false, time.Now(), map[int]int{}
	for ctx.Err() == nil {
		code, answer, err := request("POST", base+"/api/v1/ack/batch", body)
		tries[code]++
		if tr.retryable(code, err) {
			unsure = unsure || code != 503
			time.Sleep(20 * time.Millisecond)
			continue
		}
		var items []struct {
			Success bool
			Error   string
		}
		if code != 200 || json.Unmarshal([]byte(answer), &items) != nil {
			return fmt.Errorf("ack: %d %s", code, answer)
		}
		for _, it := range items {
			if !it.Success && !(unsure && strings.HasPrefix(it.Error, "already committed")) {
				return fmt.Errorf("ack refused (a lease broken) at %s, %s after the first try (answers by status, 0 none: %v): %s",
					time.Now().Format("15:04:05.000"), time.Since(began).Round(time.Millisecond), tries, answer)
			}
		}
		return nil
	}
	return ctx.Err()
}

// run pushes from n on until stop is closed, and consumes with two
// consumers until the producer has stopped and every pushed message is
// delivered; the first error of any ends up on errs.
func (tr *crashTraffic) run(ctx context.Context, n int, stop <-chan struct{}, errs chan<- error) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(3)
	produced := make(chan struct{}) // the producer's last push answered
	go func() {                     // the producer
		defer wg.Done()
		defer close(produced)
		for ; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := tr.push(ctx, n); err != nil {
				errs <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for c := range 2 { // the consumers, until the producer stopped and all is delivered
		go func() {
			defer wg.Done()
			for i := c; ctx.Err() == nil; i++ {
				got, err := tr.consume(ctx, i)
				if err != nil {
					errs <- err
					return
				}
				select {
				case <-produced:
					if got == 0 && tr.drained() {
						return
					}
				default:
				}
				if got == 0 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return &wg
}

// TestShardsMoveSurvivesKilledMoverAndDestinationCrash moves a queue from
// shard s0 to shard s1 (two wal_level=logical clusters) under a producer
// and two consumers that ack, through brokers that run as processes of
// their own, twice.
//
// The first move: mid-copy (the destination's subscription made) the
// broker running the mover is killed -9; its catalogue session ends with
// it, and the other broker's mover service takes the lock and resumes the
// move. As soon as that one has written a step, the destination cluster
// is stopped as a crash would (pg_ctl stop -m immediate), then started
// again. The second move, planned through the killed broker restarted:
// the destination crashes again once the move is activating.
//
// Each move ends done (the queue on s1 at epoch 2, no message left on s0)
// or failed and rolled back (the queue served on s0 at epoch 1, nothing
// left on s1); either way no slot, publication or subscription stays.
// Every acknowledged push is delivered exactly once, in push order per
// partition, and no ack is refused (no lease broken).
func TestShardsMoveSurvivesKilledMoverAndDestinationCrash(t *testing.T) {
	t.Parallel()
	began := time.Now()
	w := &crashWorld{t: t, src: durableShard(t, "a", "cat", "s0"), dst: durableShard(t, "b", "s1"), bin: queenBinary(t)}
	w.env = []string{"QUEEN_CATALOG_URL=" + pgURL(t, w.src.DSN("cat")),
		"QUEEN_SHARDS=s0=" + pgURL(t, w.src.DSN("s0")) + ";s1=" + pgURL(t, w.dst.DSN("s1")),
		"PG_HOST=127.0.0.1", fmt.Sprintf("PG_PORT=%d", w.src.Port), "PG_USER=postgres", "PG_PASSWORD=", "PG_DATABASE=s0",
		"DB_POOL_SIZE=10", "DB_CONNECTION_TIMEOUT=1000"}
	brokers := []*brokerProcess{startProcess(t, w.bin, "b1", w.env...), startProcess(t, w.bin, "b2", w.env...)}
	tr := newCrashTraffic("mv", brokers[0].url, brokers[1].url)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const preload = 300 // a copy with something to copy
	for n := range preload {
		if err := tr.push(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	stop, errs := make(chan struct{}), make(chan error, 3)
	wg := tr.run(ctx, preload, stop, errs)

	id := w.plan(brokers[0].url)
	killedAt, survivor := killTheMover(t, tr, brokers, w.dst, id)
	crashedAt := w.crashDestination(survivor.url, id, func(moveState) bool { return true })
	st := waitMove(t, survivor.url, id)
	w.checkOutcome(st, survivor.url, id)
	t.Logf("move 1: mover killed -9 at %s, destination crashed at %s; ended %s (%s), epoch %d; copy %d ms, freeze pause %d ms",
		killedAt, crashedAt, st.State, st.Reason, st.Epoch, st.CopyMs, st.FreezePauseMs)
	if st.State == "failed" { // the queue is on s0 again: move it with the destination crashing later
		restarted := startProcess(t, w.bin, "b1-restarted", w.env...)
		tr.add(restarted.url)
		w.moveAndCrash(restarted.url)
	}
	time.Sleep(300 * time.Millisecond) // pushes after the moves
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tr.check(t)
	if n := leasedOn(t, w.home, "mv"); n != 0 {
		t.Errorf("%d leases left: a message delivered was never acknowledged", n)
	}
	t.Logf("%d pushed (%d answered buffered: spooled while their shard was down), %d answered 503 while the queue moved or its shard was down, %d unanswered or 5xx; %s in all",
		len(tr.pushed), len(tr.buffered), tr.refusals, tr.unknown, time.Since(began).Round(time.Millisecond))
}

// crashPoints are where the later moves crash the destination: while
// activating (the crash lands before or after the catalogue names s1),
// and once activated (the catalogue names s1: the move only goes
// forward).
var crashPoints = []struct {
	name string
	when func(moveState) bool
}{
	{"activating", func(st moveState) bool {
		return st.State != "plan" && st.State != "copy" && st.State != "freeze" && st.State != "catch_up"
	}},
	{"activated", func(st moveState) bool { return st.State == "cleanup" || st.State == "done" || st.State == "failed" }},
}

// moveAndCrash moves the queue to s1 through base, crashing the
// destination at each crash point in turn while the moves fail, until
// one is done.
func (w *crashWorld) moveAndCrash(base string) {
	w.t.Helper()
	for i, c := range crashPoints {
		id := w.plan(base)
		at := w.crashDestination(base, id, c.when)
		st := waitMove(w.t, base, id)
		w.checkOutcome(st, base, id)
		w.t.Logf("move %d: destination crashed %s, at %s; ended %s (%s), epoch %d; copy %d ms, freeze pause %d ms",
			i+2, c.name, at, st.State, st.Reason, st.Epoch, st.CopyMs, st.FreezePauseMs)
		if st.State == "done" {
			return
		}
	}
}

// durableShard is logicalShard whose commits survive its postgres
// stopped as a crash would: synchronous_commit on (the test clusters'
// fsync=off is safe, the machine does not crash). With it off, the crash
// loses the destination's last commits, its activation among them: the
// catalogue names s1 at epoch 2, s1 is still frozen, and the queue
// answers 503 for ever (as any shard that loses committed transactions
// would leave it; a shard needs its synchronous standby).
func durableShard(t *testing.T, name string, dbs ...string) *pglocal.Cluster {
	t.Helper()
	c := storetest.Cluster(t, name, append(slices.Clone(pglocal.LogicalSettings), "synchronous_commit=on")...)
	for _, db := range dbs {
		storetest.CreateDatabase(t, c, db)
	}
	if n := count(t, c.DSN("postgres"), `SELECT count(*) FROM pg_settings WHERE name = 'synchronous_commit' AND setting = 'on'`); n != 1 {
		t.Fatal("synchronous_commit is not on")
	}
	return c
}

// crashWorld is the test's clusters (src holds the catalogue and s0, dst
// s1) and how its brokers start.
type crashWorld struct {
	t        *testing.T
	src, dst *pglocal.Cluster
	bin      string
	env      []string
	home     string // the database that holds the queue after the last move
}

// plan plans the queue's move to s1 through base and answers its id.
func (w *crashWorld) plan(base string) string {
	w.t.Helper()
	code, body := post(w.t, base+"/api/v1/admin/queues/mv/move", `{"to":"s1"}`)
	var started struct{ MoveID string }
	if err := json.Unmarshal([]byte(body), &started); code != 202 || err != nil {
		w.t.Fatalf("move: %d %s", code, body)
	}
	return started.MoveID
}

// killTheMover waits until the move's copy has begun (its subscription
// exists on the destination) and kills -9 the broker that runs it (the one
// that logged its plan step), then waits until the other broker writes a
// step of the move. It answers the move's state at the kill and the
// surviving broker.
func killTheMover(t *testing.T, tr *crashTraffic, brokers []*brokerProcess, dst *pglocal.Cluster, id string) (string, *brokerProcess) {
	t.Helper()
	var runner, survivor *brokerProcess
	eventuallyWithin(t, 2*time.Minute, "the mover's plan step", func() bool {
		for i, b := range brokers {
			if b.logged(`msg="move step"`, "move="+id, "from=plan") {
				runner, survivor = b, brokers[1-i]
				return true
			}
		}
		return false
	})
	var st moveState
	eventuallyWithin(t, 2*time.Minute, "the copy's subscription", func() bool {
		st = moveOf(t, survivor.url, id)
		return st.State != "copy" || count(t, dst.DSN("s1"), `SELECT count(*) FROM pg_subscription WHERE subname = $1`,
			"queen_move_"+strings.ReplaceAll(id, "-", "")) == 1
	})
	tr.kill(runner)
	t.Logf("%s, running the move, killed -9 at %s", runner.name, st.State)
	eventuallyWithin(t, 2*time.Minute, "the move resumed by "+survivor.name, func() bool {
		return survivor.logged("move="+id, `msg="move step"`) || survivor.logged("move="+id, `msg="move failing"`)
	})
	return st.State, survivor
}

// crashDestination waits until the move's state is one when accepts,
// then stops the destination cluster as a crash would, and starts it
// again once the move noticed (its state or reason changed) or after 5 s.
// It answers the move's state at the crash.
func (w *crashWorld) crashDestination(base, id string, when func(moveState) bool) string {
	w.t.Helper()
	var at moveState
	eventuallyWithin(w.t, 2*time.Minute, "the move's state to crash at", func() bool {
		at = moveOf(w.t, base, id)
		return when(at)
	})
	crashed := time.Now()
	w.dst.Kill()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st := moveOf(w.t, base, id); st.State != at.State || st.Reason != "" {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	again, err := w.dst.Restart(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = again.Stop() })
	w.t.Logf("destination crashed at %s (move %s), up again at %s", crashed.Format("15:04:05.000"), at.State,
		time.Now().Format("15:04:05.000"))
	w.dst = again
	return at.State
}

// moveOf reads a move through base.
func moveOf(t *testing.T, base, id string) moveState {
	t.Helper()
	code, body := get(t, base+"/api/v1/admin/moves/"+id)
	var st moveState
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("move %s: %d %s", id, code, body)
	}
	return st
}

// checkOutcome: a move done left the queue on s1 at epoch 2 and no
// message on s0; one failed, on s0 at epoch 1 and nothing on s1. Either
// way, no slot or publication stays on the source, no subscription on the
// destination.
func (w *crashWorld) checkOutcome(st moveState, base, id string) {
	t, src, dst := w.t, w.src, w.dst
	t.Helper()
	placed, left, leftOn := `{"queue":"mv","shard":"s1","epoch":2,`, messagesOf(t, src.DSN("s0"), "mv"), "s0"
	w.home = dst.DSN("s1")
	switch st.State {
	case "done":
	case "failed":
		w.home = src.DSN("s0")
		placed, left, leftOn = `{"queue":"mv","shard":"s0","epoch":1,`, messagesOf(t, dst.DSN("s1"), "mv"), "s1"
		if st.Reason == "" {
			t.Errorf("move failed without a reason: %+v", st)
		}
	default:
		t.Fatalf("move %+v, want done or failed", st)
	}
	if code, body := get(t, base+"/api/v1/admin/placements"); code != 200 || !strings.Contains(body, placed) {
		t.Errorf("the move %s, placements: %d %s, want %s", st.State, code, body, placed)
	}
	if left != 0 {
		t.Errorf("the move %s, %s keeps %d messages of the queue", st.State, leftOn, left)
	}
	name := "queen_move_" + strings.ReplaceAll(id, "-", "")
	for what, n := range map[string]int{
		"slot on the source":              count(t, src.DSN("s0"), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, name),
		"publication on the source":       count(t, src.DSN("s0"), `SELECT count(*) FROM pg_publication WHERE pubname = $1`, name),
		"subscription on the destination": count(t, dst.DSN("s1"), `SELECT count(*) FROM pg_subscription WHERE subname = $1`, name),
	} {
		if n != 0 {
			t.Errorf("the move %s left its %s", st.State, what)
		}
	}
}

// eventuallyWithin polls cond every 50 ms until it holds, failing the test
// after within.
func eventuallyWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
	}
}
