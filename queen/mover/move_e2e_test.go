package mover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/mover"
	"github.com/queen-go/queen/queen/pglocal"
)

// moveUnderTraffic moves queue "moving" from a to b while writers push,
// pop and ack on it and on "staying" (on a), running the move with run,
// and checks the outcome: every answered push delivered once in FIFO
// order, the other queue untouched by the move, nothing of the moved
// queue left on a but its tombstone, the catalogue on b at epoch 2, the move done with its
// timings.
func moveUnderTraffic(t *testing.T, ca, cb *pglocal.Cluster, run func(ctx context.Context, w *world, id string) error) mover.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := newWorld(t, ca, cb)
	moving, staying := w.createQueue(t, "moving"), w.createQueue(t, "staying")
	trMoving, trStaying := newTraffic(w, moving), newTraffic(w, staying)
	stopMoving, stopStaying := trMoving.run(ctx), trStaying.run(ctx)
	// Some traffic before the move: the copy's initial sync carries it.
	waitPushed(t, trMoving, 200)
	id, err := mover.New(w.cfg).Plan(ctx, tenant, "moving", "b")
	if err != nil {
		t.Fatal(err)
	}
	runErr := run(ctx, w, id)
	// Traffic after the move, on b.
	if runErr == nil {
		waitPushed(t, trMoving, trMoving.count()+200)
	}
	errMoving, errStaying := stopMoving(), stopStaying()
	if runErr != nil || errMoving != nil || errStaying != nil {
		t.Fatalf("move: %v; moving queue's traffic: %v; staying queue's: %v", runErr, errMoving, errStaying)
	}
	trMoving.check(t)
	trStaying.check(t)
	if trStaying.moved != 0 || trStaying.shardsHit["push b"] || trStaying.shardsHit["pop b"] {
		t.Errorf("the staying queue saw %d moved answers, shards %v", trStaying.moved, trStaying.shardsHit)
	}
	if !trMoving.shardsHit["push b"] || !trMoving.shardsHit["pop b"] {
		t.Errorf("the moving queue's traffic never reached b: %v", trMoving.shardsHit)
	}
	// All that stays on a is the queue row, frozen: a tombstone a stale
	// broker's writes meet as moved.
	if n := w.queueRows(t, "a", moving); n != 1 {
		t.Errorf("shard a holds %d rows of the moved queue, want its tombstone", n)
	}
	if mq, found, err := w.shards["a"].Store.MoveQueue(ctx, w.shards["a"].Pool, tenant, "moving"); err != nil || !found || !mq.Tombstone() || mq.Epoch != -1 {
		t.Errorf("the moved queue on a: %+v found %v (%v), want a tombstone at -1", mq, found, err)
	}
	if n := w.queueRows(t, "a", staying); n == 0 {
		t.Error("shard a lost the staying queue's rows")
	}
	if p, err := w.cat.Lookup(ctx, tenant, "moving"); err != nil || p.Shard != "b" || p.Epoch != 2 {
		t.Errorf("placement %+v (%v), want b at 2", p, err)
	}
	if s, p := w.slots(t); s != 0 || p != 0 {
		t.Errorf("shard a keeps %d slots and %d publications", s, p)
	}
	st, err := mover.New(w.cfg).Get(ctx, id)
	if err != nil || st.State != mover.StateDone || st.Reason != "" || st.CopyDuration <= 0 || st.FreezePause <= 0 || st.RowsCopied == 0 {
		t.Errorf("move status %+v (%v), want done with timings", st, err)
	}
	return st
}

// count is how many pushes were answered.
func (tr *traffic) count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.pushed)
}

// waitPushed waits until tr answered n pushes.
func waitPushed(t *testing.T, tr *traffic, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); tr.count() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pushes answered, want %d", tr.count(), n)
		}
	}
}

// TestMoveUnderTraffic moves a queue online with writers on it and on
// another queue of its shard.
func TestMoveUnderTraffic(t *testing.T) {
	ca, cb := logicalCluster(t, "a"), logicalCluster(t, "b")
	st := moveUnderTraffic(t, ca, cb, func(ctx context.Context, w *world, id string) error {
		return mover.New(w.cfg).Run(ctx, id)
	})
	t.Logf("copy %v, freeze pause %v, %d rows copied", st.CopyDuration, st.FreezePause, st.RowsCopied)
}

// errKilled is the hook's crash.
var errKilled = errors.New("killed by the test")

// TestMoveResumesAfterACrashAtEachStep stops the mover at every step in
// turn, after the step's effect and before its state write (the last
// case by cancelling its context there), and resumes the move with
// another mover: it finishes, with the same checks as an uninterrupted
// move.
func TestMoveResumesAfterACrashAtEachStep(t *testing.T) {
	ca, cb := logicalCluster(t, "a"), logicalCluster(t, "b")
	points := []string{mover.StatePlan, mover.StateCopy, mover.StateFreeze, mover.StateCatchUp, mover.StateActivate + ".placement",
		mover.StateActivate, mover.StateCleanup, "copy (cancelled)"}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			moveUnderTraffic(t, ca, cb, func(ctx context.Context, w *world, id string) error {
				return crashAndResume(ctx, w, id, point)
			})
		})
	}
}

// crashAndResume runs move id with a mover that dies at point, checks it
// did, and resumes the move with a fresh mover.
func crashAndResume(ctx context.Context, w *world, id, point string) error {
	m := mover.New(w.cfg)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hit := false
	mover.SetAfterEffect(m, func(p string) error {
		switch {
		case hit:
		case p == point:
			hit = true
			return errKilled
		case p+" (cancelled)" == point:
			hit = true
			cancel()
		}
		return nil
	})
	err := m.Run(rctx, id)
	if !hit || err == nil {
		return errors.Join(errors.New("the mover did not die at "+point), err)
	}
	if st, gerr := m.Get(ctx, id); gerr != nil || st.State == mover.StateDone || st.State == mover.StateFailed || st.Reason != "" {
		return errors.Join(errors.New("the killed move is not unfinished: "+st.State+" "+st.Reason), gerr)
	}
	return mover.New(w.cfg).Resume(ctx)
}

// TestFailedMoveGivesTheQueueBack fails moves before their activation
// and checks each rolled back: state failed with a reason, the queue
// served by a at epoch 1 again (a push routed there succeeds), no slot
// nor publication left on a, nothing of the queue on b. One move's
// subscription cannot reach a; the other's destination stops applying
// after the freeze, so the catch-up times out (and its rollback is
// interrupted once, then resumed).
func TestFailedMoveGivesTheQueueBack(t *testing.T) {
	ca, cb := logicalCluster(t, "a"), logicalCluster(t, "b")
	t.Run("source unreachable", func(t *testing.T) {
		w := newWorld(t, ca, cb)
		b := w.shards["a"]
		b.ConnInfo = "host=127.0.0.1 port=1 user=postgres dbname=nowhere connect_timeout=2"
		w.cfg.Shards = map[string]mover.Shard{"a": b, "b": w.shards["b"]}
		failedMove(t, w, "copy: ", func(m *mover.Mover, id string) {})
	})
	t.Run("catch-up times out", func(t *testing.T) {
		w := newWorld(t, ca, cb)
		// The mover's clock runs ten times faster than the real one, and
		// jumps by the whole timeout once a is frozen and b stopped
		// applying: only the wait after the freeze times out.
		sim := clock.NewSim(time.Now())
		w.cfg.Clock, w.cfg.CatchUpTimeout = sim, time.Hour
		var frozen atomic.Bool
		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(stop)
		wg.Go(func() {
			for tick := time.NewTicker(time.Millisecond); ; {
				select {
				case <-stop:
					tick.Stop()
					return
				case <-tick.C:
				}
				if frozen.Load() {
					sim.Advance(time.Hour)
				} else {
					sim.Advance(10 * time.Millisecond)
				}
			}
		})
		failedMove(t, w, "catch_up: the destination did not catch up in time", func(m *mover.Mover, id string) {
			killed := false
			mover.SetAfterEffect(m, func(p string) error {
				switch {
				case p == mover.StateFreeze:
					_, err := w.shards["b"].Pool.Exec(context.Background(), `ALTER SUBSCRIPTION queen_move_`+strings.ReplaceAll(id, "-", "")+` DISABLE`)
					frozen.Store(true)
					return err
				case p == "rollback" && !killed:
					killed = true
					return errKilled
				}
				return nil
			})
		})
	})
}

// failedMove plans and runs a move of a fresh queue on w that must fail
// with a reason containing why, setup preparing its mover, and checks the
// rollback.
func failedMove(t *testing.T, w *world, why string, setup func(m *mover.Mover, id string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := w.createQueue(t, "moving")
	tr := newTraffic(w, q)
	if err := tr.push(ctx, 0, "before"); err != nil {
		t.Fatal(err)
	}
	m := mover.New(w.cfg)
	id, err := m.Plan(ctx, tenant, "moving", "b")
	if err != nil {
		t.Fatal(err)
	}
	setup(m, id)
	for err = m.Run(ctx, id); errors.Is(err, errKilled); err = mover.New(w.cfg).Resume(ctx) {
		t.Logf("stopped once: %v", err)
	}
	if !errors.Is(err, mover.ErrFailed) && err != nil {
		t.Fatalf("run: %v", err)
	}
	st, err := m.Get(ctx, id)
	if err != nil || st.State != mover.StateFailed || !strings.Contains(st.Reason, why) {
		t.Fatalf("status %+v (%v), want failed for %q", st, err, why)
	}
	if p, err := w.cat.Lookup(ctx, tenant, "moving"); err != nil || p.Shard != "a" || p.Epoch != 1 {
		t.Fatalf("placement %+v (%v), want a at 1", p, err)
	}
	if err := tr.push(ctx, 1, "after"); err != nil || tr.moved != 0 {
		t.Fatalf("a push to a at epoch 1 after the rollback: %v (%d moved answers)", err, tr.moved)
	}
	if s, p := w.slots(t); s != 0 || p != 0 {
		t.Errorf("shard a keeps %d slots and %d publications", s, p)
	}
	if n := w.queueRows(t, "b", q); n != 0 {
		t.Errorf("shard b keeps %d rows of the queue", n)
	}
	if _, err := m.Plan(ctx, tenant, "moving", "b"); err != nil {
		t.Errorf("a new move after the failed one: %v", err)
	}
}

// TestPlanRefusesAndMoversExclude: Plan's errors are typed (unknown
// queue, unknown shard, same shard, a move already unfinished); a second
// mover is refused while one holds the lock; a state write whose step
// counter another mover advanced is refused.
func TestPlanRefusesAndMoversExclude(t *testing.T) {
	ca, cb := logicalCluster(t, "a"), logicalCluster(t, "b")
	ctx := context.Background()
	w := newWorld(t, ca, cb)
	w.createQueue(t, "moving")
	m := mover.New(w.cfg)
	for _, c := range []struct {
		queue, to string
		want      error
	}{{"nosuch", "b", mover.ErrUnknownQueue}, {"moving", "c", mover.ErrUnknownShard}, {"moving", "a", mover.ErrSameShard},
		{"", "b", mover.ErrBadQueue}} {
		if _, err := m.Plan(ctx, tenant, c.queue, c.to); !errors.Is(err, c.want) {
			t.Errorf("plan %s to %s: %v, want %v", c.queue, c.to, err, c.want)
		}
	}
	id, err := m.Plan(ctx, tenant, "moving", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Plan(ctx, tenant, "moving", "b"); !errors.Is(err, mover.ErrMoveUnfinished) {
		t.Errorf("a second plan: %v, want ErrMoveUnfinished", err)
	}
	if _, err := m.Get(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, mover.ErrNoMove) {
		t.Errorf("get of no move: %v", err)
	}
	// The first mover dies inside its plan step holding the lock: the
	// second is refused meanwhile.
	other := mover.New(w.cfg)
	var busy error
	mover.SetAfterEffect(m, func(string) error {
		busy = other.Step(ctx, id)
		return errKilled
	})
	if err := m.Step(ctx, id); !errors.Is(err, errKilled) {
		t.Fatalf("step: %v", err)
	}
	if !errors.Is(busy, mover.ErrBusy) {
		t.Errorf("a second mover's step while the first runs: %v, want ErrBusy", busy)
	}
	before, err := w.cat.Move(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Step(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A mover that read the move before the other's step writes late.
	before.State = mover.StateCopy
	if _, err := w.cat.SetMove(ctx, before); !errors.Is(err, catalog.ErrStaleMove) {
		t.Errorf("a stale state write: %v, want ErrStaleMove", err)
	}
	if st, err := m.Get(ctx, id); err != nil || st.State != mover.StateCopy {
		t.Errorf("after one step: %+v %v", st, err)
	}
}
