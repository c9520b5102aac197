package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// The queue statistics snapshot holds what the live lists count, as of
// its refresh: stale in between by design, current after a refresh (but
// for a message deleted unconsumed, pending until passed), every queue
// counted however many refresh statements it takes, and a deleted queue's
// row gone with it.
func TestQueueStatsSnapshotFollowsTheLiveCounts(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	for i, it := range []struct{ queue, partition string }{{"qs-a", "p1"}, {"qs-a", "p1"}, {"qs-a", "p2"}, {"qs-b", "p1"}, {"qs-b", "p1"}} {
		push(t, s, it.queue, it.partition, fmt.Sprintf("t%d", i))
	}
	ackAll(t, s, "", popOne(t, s, consume.PopRequest{Queue: "qs-a", Partition: "p1", Batch: 1}))
	popOne(t, s, consume.PopRequest{Queue: "qs-b", Batch: 1}) // leased: processing
	// Two dead letters in two partitions of qs-a, by failed acks.
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "qs-a",
		Patch: store.OptionPatch{RetryLimit: intp(0), DLQAfterMaxRetries: boolp(true)}}); err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"p1", "p2"} {
		p := popOne(t, s, consume.PopRequest{Queue: "qs-a", Partition: part, Batch: 1})
		out, err := ack(ctx, s, tenant, "", []store.AckItem{{TransactionID: p.Messages[0].TransactionID,
			PartitionID: p.PartitionID, LeaseID: p.LeaseID, Status: "failed", Error: "boom"}})
		if err != nil || !out[0].Success {
			t.Fatalf("failed ack: %+v %v", out, err)
		}
	}
	refresh := func() {
		t.Helper()
		if _, err := s.RefreshQueueStats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() map[string]store.QueueInfo {
		t.Helper()
		snap, err := s.SnapshotQueues(ctx, tenant, store.QueueFilter{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.QueueInfo{}
		for _, q := range snap.Queues {
			q.Queue = store.Queue{Name: q.Name}
			out[q.Name] = q
		}
		return out
	}
	live := func() map[string]store.QueueInfo {
		t.Helper()
		qs, err := s.ListQueues(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.QueueInfo{}
		for _, q := range qs {
			q.Queue = store.Queue{Name: q.Name}
			out[q.Name] = q
		}
		return out
	}
	refresh()
	full, err := s.SnapshotQueues(ctx, tenant, store.QueueFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if l := full.Leases; l.Active != 1 || l.Partitions != 1 || l.BatchSize != 1 || full.DLQ.Total != 2 || full.DLQ.Partitions != 2 {
		t.Fatalf("snapshot totals: leases %+v, dead letters %+v", l, full.DLQ)
	}
	before := snapshot()
	if want := live(); fmt.Sprint(before) != fmt.Sprint(want) {
		t.Fatalf("after a refresh the snapshot is\n%v\nthe live counts\n%v", before, want)
	}
	if a, b := before["qs-a"], before["qs-b"]; a.Messages != 3 || a.Pending != 0 || a.DLQ != 2 || a.PartitionCount != 3 || b.Processing != 1 {
		t.Fatalf("snapshot counts: %+v %+v", a, b)
	}
	push(t, s, "qs-a", "p2", "later")
	if got := snapshot(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("the snapshot moved without a refresh: %v", got)
	}
	refresh()
	if got, want := snapshot(), live(); fmt.Sprint(got) != fmt.Sprint(want) || got["qs-a"].Messages != 4 {
		t.Fatalf("after the second refresh the snapshot is\n%v\nthe live counts\n%v", got, want)
	}
	// A message deleted unconsumed (as retention deletes) counts as pending
	// until a cursor passes its seq, in the snapshot as in the lists:
	// neither reads a message.
	if _, err := pool.Exec(ctx, `DELETE FROM queen.messages WHERE transaction_id = 'later'`); err != nil {
		t.Fatal(err)
	}
	refresh()
	if got, want := snapshot()["qs-a"], live()["qs-a"]; fmt.Sprint(got) != fmt.Sprint(want) || got.Pending != 1 || livePending(t, pool, "qs-a")["p2"] != 0 {
		t.Fatalf("after an unconsumed delete: snapshot %+v, live %+v", got, want)
	}
	if _, err := namesOf(s).DeleteQueue(ctx, tenant, "qs-b"); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.queue_stats`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("queue_stats rows after deleting qs-b: %d %v", rows, err)
	}

	// More queues than one refresh statement counts.
	items := make([]store.PushItem, 1200)
	for i := range items {
		items[i] = store.PushItem{Queue: fmt.Sprintf("chunk-%04d", i), TransactionID: "x"}
	}
	if _, err := pushItems(ctx, s, tenant, items, ""); err != nil {
		t.Fatal(err)
	}
	n, err := s.RefreshQueueStats(ctx)
	if err != nil || n != len(items)+1 {
		t.Fatalf("refresh counted %d queues (%v), want %d", n, err, len(items)+1)
	}
	snap := snapshot()
	for _, it := range items {
		if snap[it.Queue].Messages != 1 {
			t.Fatalf("%s in the snapshot: %+v", it.Queue, snap[it.Queue])
		}
	}
}

// A refresh costs the queues' partitions and cursors, never their backlog:
// on 200,000 pending messages it reads a few blocks per partition against
// the whole (partition, seq) index that counting them would read, and
// still answers the exact pending count. It fails with the pending count
// taken from the messages, as the live lists take it.
func TestQueueStatsRefreshReadsNoBacklog(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "backlog"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "backlog", 10, 20000, 0)
	var qid string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM queen.queues WHERE tenant_id = $1 AND name = 'backlog'`, tenant).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	limit := pages(t, pool, "queen.messages_partition_id_seq_key") / 3
	if blocks, _ := buffers(t, pool, store.RefreshQueueStatsSQL, []string{qid}, nil); blocks > limit {
		t.Fatalf("a refresh read %d blocks for 200,000 pending messages (bound %d)", blocks, limit)
	}
	snap, err := s.SnapshotQueues(ctx, tenant, store.QueueFilter{Name: "backlog"})
	if err != nil || len(snap.Queues) != 1 || snap.Queues[0].Pending != 200000 || snap.Queues[0].Messages != 200000 {
		t.Fatalf("snapshot of backlog: %+v %v", snap.Queues, err)
	}
}

// A refresh writes only the rows whose counts changed, and does not even
// lock the others (xmax): before, every pass rewrote every queue's row
// (10,000 row versions and 1 MB of WAL a pass at 10,000 queues, idle or
// not), and an upsert whose WHERE is false still locks and logs the row. A row left alone still holds as of the last
// complete pass, which the snapshot's age follows.
func TestQueueStatsRefreshWritesOnlyChangedRows(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	push(t, s, "qw-a", "p1", "a1")
	push(t, s, "qw-b", "p1", "b1")
	versions := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT q.name, st.xmin::text || '/' || st.xmax::text FROM queen.queue_stats st
			JOIN queen.queues q ON q.id = st.queue_id WHERE q.tenant_id = $1 AND q.name IN ('qw-a', 'qw-b')`, tenant)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for rows.Next() {
			var name, xmin string
			if err := rows.Scan(&name, &xmin); err != nil {
				t.Fatal(err)
			}
			out[name] = xmin
		}
		if rows.Err() != nil || len(out) != 2 {
			t.Fatalf("stats rows %v %v", out, rows.Err())
		}
		return out
	}
	oldest := func() time.Time {
		t.Helper()
		snap, err := s.SnapshotQueues(ctx, tenant, store.QueueFilter{Name: "qw-b"})
		if err != nil || snap.Oldest.IsZero() {
			t.Fatalf("snapshot %+v %v", snap, err)
		}
		return snap.Oldest
	}
	if _, err := s.RefreshQueueStats(ctx); err != nil {
		t.Fatal(err)
	}
	first, firstAt := versions(), oldest()
	if _, err := s.RefreshQueueStats(ctx); err != nil {
		t.Fatal(err)
	}
	if again := versions(); again["qw-a"] != first["qw-a"] || again["qw-b"] != first["qw-b"] {
		t.Fatalf("a refresh with nothing changed rewrote rows: %v then %v", first, again)
	}
	if at := oldest(); !at.After(firstAt) {
		t.Fatalf("the snapshot's time stayed at %v after a second complete pass", at)
	}
	push(t, s, "qw-a", "p1", "a2")
	if _, err := s.RefreshQueueStats(ctx); err != nil {
		t.Fatal(err)
	}
	if now := versions(); now["qw-a"] == first["qw-a"] || now["qw-b"] != first["qw-b"] {
		t.Fatalf("after a push to qw-a only: %v then %v", first, now)
	}
	snap, err := s.SnapshotQueues(ctx, tenant, store.QueueFilter{Name: "qw-a"})
	if err != nil || len(snap.Queues) != 1 || snap.Queues[0].Messages != 2 {
		t.Fatalf("qw-a's snapshot after its push: %+v %v", snap, err)
	}
}
