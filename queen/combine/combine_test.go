package combine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errRefused = errors.New("row refused")  // the fake's permanent error
	errLocked  = errors.New("lock timeout") // the fake's lock wait that ran out
)

// fake is a statement that answers each row "<row>!" and records every
// batch it ran; gate, when set, holds the first statement until closed.
type fake struct {
	mu      sync.Mutex
	batches [][]string
	alone   [][]string
	gate    chan struct{}
	once    sync.Once
	running atomic.Int32
	most    atomic.Int32
	// fail answers an error for a batch instead, if it returns one.
	fail func(rows []string) error
}

func (f *fake) joint(_ context.Context, rows []string) ([]string, error) {
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	f.once.Do(func() {
		if f.gate != nil {
			<-f.gate
		}
	})
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(rows))
	f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(rows); err != nil {
			return nil, err
		}
	}
	return answers(rows), nil
}

func (f *fake) runAlone(_ context.Context, rows []string) ([]string, error) {
	f.mu.Lock()
	f.alone = append(f.alone, slices.Clone(rows))
	f.mu.Unlock()
	return answers(rows), nil
}

func answers(rows []string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r + "!"
	}
	return out
}

func newFake(f *fake, inFlight int) *Combiner[string, string] {
	return New(Options[string, string]{Joint: f.joint, Alone: f.runAlone,
		Key:         func(r string) string { return r[:1] },
		MaxInFlight: inFlight, MaxRows: 100,
		Permanent:    func(err error) bool { return errors.Is(err, errRefused) },
		LockTimedOut: func(err error) bool { return errors.Is(err, errLocked) }})
}

// waitingCalls waits until n calls wait in c.
func waitingCalls(t *testing.T, c *Combiner[string, string], n int) {
	t.Helper()
	for range 5000 {
		c.mu.Lock()
		w := len(c.waiting)
		c.mu.Unlock()
		if w == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("never %d calls waiting", n)
}

type answer struct {
	rows, out []string
	err       error
}

// queue starts, behind a statement held by f.gate, one call per rows and
// returns their answers once the gate opens.
func queue(t *testing.T, c *Combiner[string, string], f *fake, calls [][]string) []answer {
	t.Helper()
	f.gate = make(chan struct{})
	got := make([]answer, len(calls)+1)
	var wg sync.WaitGroup
	do := func(i int, rows []string) {
		defer wg.Done()
		out, err := c.Do(context.Background(), rows)
		got[i] = answer{rows, out, err}
	}
	wg.Add(1)
	go do(0, []string{"z0"})
	for f.running.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i, rows := range calls {
		wg.Add(1)
		go do(i+1, rows)
		waitingCalls(t, c, i+1) // in order: the batch keeps it
	}
	close(f.gate)
	wg.Wait()
	return got
}

// Calls that waited go in one statement, and each hears its own rows'
// outcomes, in order, never another's.
func TestCallsAnswerExactlyTheirOwnRows(t *testing.T) {
	f := &fake{}
	c := newFake(f, 1)
	calls := [][]string{{"a1", "a2"}, {"b1", "b2"}, {"c1"}, {"d1", "d2"}}
	for _, a := range queue(t, c, f, calls) {
		if a.err != nil || !slices.Equal(a.out, answers(a.rows)) {
			t.Errorf("call %v answered %v, %v", a.rows, a.out, a.err)
		}
	}
	if len(f.batches) != 2 || len(f.batches[1]) != 7 {
		t.Errorf("the waiting calls were not combined: %v", f.batches)
	}
}

// A permanent error in a joint statement runs each of its calls by itself:
// only the call with the refused row fails.
func TestPermanentErrorRerunsEachCallAlone(t *testing.T) {
	f := &fake{fail: func(rows []string) error {
		if slices.Contains(rows, "bad") {
			return errRefused
		}
		return nil
	}}
	c := newFake(f, 1)
	calls := [][]string{{"a1"}, {"bad", "b2"}, {"c1", "c2"}}
	for _, a := range queue(t, c, f, calls) {
		refused := slices.Contains(a.rows, "bad")
		if refused != errors.Is(a.err, errRefused) || (!refused && !slices.Equal(a.out, answers(a.rows))) {
			t.Errorf("call %v answered %v, %v", a.rows, a.out, a.err)
		}
	}
	if len(f.batches) != 5 { // z0; the joint one; a1, bad, c1 again
		t.Errorf("statements run: %v", f.batches)
	}
}

// A joint statement whose lock wait ran out runs each of its calls alone;
// while one runs alone, a new call naming its key goes alone at once,
// without taking a slot.
func TestLockTimeoutRunsCallsAloneAndHoldsTheirKeys(t *testing.T) {
	f := &fake{fail: func(rows []string) error {
		if slices.Contains(rows, "l1") {
			return errLocked
		}
		return nil
	}}
	c := newFake(f, 1)
	inside := make(chan struct{})
	release := make(chan struct{})
	var late answer
	var wg sync.WaitGroup
	aloneOnce := sync.Once{}
	c.o.Alone = func(ctx context.Context, rows []string) ([]string, error) {
		if rows[0] == "l1" {
			aloneOnce.Do(func() {
				close(inside)
				// Another call on key "l" while this one runs alone.
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := c.Do(context.Background(), []string{"l2"})
					late = answer{[]string{"l2"}, out, err}
				}()
				<-release
			})
		}
		return f.runAlone(ctx, rows)
	}
	go func() { <-inside; time.Sleep(20 * time.Millisecond); close(release) }()
	calls := [][]string{{"a1"}, {"l1"}}
	for _, a := range queue(t, c, f, calls) {
		if a.err != nil || !slices.Equal(a.out, answers(a.rows)) {
			t.Errorf("call %v answered %v, %v", a.rows, a.out, a.err)
		}
	}
	wg.Wait()
	if late.err != nil || !slices.Equal(late.out, []string{"l2!"}) {
		t.Errorf("the call on the held key answered %v, %v", late.out, late.err)
	}
	want := fmt.Sprint([][]string{{"a1"}, {"l1"}, {"l2"}})
	slices.SortFunc(f.alone, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	if got := fmt.Sprint(f.alone); got != want {
		t.Errorf("calls run alone: %s, want %s", got, want)
	}
	for _, b := range f.batches {
		if slices.Contains(b, "l2") {
			t.Errorf("the call on the held key took a slot: %v", f.batches)
		}
	}
}

// No more statements run at once than MaxInFlight: the calls past it wait.
func TestInFlightBoundRespected(t *testing.T) {
	gate := make(chan struct{})
	f := &fake{fail: func([]string) error { <-gate; return nil }}
	c := newFake(f, 3)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := []string{fmt.Sprint("k", i)}
			if out, err := c.Do(context.Background(), rows); err != nil || !slices.Equal(out, answers(rows)) {
				t.Errorf("call %v answered %v, %v", rows, out, err)
			}
		}()
	}
	waitingCalls(t, c, 7)
	for i := 0; i < 5000 && f.running.Load() < 3; i++ {
		time.Sleep(time.Millisecond)
	}
	if n := f.running.Load(); n != 3 {
		t.Errorf("%d statements run at once, want 3", n)
	}
	close(gate)
	wg.Wait()
	if m := f.most.Load(); m != 3 {
		t.Errorf("at most %d statements ran at once, want 3", m)
	}
}

// TestZeroRetryRunsOnce: a Retry nobody bound (a path built without a
// broker's wiring) runs its statement once and returns its error, instead
// of calling the nil binding.
func TestZeroRetryRunsOnce(t *testing.T) {
	for _, alone := range []bool{false, true} {
		runs := 0
		lost := errors.New("lost a lock race")
		err := Retry{}.Run(context.Background(), alone, func(context.Context) error { runs++; return lost })
		if runs != 1 || !errors.Is(err, lost) {
			t.Fatalf("alone %v: %d runs, %v; want 1 run and its error", alone, runs, err)
		}
	}
}

// With AloneByKey a call spanning keys runs alone one key at a time: while
// its rows of a locked key wait, a call on another of its keys runs at
// once, in a slot. Before, the spanning call held every one of its keys'
// turns for as long as the lock lasted (a replayed spool batch held p1's
// pushes behind p0's outside lock: simulator free seed 0x3d8a52faa9d1415c).
func TestAloneByKeyHoldsOnlyTheKeyItWaitsFor(t *testing.T) {
	f := &fake{fail: func(rows []string) error {
		if slices.Contains(rows, "l1") {
			return errLocked
		}
		return nil
	}}
	c := newFake(f, 1)
	c.o.AloneByKey = true
	inside, release := make(chan struct{}), make(chan struct{})
	c.o.Alone = func(ctx context.Context, rows []string) ([]string, error) {
		if slices.Contains(rows, "l1") {
			close(inside)
			<-release // the lock on "l" lasts until the other call answered
		}
		return f.runAlone(ctx, rows)
	}
	done := make(chan answer, 1)
	go func() {
		out, err := c.Do(context.Background(), []string{"m1", "l1", "m2"})
		done <- answer{[]string{"m1", "l1", "m2"}, out, err}
	}()
	<-inside
	other := make(chan answer, 1)
	go func() {
		out, err := c.Do(context.Background(), []string{"m3"})
		other <- answer{[]string{"m3"}, out, err}
	}()
	select {
	case a := <-other:
		if a.err != nil || !slices.Equal(a.out, []string{"m3!"}) {
			t.Errorf("the call on the other key answered %v, %v", a.out, a.err)
		}
		close(release)
	case <-time.After(5 * time.Second):
		t.Error("the call on the other key waited behind the locked key")
		close(release)
		<-other
	}
	if a := <-done; a.err != nil || !slices.Equal(a.out, answers(a.rows)) {
		t.Errorf("the spanning call answered %v, %v", a.out, a.err)
	}
	want := fmt.Sprint([][]string{{"l1"}, {"m1", "m2"}})
	slices.SortFunc(f.alone, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	if got := fmt.Sprint(f.alone); got != want {
		t.Errorf("run alone: %s, want %s", got, want)
	}
}

// errMoved is the fake's Split error: one call's rows met a moved queue.
var errMoved = errors.New("queue moved")

// An error Options.Split names (a shard's fence: one call's queue moved,
// the joint statement wrote nothing) runs each call by itself, as a
// permanent one does: only the call of the moved queue fails, the others
// are answered. Without Split every call of the batch would fail.
func TestSplitErrorRerunsEachCallAlone(t *testing.T) {
	f := &fake{fail: func(rows []string) error {
		if slices.Contains(rows, "moved") {
			return errMoved
		}
		return nil
	}}
	c := New(Options[string, string]{Joint: f.joint, Alone: f.runAlone,
		Key: func(r string) string { return r[:1] }, MaxInFlight: 1, MaxRows: 100,
		Permanent:    func(err error) bool { return errors.Is(err, errRefused) },
		LockTimedOut: func(err error) bool { return errors.Is(err, errLocked) },
		Split:        func(err error) bool { return errors.Is(err, errMoved) }})
	calls := [][]string{{"a1"}, {"moved", "m2"}, {"c1", "c2"}}
	for _, a := range queue(t, c, f, calls) {
		moved := slices.Contains(a.rows, "moved")
		if moved != errors.Is(a.err, errMoved) || (!moved && !slices.Equal(a.out, answers(a.rows))) {
			t.Errorf("call %v answered %v, %v", a.rows, a.out, a.err)
		}
	}
	if len(f.batches) != 5 { // z0; the joint one; a1, moved, c1 again
		t.Errorf("statements run: %v", f.batches)
	}
}
