package leader_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// The retention pass's tests, moved from queen/store with the pass.

const tenant = config.DefaultTenant

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

// push puts items in through a push path of s, as the broker pushes.
func push(t *testing.T, s *store.Store, items ...store.PushItem) []store.PushResult {
	t.Helper()
	out, err := pushpath.New(pushpath.Options{Store: s, Retry: storetest.Retry(s), IDs: ids.NewSource(clock.Real{}, nil)}).Push(context.Background(), tenant, "", items)
	if err != nil || len(out.Results) != len(items) {
		t.Fatalf("push %+v: %+v %v", items, out, err)
	}
	return out.Results
}

func TestRetentionPassRulesAndLeaderLock(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { return &now }})
	ctx := context.Background()
	configure := func(q string, p store.OptionPatch) {
		if _, err := names.New(s, names.Options{}).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: q, Patch: p}); err != nil {
			t.Fatal(err)
		}
	}
	configure("expiring", store.OptionPatch{RetentionEnabled: boolp(true), RetentionSeconds: intp(60)})
	configure("completed", store.OptionPatch{RetentionEnabled: boolp(true), CompletedRetentionSeconds: intp(60)})
	configure("evicting", store.OptionPatch{MaxWaitTimeSeconds: intp(60)})
	configure("kept", store.OptionPatch{})
	for _, q := range []string{"expiring", "completed", "evicting", "kept"} {
		push(t, s, store.PushItem{Queue: q, TransactionID: "old-1"}, store.PushItem{Queue: q, TransactionID: "old-2"})
	}
	// Consume one of the two "completed" messages.
	p, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "completed", Batch: 1})
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("pop: %+v %v", p, err)
	}
	if _, err := consume.New(consume.Options{Store: s, Retry: storetest.Retry(s), Clock: clock.Real{}}).Ack(ctx, tenant, "", []store.AckItem{{TransactionID: "old-1", PartitionID: p.PartitionID, LeaseID: p.LeaseID}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	lead, ok, err := s.TryLeader(ctx, store.RetentionLock)
	if err != nil || !ok {
		t.Fatalf("leader: %v %v", ok, err)
	}
	if other, second, err := s.TryLeader(ctx, store.RetentionLock); err != nil || second {
		// Give both sessions back before failing: the pool's cleanup
		// waits for every acquired connection, so a held one hung the
		// package until its 15 min timeout and hid this message.
		if second {
			other.Release()
		}
		lead.Release()
		t.Fatalf("a second leader while the first holds the lock: %v %v", second, err)
	}
	res, err := leader.RetentionPass(ctx, s, lead.Executor(), 100)
	lead.Release()
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 2 || res.Completed != 1 || res.Evicted != 2 {
		t.Fatalf("retention pass: %+v", res)
	}
	left := map[string]int64{}
	qs, _ := s.ListQueues(ctx, tenant)
	for _, q := range qs {
		left[q.Name] = q.Messages
	}
	if left["expiring"] != 0 || left["completed"] != 1 || left["evicting"] != 0 || left["kept"] != 2 {
		t.Fatalf("left after retention: %v", left)
	}
	// The lock was released: another pass (another broker) can lead, and
	// running again changes nothing.
	lead, ok, err = s.TryLeader(ctx, store.RetentionLock)
	if err != nil || !ok {
		t.Fatalf("lock not released: %v %v", ok, err)
	}
	defer lead.Release()
	if again, err := leader.RetentionPass(ctx, s, s.Pool(), 100); err != nil || again != (leader.RetentionResult{}) {
		t.Fatalf("second pass: %+v %v", again, err)
	}
}

func TestCleanupRemovesOnlyEmptyIdlePartitions(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	now := time.Now()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { return &now }})
	ctx := context.Background()
	for _, p := range []string{"Default", "idle", "leased", "consumed-lately", "holds-a-message"} {
		push(t, s, store.PushItem{Queue: "c", Partition: p, TransactionID: p})
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Every partition but one emptied, and idle for 40 days.
	exec(`DELETE FROM queen.messages m USING queen.partitions p WHERE p.id = m.partition_id AND p.name <> 'holds-a-message'`)
	exec(`UPDATE queen.partitions SET last_activity = $1::timestamptz - interval '40 days'`, now)
	exec(`INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, lease_expires_at)
		SELECT id, queue_id, '__QUEUE_MODE__', $1::timestamptz + interval '1 minute' FROM queen.partitions WHERE name = 'leased'`, now)
	exec(`INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, last_consumed_at)
		SELECT id, queue_id, 'g', $1::timestamptz - interval '1 day' FROM queen.partitions WHERE name = 'consumed-lately'`, now)
	if n, err := leader.CleanupPartitions(ctx, s, s.Pool(), 100, 0); err != nil || n != 0 {
		t.Fatalf("cleanup with 0 days removed %d: %v", n, err)
	}
	n, err := leader.CleanupPartitions(ctx, s, s.Pool(), 1, 30)
	if err != nil || n != 1 {
		t.Fatalf("cleanup removed %d partitions, want 1 (idle): %v", n, err)
	}
	var left []string
	rows, _ := pool.Query(ctx, `SELECT name FROM queen.partitions ORDER BY name`)
	for rows.Next() {
		var name string
		_ = rows.Scan(&name)
		left = append(left, name)
	}
	if got := strings.Join(left, ","); got != "Default,consumed-lately,holds-a-message,leased" {
		t.Fatalf("partitions left: %s", got)
	}
	// A push to the removed partition creates it again and is stored.
	if res := push(t, s, store.PushItem{Queue: "c", Partition: "idle", TransactionID: "again"}); res[0].Status != "queued" {
		t.Fatalf("push after cleanup: %+v", res)
	}
}

// TestDeadLeaderIsReplaced: the lock is a session lock, so a leader whose
// process dies (its session ends, no unlock) is replaced at the next pass
// of any other broker; and the dead session's holder, if its process
// lived on (a failover ended only the session), runs no pass on it.
func TestDeadLeaderIsReplaced(t *testing.T) {
	t.Parallel()
	dsn := storetest.DSN(t)
	ctx := context.Background()
	open := func() *store.Store {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	}
	a, b := open(), open()
	leadA, ok, err := a.TryLeader(ctx, store.RetentionLock)
	if err != nil || !ok {
		t.Fatalf("a leads: %v %v", ok, err)
	}
	// The dead session's connection still counts as taken by a's pool;
	// its release (the unlock fails) drops it, so the pool can close.
	defer leadA.Release()
	if _, ok, err := b.TryLeader(ctx, store.RetentionLock); err != nil || ok {
		t.Fatalf("b leads beside a: %v %v", ok, err)
	}
	// a's process dies holding the lock: its session ends, no unlock is
	// ever sent. Only this test's database: pg_locks lists the advisory
	// locks of every database, and a parallel test's leader in its own
	// database holds the same key (its session was killed once in CI).
	if _, err := b.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND objid = $1 AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, store.RetentionLock); err != nil {
		t.Fatal(err)
	}
	// a lost its lock with its session: its pass must not go on, on
	// other connections, beside the leader b is about to become (as it
	// did while the pass ran on the pool).
	if _, err := leader.RetentionPass(ctx, a, leadA.Executor(), 100); err == nil {
		t.Fatal("a ran a retention pass after its lock session died")
	}
	if _, err := leader.CleanupPartitions(ctx, a, leadA.Executor(), 100, 1); err == nil {
		t.Fatal("a cleaned partitions after its lock session died")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		lead, ok, err := b.TryLeader(ctx, store.RetentionLock)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			lead.Release()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead leader's lock was never released")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Retention keeps up: a backlog many batches deep clears in one pass.
func TestRetentionClearsABacklogInOnePass(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	s := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { n := now; return &n }})
	ctx := context.Background()
	if _, err := names.New(s, names.Options{}).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "bulk",
		Patch: store.OptionPatch{RetentionEnabled: boolp(true), RetentionSeconds: intp(60)}}); err != nil {
		t.Fatal(err)
	}
	items := make([]store.PushItem, 2500)
	for i := range items {
		items[i] = store.PushItem{Queue: "bulk", Partition: fmt.Sprint("p", i%7), TransactionID: fmt.Sprint("t", i)}
	}
	push(t, s, items...)
	now = now.Add(2 * time.Minute)
	res, err := leader.RetentionPass(ctx, s, s.Pool(), 100)
	if err != nil || res.Expired != 2500 {
		t.Fatalf("one pass: %+v %v", res, err)
	}
}

// claim is a pop as the broker runs it (consume.Claimer.Claim) over s.
func claim(ctx context.Context, s *store.Store, req consume.PopRequest) (consume.PopResult, error) {
	return consume.NewClaimer(s, consume.ClaimerOptions{}).Claim(ctx, req)
}
