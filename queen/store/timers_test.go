package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// clockedStore is a store whose database time the test moves.
func clockedStore(t *testing.T) (*store.Store, *time.Time) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { t := now; return &t }}), &now
}

// applyOne runs one KV op alone, unbounded, and fails the test on an error.
func applyOne(t *testing.T, s *store.Store, op store.KVOp) store.KVResult {
	t.Helper()
	r, err := s.ApplyKV(context.Background(), tenant, []store.KVOp{op}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r[0]
}

func TestTimersScheduleClaimFireOnce(t *testing.T) {
	t.Parallel()
	s, now := clockedStore(t)
	ctx := context.Background()
	res, err := s.ApplyTimers(ctx, tenant, "", []store.TimerOp{
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
	if r, err := s.ApplyTimers(ctx, tenant, "", []store.TimerOp{{Op: "cancel", Queue: "tq", TimerKey: "a"}}); err != nil || r[0].Status != "too_late" || r[0].OK {
		t.Fatalf("cancel of a claimed timer: %+v %v", r, err)
	}
	if c, _ := s.ClaimTimers(ctx, "00000000-0000-0000-0000-00000000000c", 30*time.Second, 10); len(c) != 0 {
		t.Fatalf("claimed twice: %+v", c)
	}
	fired, err := s.FireTimers(ctx, token, claimed)
	if err != nil || len(fired) != 1 || fired[0].Duplicate {
		t.Fatalf("fire: %+v %v", fired, err)
	}
	if again, err := s.FireTimers(ctx, token, claimed); err != nil || len(again) != 0 {
		t.Fatalf("fired twice: %+v %v", again, err)
	}
	p, err := claim(ctx, s, store.PopRequest{Tenant: tenant, Queue: "tq", Batch: 10})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].TransactionID != "fire-a" || p.Messages[0].ID != promised {
		t.Fatalf("the fired message: %+v %v (promised id %s)", p, err, promised)
	}
	if r, _ := s.ApplyTimers(ctx, tenant, "", []store.TimerOp{{Op: "cancel", Queue: "tq", TimerKey: "a"}}); r[0].Status != "absent" {
		t.Fatalf("cancel after fire: %+v", r)
	}
	if r, _ := s.ApplyTimers(ctx, tenant, "", []store.TimerOp{{Op: "cancel", Queue: "tq", TimerKey: "b"}}); r[0].Status != "cancelled" || r[0].Txn != "fire-b" {
		t.Fatalf("cancel pending: %+v", r)
	}
}

func TestExpiredClaimIsClaimableAndTheOldClaimFiresNothing(t *testing.T) {
	t.Parallel()
	s, now := clockedStore(t)
	ctx := context.Background()
	if _, err := s.ApplyTimers(ctx, tenant, "", []store.TimerOp{{Op: "schedule", Queue: "tq", TimerKey: "k", Txn: "once"}}); err != nil {
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
	if f, err := s.FireTimers(ctx, dead, first); err != nil || len(f) != 0 {
		t.Fatalf("the dead claim fired: %+v %v", f, err)
	}
	if f, err := s.FireTimers(ctx, live, second); err != nil || len(f) != 1 {
		t.Fatalf("the live claim: %+v %v", f, err)
	}
}

func TestKVTTLVersionsAndPreconditions(t *testing.T) {
	t.Parallel()
	s, now := clockedStore(t)
	ctx := context.Background()
	one := func(op store.KVOp) store.KVResult { return applyOne(t, s, op) }
	put := one(store.KVOp{Op: "put", NS: "n", Key: "k", Value: json.RawMessage(`{"a":1}`), TTLSeconds: 1})
	if !put.Applied || put.Version == 0 {
		t.Fatalf("put: %+v", put)
	}
	if g := one(store.KVOp{Op: "get", NS: "n", Key: "k"}); !g.Found || string(g.Value) != `{"a": 1}` || g.Version != put.Version {
		t.Fatalf("get: %+v %s", g, g.Value)
	}
	stale := put.Version + 1000
	if r := one(store.KVOp{Op: "put", NS: "n", Key: "k", Value: json.RawMessage(`2`), Expect: &stale}); r.Applied || r.Reason != "version" || r.Version != put.Version {
		t.Fatalf("put with a stale expect: %+v", r)
	}
	if r := one(store.KVOp{Op: "putIfAbsent", NS: "n", Key: "k", Value: json.RawMessage(`3`)}); r.Applied || r.Reason != "exists" {
		t.Fatalf("putIfAbsent on a live row: %+v", r)
	}
	*now = now.Add(1001 * time.Millisecond)
	if g := one(store.KVOp{Op: "get", NS: "n", Key: "k"}); g.Found {
		t.Fatalf("an expired row was read: %+v", g)
	}
	if r := one(store.KVOp{Op: "putIfAbsent", NS: "n", Key: "k", Value: json.RawMessage(`4`)}); !r.Applied {
		t.Fatalf("putIfAbsent over an expired row: %+v", r)
	}
	if r := one(store.KVOp{Op: "incr", NS: "n", Key: "c", Delta: 5}); !r.Applied || string(r.Value) != "5" {
		t.Fatalf("incr: %+v %s", r, r.Value)
	}
	if r := one(store.KVOp{Op: "incr", NS: "n", Key: "c", Delta: 2}); string(r.Value) != "7" {
		t.Fatalf("incr again: %s", r.Value)
	}
	one(store.KVOp{Op: "put", NS: "n", Key: "text", Value: json.RawMessage(`"x"`)})
	if r := one(store.KVOp{Op: "incr", NS: "n", Key: "text", Delta: 1}); r.Applied || r.Reason != "type" {
		t.Fatalf("incr of a non-number: %+v", r)
	}
	many := one(store.KVOp{Op: "getMany", NS: "n", Keys: []string{"c", "k", "nope"}})
	prefix := one(store.KVOp{Op: "getPrefix", NS: "n", Prefix: "", Limit: 100})
	if len(many.Rows) != 2 || len(prefix.Rows) != 3 || prefix.Rows[0].Key != "c" {
		t.Fatalf("getMany %+v getPrefix %+v", many, prefix)
	}
	// A required op that loses rolls back the whole call.
	_, err := s.ApplyKV(ctx, tenant, []store.KVOp{
		{Op: "put", NS: "n", Key: "new", Value: json.RawMessage(`1`)},
		{Op: "putIfAbsent", NS: "n", Key: "c", Value: json.RawMessage(`1`), Required: true},
	}, 0)
	var pre *store.KVPrecondition
	if !errors.As(err, &pre) || pre.Index != 1 {
		t.Fatalf("required precondition: %v", err)
	}
	if g := one(store.KVOp{Op: "get", NS: "n", Key: "new"}); g.Found {
		t.Fatal("a call whose required op failed wrote its other ops")
	}
	if _, err := s.ApplyKV(ctx, tenant, []store.KVOp{{Op: "put", NS: "n", Key: "new", Value: json.RawMessage(`1`)},
		{Op: "get", NS: "n", Key: "text"}}, 2); !errors.Is(err, store.ErrKVReadTooLarge) {
		t.Fatalf("a call reading past its bound: %v", err)
	}
	if g := one(store.KVOp{Op: "get", NS: "n", Key: "new"}); g.Found {
		t.Fatal("a call that read too much wrote its other ops")
	}
	if r := one(store.KVOp{Op: "delete", NS: "n", Key: "c"}); !r.Applied {
		t.Fatalf("delete: %+v", r)
	}
	if r := one(store.KVOp{Op: "delete", NS: "n", Key: "c"}); r.Applied {
		t.Fatalf("delete twice: %+v", r)
	}
	one(store.KVOp{Op: "put", NS: "n", Key: "short", Value: json.RawMessage(`1`), TTLSeconds: 1})
	*now = now.Add(2 * time.Second)
	if n, err := s.PruneKV(ctx, 100); err != nil || n != 1 {
		t.Fatalf("prune removed %d expired rows, want 1 (short): %v", n, err)
	}
}

func TestTimerPayloadIsSealedFromScheduleToPop(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	c, err := crypt.New(strings.Repeat("7e", 32))
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), Cipher: c})
	ctx := context.Background()
	on := true
	if _, err := s.Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "enc", Patch: store.OptionPatch{EncryptionEnabled: &on}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyTimers(ctx, tenant, "", []store.TimerOp{{Op: "schedule", Queue: "enc", TimerKey: "k", Txn: "k",
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
	if _, err := s.FireTimers(ctx, token, claimed); err != nil {
		t.Fatal(err)
	}
	p, err := claim(ctx, s, store.PopRequest{Tenant: tenant, Queue: "enc", Batch: 1})
	if err != nil || len(p.Messages) != 1 || !strings.Contains(string(p.Messages[0].Data), "2468") {
		t.Fatalf("pop of the fired timer: %+v %v", p, err)
	}
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM queen.messages`).Scan(&raw); err != nil || strings.Contains(raw, "2468") {
		t.Fatalf("the fired message is stored in the clear: %s %v", raw, err)
	}
}

// Counters and pages as Queen's clients use them: incr refuses to cross
// min or max (a rate limiter's admission) and keeps a live counter's
// expiry, so its window closes; getPrefix pages by an exclusive keyset
// cursor and says when more remain; getMany names the missing keys; the
// read budget cuts a page short instead of failing the call.
func TestKVCountersPagesAndBudgets(t *testing.T) {
	t.Parallel()
	s, now := clockedStore(t)
	ctx := context.Background()
	f := func(v float64) *float64 { return &v }
	one := func(op store.KVOp) store.KVResult { return applyOne(t, s, op) }
	limiter := store.KVOp{Op: "incr", NS: "rl", Key: "client", Delta: 1, Max: f(2), TTLSeconds: 10}
	first := one(limiter)
	if !first.Applied || string(first.Value) != "1" || first.ExpiresAt == nil {
		t.Fatalf("first hit: %+v", first)
	}
	one(limiter)
	*now = now.Add(5 * time.Second)
	if r := one(limiter); r.Applied || r.Reason != "limit" || string(r.Value) != "2" {
		t.Fatalf("a hit over the ceiling: %+v", r)
	}
	if r := one(store.KVOp{Op: "incr", NS: "rl", Key: "client", Delta: -1, Min: f(0), TTLSeconds: 10}); !r.Applied ||
		!r.ExpiresAt.Equal(*first.ExpiresAt) {
		t.Fatalf("a live counter's expiry moved: %+v, first %v", r, first.ExpiresAt)
	}
	*now = now.Add(6 * time.Second)
	if r := one(limiter); !r.Applied || string(r.Value) != "1" || !r.ExpiresAt.After(*first.ExpiresAt) {
		t.Fatalf("a new window: %+v", r)
	}
	if r := one(store.KVOp{Op: "incr", NS: "rl", Key: "fresh", Delta: 5, Max: f(3)}); r.Applied || r.Reason != "limit" || r.Found {
		t.Fatalf("a delta over the ceiling on an absent key: %+v", r)
	}
	if g := one(store.KVOp{Op: "get", NS: "rl", Key: "fresh"}); g.Found {
		t.Fatalf("a refused incr created the key: %+v", g)
	}

	for _, k := range []string{"p/a", "p/b", "p/c", "p/d", "q/x"} {
		one(store.KVOp{Op: "put", NS: "pg", Key: k, Value: json.RawMessage(`"` + k + `"`)})
	}
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		r := one(store.KVOp{Op: "getPrefix", NS: "pg", Prefix: "p/", After: after, Limit: 3, KeysOnly: true})
		for _, row := range r.Rows {
			if row.Value != nil {
				t.Fatalf("a keys-only page carries values: %+v", row)
			}
			keys = append(keys, row.Key)
		}
		if !r.Truncated {
			break
		}
		if pages > 3 || r.NextAfter == "" {
			t.Fatalf("paging does not end: %+v", r)
		}
		after = r.NextAfter
	}
	if strings.Join(keys, ",") != "p/a,p/b,p/c,p/d" {
		t.Fatalf("pages: %v", keys)
	}
	many := one(store.KVOp{Op: "getMany", NS: "pg", Keys: []string{"p/a", "nope", "q/x", "nope"}})
	if len(many.Rows) != 2 || len(many.Missing) != 1 || many.Missing[0] != "nope" || many.Truncated {
		t.Fatalf("getMany: %+v", many)
	}
	res, err := s.ApplyKV(ctx, tenant, []store.KVOp{{Op: "getPrefix", NS: "pg", Prefix: "p/", Limit: 100}}, 12)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; !r.Truncated || len(r.Rows) != 2 || r.NextAfter != "p/b" {
		t.Fatalf("a page cut by the read budget: %+v", r)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 40) + `"`)
	if _, err := s.ApplyKV(ctx, tenant, []store.KVOp{{Op: "put", NS: "pg", Key: "p/big", Value: big}}, 12); err != nil {
		t.Fatalf("a write counted against the read budget: %v", err)
	}
	if _, err := s.ApplyKV(ctx, tenant, []store.KVOp{{Op: "getPrefix", NS: "pg", Prefix: "p/", After: "p/b", Limit: 10}}, 12); !errors.Is(err, store.ErrKVReadTooLarge) {
		t.Fatalf("a page no row of which fits would never advance: %v", err)
	}
}
