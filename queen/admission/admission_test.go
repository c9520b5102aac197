package admission

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWakeOrderAndMaintShare(t *testing.T) {
	a := New(2, 0.05)
	ctx := context.Background()
	r1, _ := a.Acquire(ctx, Push)
	r2, _ := a.Acquire(ctx, Maint)
	// The budget is full: queue one waiter per lane, lowest priority first.
	hold := make(chan struct{})
	done := make(chan struct{}, 4)
	for _, l := range []Lane{Maint, Push, Pop, Ack} {
		go func() {
			rel, err := a.Acquire(ctx, l)
			if err != nil {
				t.Error(err)
				return
			}
			<-hold
			rel()
			done <- struct{}{}
		}()
		for a.Stats().Waiting[l] == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	r1()
	if s := a.Stats(); s.Inflight[Ack] != 1 || s.Waiting[Ack] != 0 {
		t.Fatalf("first freed slot should go to ack: %+v", s)
	}
	r2()
	if s := a.Stats(); s.Inflight[Pop] != 1 || s.Waiting[Push] != 1 || s.Waiting[Maint] != 1 {
		t.Fatalf("second freed slot should go to pop: %+v", s)
	}
	close(hold)
	for i := 0; i < 4; i++ {
		<-done
	}
}

// Shares are guarantees, not caps: maint borrows idle slots, yet a freed
// slot goes to live lanes once maint holds its guarantee.
func TestMaintBorrowsIdleSlotsButNotFromWaitingTraffic(t *testing.T) {
	a := New(40, 0.05) // maint guaranteed 2 slots
	ctx := context.Background()
	var maint []func()
	for i := 0; i < 5; i++ {
		r, err := a.Acquire(ctx, Maint)
		if err != nil {
			t.Fatal(err)
		}
		maint = append(maint, r)
	}
	// 35 live slots fill the rest; one more push must wait.
	var live []func()
	for i := 0; i < 35; i++ {
		r, _ := a.Acquire(ctx, Pop)
		live = append(live, r)
	}
	got := make(chan func(), 2)
	go func() { r, _ := a.Acquire(ctx, Push); got <- r }()
	go func() { r, _ := a.Acquire(ctx, Maint); got <- r }()
	for s := a.Stats(); s.Waiting[Push] == 0 || s.Waiting[Maint] == 0; s = a.Stats() {
		time.Sleep(time.Millisecond)
	}
	maint[0]() // maint still holds 4 > 2: the slot goes to the push
	r := <-got
	if s := a.Stats(); s.Inflight[Push] != 1 || s.Waiting[Maint] != 1 {
		t.Fatalf("freed maint slot went to %+v", s)
	}
	r()
	for _, m := range maint[1:] {
		m()
	}
	(<-got)()
	for _, l := range live {
		l()
	}
	if s := a.Stats(); s.Inflight != [lanes]int{} || s.Waiting != [lanes]int{} {
		t.Fatalf("leftover state %+v", s)
	}
}

// A recovering spool drain cannot be starved by saturated live traffic:
// below its guarantee, maint gets the next freed slot ahead of every
// queued live request; and it cannot starve live traffic: at its
// guarantee, it waits behind them.
func TestDrainGetsItsShareUnderSaturation(t *testing.T) {
	a := New(20, 0.05) // guarantees: ack 6, pop 8, push 5, maint 1
	ctx := context.Background()
	var live []func()
	for l, n := range map[Lane]int{Ack: 7, Pop: 8, Push: 5} {
		for i := 0; i < n; i++ {
			r, _ := a.Acquire(ctx, l)
			if l == Ack {
				live = append([]func(){r}, live...) // acks first: released first
			} else {
				live = append(live, r)
			}
		}
	}
	type grant struct {
		lane Lane
		rel  func()
	}
	grants := make(chan grant, 64)
	ask := func(l Lane) {
		go func() { r, _ := a.Acquire(ctx, l); grants <- grant{l, r} }()
	}
	for i := 0; i < 10; i++ {
		ask(Ack)
		ask(Pop)
		ask(Push)
	}
	for s := a.Stats(); s.Waiting[Ack]+s.Waiting[Pop]+s.Waiting[Push] < 30; s = a.Stats() {
		time.Sleep(time.Millisecond)
	}
	ask(Maint)
	ask(Maint)
	for s := a.Stats(); s.Waiting[Maint] < 2; s = a.Stats() {
		time.Sleep(time.Millisecond)
	}
	live[0]()
	if g := <-grants; g.lane != Maint {
		t.Fatalf("the first freed slot went to %v, not the starving drain", g.lane)
	} else {
		defer g.rel()
	}
	live[1]()
	if g := <-grants; g.lane != Ack {
		t.Fatalf("with the drain at its share, the next slot went to %v, not ack", g.lane)
	} else {
		g.rel()
	}
	for _, r := range live[2:] {
		r()
	}
	for i := 0; i < 30; i++ {
		g := <-grants
		g.rel()
	}
}

// TestAwayGivesTheSlotBackWhileItWaits: a slot taken with Hold is free for
// others while its holder waits in Away, taken again after, and released
// once; when it cannot be had again (the context ended) the holder's
// release gives back nothing it does not hold.
func TestAwayGivesTheSlotBackWhileItWaits(t *testing.T) {
	a := New(1, 0)
	ctx, release, err := a.Hold(context.Background(), Push)
	if err != nil {
		t.Fatal(err)
	}
	if err := Away(ctx, func() {
		other, err := a.Acquire(context.Background(), Ack)
		if err != nil {
			t.Error(err)
			return
		}
		other()
	}); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Inflight[Push] != 1 {
		t.Fatalf("after Away: %+v, want the push slot taken again", s)
	}
	release()
	release()
	if s := a.Stats(); s.Inflight[Push] != 0 {
		t.Fatalf("after release: %+v", s)
	}

	cctx, cancel := context.WithCancel(context.Background())
	ctx, release, err = a.Hold(cctx, Push)
	if err != nil {
		t.Fatal(err)
	}
	var blocker func()
	err = Away(ctx, func() {
		blocker, _ = a.Acquire(context.Background(), Ack) // takes the freed slot
		cancel()
	})
	if err == nil {
		t.Fatal("Away took a slot the budget does not have")
	}
	release()
	blocker()
	if s := a.Stats(); s.Inflight[Push] != 0 || s.Inflight[Ack] != 0 {
		t.Fatalf("a slot leaked or went negative: %+v", s)
	}
}
