package sweeper_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/sweeper"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func newSweeper(t *testing.T) (*sweeper.Sweeper, *store.Store, *clock.Sim) {
	c := clock.NewSim(time.Now())
	st := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { n := c.Now(); return &n }})
	return &sweeper.Sweeper{Store: st, Names: names.New(st, names.Options{}), Writes: storetest.Writes(st, nil), Clock: c, IDs: ids.NewSource(clock.Real{}, nil), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	if _, err := applyTimers(ctx, st, nil, config.DefaultTenant, "", []store.TimerOp{{Op: "schedule", Queue: "q", TimerKey: "k", Txn: "k", DelayMs: 3000}}); err != nil {
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

// TestPoisonTimerIsIsolated: a timer whose message PostgreSQL refuses (a txn
// the index cannot hold, scheduled before the edge refused it) no longer
// holds back the healthy timers claimed with it: they fire in the same
// cycle; the poison's attempts and last error are written, it is retried
// after a doubling backoff, and after MaxAttempts it is failed: listed with
// its error, never claimed again, until cancelled.
func TestPoisonTimerIsIsolated(t *testing.T) {
	sw, st, c := newSweeper(t)
	sw.MaxAttempts, sw.RetryBase = 3, time.Second
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if _, err := applyTimers(ctx, st, nil, config.DefaultTenant, "", []store.TimerOp{{Op: "schedule", Queue: "q", TimerKey: k, Txn: k, DelayMs: 0}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload)
		VALUES ($1, 'q', 'poison', 'Default', $2, (SELECT string_agg(chr(33 + (random() * 90)::int), '') FROM generate_series(1, 3000)),
		gen_random_uuid(), 'null')`, config.DefaultTenant, c.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sw.RunOnce(ctx); err != nil {
		t.Fatalf("a cycle with a poison timer in its batch failed: %v", err)
	}
	if n := sw.Stats.Fired.Load(); n != 5 {
		t.Fatalf("fired %d of the 5 healthy timers claimed with the poison", n)
	}
	poison := func() store.Timer {
		tm, ok, err := st.PeekTimer(ctx, config.DefaultTenant, "q", "poison")
		if err != nil || !ok {
			t.Fatalf("peek poison: %v %v", ok, err)
		}
		return tm
	}
	if p := poison(); p.Attempts != 1 || p.LastError == "" || p.Failed || p.Claimed {
		t.Fatalf("after one failure: %+v", p)
	}
	for attempt, wait := range []time.Duration{time.Second, 2 * time.Second} {
		c.Advance(wait - time.Millisecond)
		if err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if p := poison(); p.Attempts != attempt+1 {
			t.Fatalf("retried before its backoff of %v: %+v", wait, p)
		}
		c.Advance(time.Millisecond)
		if err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p := poison()
	if p.Attempts != 3 || !p.Failed || !strings.Contains(p.LastError, "index row size") {
		t.Fatalf("after MaxAttempts: %+v", p)
	}
	if sw.Stats.TimersFailed.Load() != 1 || sw.Stats.FireFailures.Load() != 3 {
		t.Fatalf("metrics: failed %d, fire failures %d", sw.Stats.TimersFailed.Load(), sw.Stats.FireFailures.Load())
	}
	c.Advance(time.Hour)
	if next, known, err := st.NextTimer(ctx); err != nil || known {
		t.Fatalf("a failed timer still counts as due: %v %v %v", next, known, err)
	}
	if err := sw.RunOnce(ctx); err != nil || poison().Attempts != 3 {
		t.Fatalf("a failed timer was claimed again: %v %+v", err, poison())
	}
	res, err := applyTimers(ctx, st, nil, config.DefaultTenant, "", []store.TimerOp{{Op: "cancel", Queue: "q", TimerKey: "poison"}})
	if err != nil || res[0].Status != "cancelled" {
		t.Fatalf("cancel a failed timer: %+v %v", res, err)
	}
}
