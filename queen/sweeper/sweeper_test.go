package sweeper_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/sweeper"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func newSweeper(t *testing.T) (*sweeper.Sweeper, *store.Store, *clock.Sim) {
	c := clock.NewSim(time.Now())
	st := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { n := c.Now(); return &n }})
	return &sweeper.Sweeper{Store: st, Clock: c, IDs: ids.NewSource(clock.Real{}, nil), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Lease: 30 * time.Second, MinSleep: 5 * time.Millisecond, MaxSleep: time.Second, IdleMaxSleep: 8 * time.Second,
		ClaimBatch: 10, PruneBatch: 10}, st, c
}

// TestIdleBackoffNeverSleepsPastAKnownTimer: idle cycles double the sleep
// up to the idle ceiling, but never past a timer the sweeper knows of, and
// a schedule hint wakes it at once.
func TestIdleBackoffNeverSleepsPastAKnownTimer(t *testing.T) {
	sw, st, c := newSweeper(t)
	ctx := context.Background()
	var sleeps []time.Duration
	for range 8 {
		if err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		sleeps = append(sleeps, sw.NextDue(c.Now()).Sub(c.Now()))
	}
	if sleeps[0] != time.Second || sleeps[len(sleeps)-1] != 8*time.Second {
		t.Fatalf("idle sleeps %v: want 1 s at first, doubling to the 8 s ceiling", sleeps)
	}
	if _, err := st.ApplyTimers(ctx, config.DefaultTenant, "", []store.TimerOp{{Op: "schedule", Queue: "q", TimerKey: "k", Txn: "k", DelayMs: 3000}}); err != nil {
		t.Fatal(err)
	}
	sw.Hint(3 * time.Second)
	select {
	case <-sw.Woken():
	default:
		t.Fatal("a hint earlier than the next cycle did not wake the sweeper")
	}
	if d := sw.NextDue(c.Now()).Sub(c.Now()); d != 3*time.Second {
		t.Fatalf("after the hint the next cycle is in %v, want 3 s", d)
	}
	if err := sw.RunOnce(ctx); err != nil { // idle still, but a timer is known
		t.Fatal(err)
	}
	if d := sw.NextDue(c.Now()).Sub(c.Now()); d != time.Second {
		t.Fatalf("with a timer due in 3 s the sweeper sleeps %v, want the 1 s ceiling", d)
	}
	c.Advance(3 * time.Second)
	if err := sw.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if sw.Stats.Fired.Load() != 1 {
		t.Fatalf("fired %d", sw.Stats.Fired.Load())
	}
}
