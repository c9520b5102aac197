package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// An empty wildcard pop of a drained queue leaves a watermark for (queue,
// group); with messages pending (even all leased) it only moves an
// existing row's updated_at, at most every 30 s; a seek to a timestamp, a
// group delete, a subscription change and a queue delete remove the rows.
func TestWatermarksWrittenOnEmptyWildcardPopsAndDropped(t *testing.T) {
	ctx := context.Background()
	s, pool, sim := simTimeStore(t)
	push := func(part, txid string) {
		t.Helper()
		if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "wm", Partition: part, TransactionID: txid}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	pop := func() consume.PopResult {
		t.Helper()
		r, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "wm", Group: "g", Batch: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	row := func() (empty, updated time.Time, ok bool) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT last_empty_scan_at, updated_at FROM queen.consumer_watermarks
			WHERE queue_name = 'wm' AND consumer_group = 'g'`).Scan(&empty, &updated)
		return empty, updated, err == nil
	}
	for _, p := range []string{"a", "b", "c"} {
		push(p, p+"1")
	}
	for r := pop(); len(r.Messages) > 0; r = pop() {
		if _, _, ok := row(); ok {
			t.Fatal("a watermark while messages were being served")
		}
		for _, m := range r.Messages {
			if _, err := s.Ack(ctx, tenant, "g", []store.AckItem{{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	empty, updated, ok := row()
	if !ok || !empty.Equal(sim.Now()) || !updated.Equal(sim.Now()) {
		t.Fatalf("after draining: row %v %v %v, want both at %v", ok, empty, updated, sim.Now())
	}
	first := sim.Now()
	// Pending but leased: the row stays "empty at first", updated_at moves
	// only once 30 s have passed.
	push("a", "a2")
	if r := pop(); len(r.Messages) != 1 {
		t.Fatalf("pop a2: %+v", r)
	}
	sim.Advance(10 * time.Second)
	pop()
	if _, updated, _ := row(); !updated.Equal(first) {
		t.Fatalf("updated_at moved within 30 s: %v", updated)
	}
	sim.Advance(25 * time.Second)
	pop()
	if empty, updated, _ := row(); !empty.Equal(first) || !updated.Equal(sim.Now()) {
		t.Fatalf("with a2 pending: empty %v updated %v, want %v and %v", empty, updated, first, sim.Now())
	}
	exists := func() bool { _, _, ok := row(); return ok }
	// Each of these drops the row; an empty pop 30 s later writes it again.
	rewrite := func() {
		t.Helper()
		sim.Advance(31 * time.Second)
		if _, err := pool.Exec(ctx, `INSERT INTO queen.consumer_watermarks (queue_name, consumer_group) VALUES ('wm', 'g')
			ON CONFLICT DO NOTHING`); err != nil {
			t.Fatal(err)
		}
	}
	at := sim.Now().Add(-time.Hour)
	if _, _, err := s.Seek(ctx, tenant, "g", "wm", nil, true, nil); err != nil || !exists() {
		t.Fatalf("seek to end dropped the row (%v)", err)
	}
	if _, _, err := s.Seek(ctx, tenant, "g", "wm", nil, false, &at); err != nil || exists() {
		t.Fatalf("seek to a timestamp kept the row (%v)", err)
	}
	rewrite()
	if _, err := s.SetSubscription(ctx, tenant, "g", at); err != nil || exists() {
		t.Fatalf("subscription change kept the row (%v)", err)
	}
	rewrite()
	q := "wm"
	if _, _, err := namesOf(s).DeleteGroup(ctx, tenant, "g", &q, false); err != nil || exists() {
		t.Fatalf("group delete kept the row (%v)", err)
	}
	rewrite()
	if _, err := namesOf(s).DeleteQueue(ctx, tenant, "wm"); err != nil || exists() {
		t.Fatalf("queue delete kept the row (%v)", err)
	}
}

// TestWatermarkAfterAnEmptyPopWhileLeased: an empty pop while a message is
// still leased writes no row (something is pending), and must not silence
// the check: the empty pop right after the ack writes the row at once.
// Before, the throttle was armed by the check that wrote nothing, and the
// row appeared only 30 s later (three of Queen's client tests read it
// right after an empty pop).
func TestWatermarkAfterAnEmptyPopWhileLeased(t *testing.T) {
	ctx := context.Background()
	s, pool, sim := simTimeStore(t)
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "wl", TransactionID: "m1"}}, ""); err != nil {
		t.Fatal(err)
	}
	pop := func(s *store.Store, q string) consume.PopResult {
		t.Helper()
		r, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: q, Group: "g", Batch: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := pop(s, "wl")
	if len(r.Messages) != 1 {
		t.Fatalf("pop: %+v", r)
	}
	sim.Advance(time.Second)
	if again := pop(s, "wl"); len(again.Messages) != 0 {
		t.Fatalf("a leased message was served twice: %+v", again)
	}
	m := r.Messages[0]
	if _, err := s.Ack(ctx, tenant, "g", []store.AckItem{{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID}}); err != nil {
		t.Fatal(err)
	}
	sim.Advance(time.Second)
	pop(s, "wl")
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.consumer_watermarks WHERE queue_name = 'wl' AND consumer_group = 'g'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("no watermark after the empty pop that followed the ack (%d rows, %v)", n, err)
	}
}

// Watermarks are a tenant's: a group delete, a seek to a timestamp, a
// subscription change or a queue delete in one tenant leaves another
// tenant's row of the same queue and group. Before, keyed by name alone,
// each of them deleted every tenant's.
func TestWatermarksAreKeyedByTenant(t *testing.T) {
	ctx := context.Background()
	s, pool, _ := simTimeStore(t)
	const other = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"
	for _, tn := range []string{tenant, other} {
		if _, err := pushItems(ctx, s, tn, []store.PushItem{{Queue: "wt", TransactionID: "m"}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	otherRow := func() bool {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.consumer_watermarks WHERE tenant_id = $1 AND queue_name = 'wt' AND consumer_group = 'g'`, other).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	put := func() {
		t.Helper()
		for _, tn := range []string{tenant, other} {
			if _, err := pool.Exec(ctx, `INSERT INTO queen.consumer_watermarks (tenant_id, queue_name, consumer_group) VALUES ($1, 'wt', 'g')
				ON CONFLICT DO NOTHING`, tn); err != nil {
				t.Fatal(err)
			}
		}
	}
	at := time.Now().Add(-time.Hour)
	q := "wt"
	for name, op := range map[string]func() error{
		"seek":         func() error { _, _, err := s.Seek(ctx, tenant, "g", "wt", nil, false, &at); return err },
		"subscription": func() error { _, err := s.SetSubscription(ctx, tenant, "g", at); return err },
		"group delete": func() error { _, _, err := namesOf(s).DeleteGroup(ctx, tenant, "g", &q, true); return err },
		"queue delete": func() error { _, err := namesOf(s).DeleteQueue(ctx, tenant, "wt"); return err },
	} {
		put()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !otherRow() {
			t.Fatalf("a %s in the default tenant deleted another tenant's watermark", name)
		}
	}
}

// simTimeStore is a store whose database time is a simulated clock.
func simTimeStore(t *testing.T) (*store.Store, *pgxpool.Pool, *clock.Sim) {
	pool := storetest.Pool(t)
	sim := clock.NewSim(time.Now().UTC().Truncate(time.Millisecond))
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), Clock: sim,
		DBNow: func() *time.Time { t := sim.Now(); return &t }})
	claimerFor(s, consume.ClaimerOptions{Clock: sim})
	return s, pool, sim
}
