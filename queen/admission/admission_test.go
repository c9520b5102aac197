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

func TestMaintNeverExceedsItsShare(t *testing.T) {
	a := New(40, 0.05) // share: 2 slots
	ctx := context.Background()
	var rels []func()
	for i := 0; i < 2; i++ {
		r, err := a.Acquire(ctx, Maint)
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, r)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := a.Acquire(cctx, Maint); err == nil {
		t.Fatal("a third maint slot was granted with 38 slots free")
	}
	if r, err := a.Acquire(ctx, Push); err != nil {
		t.Fatal("push starved by maint")
	} else {
		r()
	}
	for _, r := range rels {
		r()
	}
	if s := a.Stats(); s.Inflight != [lanes]int{} || s.Waiting != [lanes]int{} {
		t.Fatalf("leftover state %+v", s)
	}
}
