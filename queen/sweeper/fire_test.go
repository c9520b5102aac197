package sweeper_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pathtest"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/sweeper"
)

// The timer fire's tests, moved from queen/store with the fire.

const tenant = pathtest.Tenant

// firer is a sweeper that only fires: FireTimers uses its Store alone.
func firer(s *store.Store) *sweeper.Sweeper { return fireThrough(names.New(s, names.Options{})) }

// fireThrough is a sweeper that resolves names through n and appends
// through a write policy without a key.
func fireThrough(n *names.Names) *sweeper.Sweeper {
	return &sweeper.Sweeper{Store: n.Store(), Names: n, Writes: storetest.Writes(n.Store(), nil)}
}

// applyTimers runs ops as the timers route does: in one transaction
// (store.InTx), through a write policy sealing with c (nil: no key).
func applyTimers(ctx context.Context, s *store.Store, c *crypt.Cipher, tenant, sub string, ops []store.TimerOp) ([]store.TimerResult, error) {
	var out []store.TimerResult
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		out, err = storetest.Writes(s, c).ApplyTimers(ctx, tx, tenant, sub, ops)
		return err
	})
	return out, err
}

// clockedStore is a store whose database time the test moves.
func clockedStore(t *testing.T) (*store.Store, *time.Time) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { t := now; return &t }}), &now
}

func TestTimersScheduleClaimFireOnce(t *testing.T) {
	t.Parallel()
	s, now := clockedStore(t)
	ctx := context.Background()
	res, err := applyTimers(ctx, s, nil, tenant, "", []store.TimerOp{
		{Op: "schedule", Queue: "tq", TimerKey: "a", DelayMs: 2000, Txn: "fire-a", Payload: json.RawMessage(`{"n":1}`)},
		{Op: "schedule", Queue: "tq", TimerKey: "b", DelayMs: 60000, Txn: "fire-b"},
	})
	if err != nil || res[0].Status != "scheduled" || !res[0].OK || res[0].MessageID == "" || !res[0].DeliverAt.Equal(now.Add(2*time.Second)) {
		t.Fatalf("schedule: %+v %v", res, err)
	}
	promised := res[0].MessageID
	if c, err := s.ClaimTimers(ctx, "00000000-0000-0000-0000-00000000000a", 30*time.Second, 10); err != nil || len(c) != 0 {
		t.Fatalf("claimed before due: %+v %v", c, err)
	}
	if d, ok, err := s.NextTimer(ctx); err != nil || !ok || d != 2*time.Second {
		t.Fatalf("next timer in %v %v %v, want 2s", d, ok, err)
	}
	*now = now.Add(2 * time.Second)
	token := "00000000-0000-0000-0000-00000000000b"
	claimed, err := s.ClaimTimers(ctx, token, 30*time.Second, 10)
	if err != nil || len(claimed) != 1 || claimed[0].TimerKey != "a" {
		t.Fatalf("claim at due time: %+v %v", claimed, err)
	}
	// While claimed, it can be neither cancelled nor claimed again.
	if r, err := applyTimers(ctx, s, nil, tenant, "", []store.TimerOp{{Op: "cancel", Queue: "tq", TimerKey: "a"}}); err != nil || r[0].Status != "too_late" || r[0].OK {
		t.Fatalf("cancel of a claimed timer: %+v %v", r, err)
	}
	if c, _ := s.ClaimTimers(ctx, "00000000-0000-0000-0000-00000000000c", 30*time.Second, 10); len(c) != 0 {
		t.Fatalf("claimed twice: %+v", c)
	}
	fired, err := firer(s).FireTimers(ctx, token, claimed)
	if err != nil || len(fired) != 1 || fired[0].Duplicate {
		t.Fatalf("fire: %+v %v", fired, err)
	}
	if again, err := firer(s).FireTimers(ctx, token, claimed); err != nil || len(again) != 0 {
		t.Fatalf("fired twice: %+v %v", again, err)
	}
	p, err := consume.NewClaimer(s, consume.ClaimerOptions{}).Claim(ctx, consume.PopRequest{Tenant: tenant, Queue: "tq", Batch: 10})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].TransactionID != "fire-a" || p.Messages[0].ID != promised {
		t.Fatalf("the fired message: %+v %v (promised id %s)", p, err, promised)
	}
	if r, _ := applyTimers(ctx, s, nil, tenant, "", []store.TimerOp{{Op: "cancel", Queue: "tq", TimerKey: "a"}}); r[0].Status != "absent" {
		t.Fatalf("cancel after fire: %+v", r)
	}
	if r, _ := applyTimers(ctx, s, nil, tenant, "", []store.TimerOp{{Op: "cancel", Queue: "tq", TimerKey: "b"}}); r[0].Status != "cancelled" || r[0].Txn != "fire-b" {
		t.Fatalf("cancel pending: %+v", r)
	}
}

func TestExpiredClaimIsClaimableAndTheOldClaimFiresNothing(t *testing.T) {
	t.Parallel()
	s, now := clockedStore(t)
	ctx := context.Background()
	if _, err := applyTimers(ctx, s, nil, tenant, "", []store.TimerOp{{Op: "schedule", Queue: "tq", TimerKey: "k", Txn: "once"}}); err != nil {
		t.Fatal(err)
	}
	dead := "00000000-0000-0000-0000-0000000000d1"
	first, err := s.ClaimTimers(ctx, dead, 30*time.Second, 10)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %+v %v", first, err)
	}
	*now = now.Add(31 * time.Second) // the claimer died; its lease ran out
	live := "00000000-0000-0000-0000-0000000000d2"
	second, err := s.ClaimTimers(ctx, live, 30*time.Second, 10)
	if err != nil || len(second) != 1 {
		t.Fatalf("reclaim after the lease: %+v %v", second, err)
	}
	if f, err := firer(s).FireTimers(ctx, dead, first); err != nil || len(f) != 0 {
		t.Fatalf("the dead claim fired: %+v %v", f, err)
	}
	if f, err := firer(s).FireTimers(ctx, live, second); err != nil || len(f) != 1 {
		t.Fatalf("the live claim: %+v %v", f, err)
	}
}

func TestTimerPayloadIsSealedFromScheduleToPop(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	c, err := crypt.New(strings.Repeat("7e", 32))
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	ctx := context.Background()
	on := true
	if _, err := names.New(s, names.Options{}).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "enc", Patch: store.OptionPatch{EncryptionEnabled: &on}}); err != nil {
		t.Fatal(err)
	}
	if _, err := applyTimers(ctx, s, c, tenant, "", []store.TimerOp{{Op: "schedule", Queue: "enc", TimerKey: "k", Txn: "k",
		Payload: json.RawMessage(`{"pin":"2468"}`)}}); err != nil {
		t.Fatal(err)
	}
	var raw string
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM queen.log_timers`).Scan(&raw); err != nil || strings.Contains(raw, "2468") {
		t.Fatalf("a pending timer holds its payload in the clear: %s %v", raw, err)
	}
	token := "00000000-0000-0000-0000-0000000000e1"
	claimed, err := s.ClaimTimers(ctx, token, time.Minute, 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	fire := &sweeper.Sweeper{Store: s, Names: names.New(s, names.Options{}), Writes: storetest.Writes(s, c)}
	if _, err := fire.FireTimers(ctx, token, claimed); err != nil {
		t.Fatal(err)
	}
	p, err := consume.NewClaimer(s, consume.ClaimerOptions{Cipher: c}).Claim(ctx, consume.PopRequest{Tenant: tenant, Queue: "enc", Batch: 1})
	if err != nil || len(p.Messages) != 1 || !strings.Contains(string(p.Messages[0].Data), "2468") {
		t.Fatalf("pop of the fired timer: %+v %v", p, err)
	}
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM queen.messages`).Scan(&raw); err != nil || strings.Contains(raw, "2468") {
		t.Fatalf("the fired message is stored in the clear: %s %v", raw, err)
	}
}

// The fire runs with the claim just taken: before, it failed and the timer
// waited out the claim's lease.
func TestTimerIntoAQueueRecreatedElsewhereFiresAtOnce(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	pathtest.RecreatedElsewhere(t, a, b, "stale-timer")
	if _, err := applyTimers(ctx, a.Store(), nil, tenant, "", []store.TimerOp{{Op: "schedule", Queue: "stale-timer", TimerKey: "k", Txn: "timed"}}); err != nil {
		t.Fatal(err)
	}
	token := "00000000-0000-0000-0000-0000000000f1"
	claimed, err := a.Store().ClaimTimers(ctx, token, time.Hour, 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	fired, err := fireThrough(a).FireTimers(ctx, token, claimed)
	if err != nil || len(fired) != 1 || fired[0].Duplicate {
		t.Fatalf("fire through the broker that did not delete: %+v %v", fired, err)
	}
	if got := pathtest.PopAll(t, b, "stale-timer"); len(got) != 2 || got[1].TransactionID != "timed" {
		t.Fatalf("stored: %+v", got)
	}
}
