package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// cursorRow is a group's cursor row in a partition, as the fence tests
// compare it before and after a refused write.
type cursorRow struct {
	seq     int64
	worker  *string
	leased  bool
	retries int
}

func cursorOf(t *testing.T, ctx context.Context, s *store.Store, pid, group string) cursorRow {
	t.Helper()
	var c cursorRow
	if err := s.Pool().QueryRow(ctx, `SELECT last_consumed_seq, worker_id, lease_expires_at IS NOT NULL, batch_retry_count
		FROM queen.partition_consumers WHERE partition_id = $1 AND consumer_group = $2`, pid, group).Scan(&c.seq, &c.worker, &c.leased, &c.retries); err != nil {
		t.Fatal(err)
	}
	return c
}

// fencedLease is fencedPartition with its one message popped by group g
// under a lease.
func fencedLease(t *testing.T, ctx context.Context, s *store.Store, queue string) (pid, qid string, popped consume.PopResult) {
	t.Helper()
	pid, qid = fencedPartition(t, ctx, s, queue)
	popped, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: queue, Group: "g", Batch: 1})
	if err != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop: %+v %v", popped, err)
	}
	return pid, qid, popped
}

// dlqCount is how many DLQ rows pid has.
func dlqCount(t *testing.T, ctx context.Context, s *store.Store, pid string) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.dead_letter_queue WHERE partition_id = $1`, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sameCursor fails unless pid's cursor row of group is still was.
func sameCursor(t *testing.T, ctx context.Context, s *store.Store, pid, group string, was cursorRow, what string) {
	t.Helper()
	now := cursorOf(t, ctx, s, pid, group)
	if now.seq != was.seq || now.leased != was.leased || now.retries != was.retries || (now.worker == nil) != (was.worker == nil) {
		t.Fatalf("%s wrote the cursor row: %+v, was %+v", what, now, was)
	}
}

// A general ack batch (failed, retry, dlq, a completion twice) routed with
// a stale epoch, or at its epoch on a frozen queue, fails as moved and
// writes nothing: no cursor moved, no lease released, no retry counted, no
// DLQ row. At the queue's epoch it is applied as without shards.
func TestGeneralAckRoutedWithAStaleEpochIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid, popped := fencedLease(t, ctx, s, "fence-general")
	item := func(status string, epoch int64) store.AckItem {
		return store.AckItem{TransactionID: "seed", PartitionID: pid, LeaseID: popped.LeaseID, Status: status, Epoch: epoch}
	}
	was := cursorOf(t, ctx, s, pid, "g")
	for _, status := range []string{"failed", "retry", "dlq"} {
		_, err := ack(ctx, s, tenant, "g", []store.AckItem{item(status, 2)})
		wantMoved(t, status+" ack at epoch 2 of a queue at 1", err, qid)
	}
	_, err := ack(ctx, s, tenant, "g", []store.AckItem{item("completed", 2), item("completed", 2)})
	wantMoved(t, "a completion twice at epoch 2", err, qid)
	sameCursor(t, ctx, s, pid, "g", was, "a moved general ack")
	if res, err := ack(ctx, s, tenant, "g", []store.AckItem{item("retry", 1)}); err != nil || !res[0].Success {
		t.Fatalf("a retry at the queue's epoch: %+v %v", res, err)
	}
	popped, err = claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-general", Group: "g", Batch: 1})
	if err != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop again: %+v %v", popped, err)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-general", 1); err != nil {
		t.Fatal(err)
	}
	was = cursorOf(t, ctx, s, pid, "g")
	for _, status := range []string{"failed", "retry", "dlq"} {
		_, err := ack(ctx, s, tenant, "g", []store.AckItem{item(status, 1)})
		wantMoved(t, status+" ack of a frozen queue", err, qid)
	}
	sameCursor(t, ctx, s, pid, "g", was, "a general ack of a frozen queue")
	if n := dlqCount(t, ctx, s, pid); n != 0 {
		t.Fatalf("a moved dlq ack wrote %d DLQ rows", n)
	}
}

// A transaction's ack (consume.AckStrictInTx, queen/txn's) routed at its
// epoch on a frozen queue fails as moved, nothing written, and the
// transaction rolls back; at a live epoch it is applied.
func TestTransactionAckOfAFrozenQueueIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid, popped := fencedLease(t, ctx, s, "fence-txn")
	strict := func(status string, epoch int64) error {
		items := []store.AckItem{{TransactionID: "seed", PartitionID: pid, LeaseID: popped.LeaseID, Status: status, Epoch: epoch}}
		return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			_, err := consume.AckStrictInTx(ctx, s, tx, tenant, "g", items)
			return err
		})
	}
	wantMoved(t, "a transaction's ack at epoch 2 of a queue at 1", strict("completed", 2), qid)
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-txn", 1); err != nil {
		t.Fatal(err)
	}
	was := cursorOf(t, ctx, s, pid, "g")
	wantMoved(t, "a transaction's completion of a frozen queue", strict("completed", 1), qid)
	wantMoved(t, "a transaction's dlq ack of a frozen queue", strict("dlq", 1), qid)
	sameCursor(t, ctx, s, pid, "g", was, "a transaction's ack of a frozen queue")
	if n := dlqCount(t, ctx, s, pid); n != 0 {
		t.Fatalf("a moved transaction ack wrote %d DLQ rows", n)
	}
	if _, err := s.Activate(ctx, s.Pool(), tenant, "fence-txn", 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := strict("completed", 2); err != nil {
		t.Fatalf("a transaction's ack at the activated epoch: %v", err)
	}
	if c := cursorOf(t, ctx, s, pid, "g"); c.seq != 1 {
		t.Fatalf("cursor at %d after the live transaction ack, want 1", c.seq)
	}
}

// A general ack that waited behind a freeze for its cursor row is
// rechecked against the frozen row when the freeze commits, and fails as
// moved, writing nothing. The order is fixed: the ack is seen waiting on
// the freeze's transaction before that commits.
func TestGeneralAckBlockedBehindAFreezeIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid, popped := fencedLease(t, ctx, s, "fence-general-blocked")
	was := cursorOf(t, ctx, s, pid, "g")
	freeze, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = freeze.Rollback(ctx) }()
	if _, err := s.Freeze(ctx, freeze, tenant, "fence-general-blocked", 1); err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	done := make(chan error, 1)
	go func() {
		items := []store.AckItem{{TransactionID: "seed", PartitionID: pid, LeaseID: popped.LeaseID, Status: "failed", Epoch: 1}}
		done <- pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := consume.AckStrictInTx(ctx, s, tx, tenant, "g", items)
			return err
		})
	}()
	done = waitBlocked(t, ctx, s, conn.Conn().PgConn().PID(), done, "the ack behind an open freeze")
	if err := freeze.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantMoved(t, "the ack that waited behind the freeze", <-done, qid)
	sameCursor(t, ctx, s, pid, "g", was, "the ack that waited behind the freeze")
	if n := dlqCount(t, ctx, s, pid); n != 0 {
		t.Fatalf("the moved ack wrote %d DLQ rows", n)
	}
}

// A release of a frozen queue's lease (an autoAck or abandoned pop's
// claim given back) fails as moved and releases nothing; live, it
// releases as without shards.
func TestReleaseOfAFrozenLeaseIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid, popped := fencedLease(t, ctx, s, "fence-release")
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-release", 1); err != nil {
		t.Fatal(err)
	}
	_, err := s.Release(ctx, popped.LeaseID)
	wantMoved(t, "a release of a frozen lease", err, qid)
	if c := cursorOf(t, ctx, s, pid, "g"); !c.leased {
		t.Fatalf("the moved release released the lease: %+v", c)
	}
	if _, err := s.Activate(ctx, s.Pool(), tenant, "fence-release", 1, 2); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Release(ctx, popped.LeaseID); err != nil || n != 1 {
		t.Fatalf("a release of a live lease: %d %v", n, err)
	}
}

// surfacePushAt pushes one item through queen.push_messages_v3.
func surfacePushAt(ctx context.Context, s *store.Store, queue, partition, txid string) error {
	_, err := s.Pool().Exec(ctx, `SELECT queen.push_messages_v3(jsonb_build_array(jsonb_build_object(
		'queue', $1::text, 'partition', $2::text, 'transactionId', $3::text, 'payload', 1)))`, queue, partition, txid)
	return err
}

// The SQL surface's push meets the fence: on a frozen queue it fails as
// moved (SQLSTATE QF001) and writes nothing, into an existing partition
// or a new one; on a live queue a partition it creates, and its cursor
// rows, take the queue's epoch.
func TestSurfacePushMeetsTheFence(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid := fencedPartition(t, ctx, s, "fence-surface")
	if _, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-surface", Group: "g", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-surface", 1); err != nil {
		t.Fatal(err)
	}
	for _, partition := range []string{"p0", "p1"} {
		err := surfacePushAt(ctx, s, "fence-surface", partition, "surface-"+partition)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "QF001" || pgErr.Detail != qid {
			t.Fatalf("a surface push into %s of a frozen queue: %v, want QF001 naming %s", partition, err, qid)
		}
	}
	var partitions int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.partitions WHERE queue_id = $1`, qid).Scan(&partitions); err != nil {
		t.Fatal(err)
	}
	if n := messageCount(t, ctx, s, pid); n != 1 || partitions != 1 {
		t.Fatalf("the moved surface pushes wrote: %d messages in p0 (want 1), %d partitions (want 1)", n, partitions)
	}
	if _, err := s.Activate(ctx, s.Pool(), tenant, "fence-surface", 1, 2); err != nil {
		t.Fatal(err)
	}
	for _, partition := range []string{"p0", "p2"} {
		if err := surfacePushAt(ctx, s, "fence-surface", partition, "live-"+partition); err != nil {
			t.Fatalf("a surface push into %s of the live queue: %v", partition, err)
		}
	}
	if n := liveRows(t, ctx, s, qid, 2); n != 0 {
		t.Fatalf("%d fenced rows of the queue at epoch 2 are not at 2 (the surface's new partition p2 or its cursor rows)", n)
	}
	var cursors int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
		WHERE p.queue_id = $1 AND p.name = 'p2'`, qid).Scan(&cursors); err != nil || cursors != 1 {
		t.Fatalf("p2 has %d cursor rows (%v), want 1 (group g's)", cursors, err)
	}
}

// A surface push racing a freeze fails as moved and writes nothing. The
// freeze's transaction takes its locks first (the queue row FOR UPDATE, as
// fenceLockSQL, and for p0 the partition row, as fenceSQL), so the push
// reads the queue's live epoch, then waits: into an existing partition, at
// its append's partition lock, rechecked at the epoch it read once the
// freeze commits; into a new one, at its FOR SHARE read of the queue row,
// which then reads the frozen epoch (a plain read would create a live
// partition on the frozen queue). The order is fixed: the push is seen
// waiting before the freeze runs and commits.
func TestSurfacePushRacingAFreeze(t *testing.T) {
	t.Parallel()
	for _, partition := range []string{"p0", "p1"} {
		t.Run(partition, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			pid, qid := fencedPartition(t, ctx, s, "fence-surface-race")
			freeze, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = freeze.Rollback(ctx) }()
			if _, err := freeze.Exec(ctx, `SELECT 1 FROM queen.queues WHERE id = $1 FOR UPDATE`, qid); err != nil {
				t.Fatal(err)
			}
			if _, err := freeze.Exec(ctx, `SELECT 1 FROM queen.partitions WHERE id = $1 AND $2 = 'p0' FOR NO KEY UPDATE`, pid, partition); err != nil {
				t.Fatal(err)
			}
			conn, err := s.Pool().Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			done := make(chan error, 1)
			go func() {
				_, err := conn.Exec(ctx, `SELECT queen.push_messages_v3(jsonb_build_array(jsonb_build_object(
					'queue', 'fence-surface-race', 'partition', $1::text, 'transactionId', 'raced', 'payload', 1)))`, partition)
				done <- err
			}()
			done = waitBlocked(t, ctx, s, conn.Conn().PgConn().PID(), done, "the surface push behind an open freeze")
			if _, err := s.Freeze(ctx, freeze, tenant, "fence-surface-race", 1); err != nil {
				t.Fatal(err)
			}
			if err := freeze.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "QF001" || pgErr.Detail != qid {
				t.Fatalf("the surface push that waited behind the freeze: %v, want QF001 naming %s", err, qid)
			}
			var partitions int
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.partitions WHERE queue_id = $1`, qid).Scan(&partitions); err != nil {
				t.Fatal(err)
			}
			if n := messageCount(t, ctx, s, pid); n != 1 || partitions != 1 {
				t.Fatalf("the raced surface push wrote: %d messages in p0 (want 1), %d partitions (want 1)", n, partitions)
			}
		})
	}
}

// A move's cleanup deletes the source's cursor rows before its messages
// and partitions. An ack routed there meanwhile (a broker whose cached
// placement still names the source) finds no lease: it must fail as moved
// on the frozen partition row, so the broker routes it to the destination,
// where the lease lives, and not be refused for good as an invalid lease.
func TestAckOnASourceWhoseCursorsAreGoneIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid, popped := fencedLease(t, ctx, s, "fence-cleanup")
	for _, sql := range []string{ // the freeze, then the cleanup's first deletes
		`UPDATE queen.queues SET epoch = -1 WHERE id = $1`,
		`UPDATE queen.partitions SET epoch = -1 WHERE queue_id = $1`,
		`DELETE FROM queen.partition_consumers WHERE queue_id = $1`,
	} {
		if _, err := s.Pool().Exec(ctx, sql, qid); err != nil {
			t.Fatal(err)
		}
	}
	for _, status := range []string{"completed", "failed"} {
		item := store.AckItem{TransactionID: "seed", PartitionID: pid, LeaseID: popped.LeaseID, Status: status, Epoch: 1}
		_, err := ack(ctx, s, tenant, "g", []store.AckItem{item})
		wantMoved(t, status+" ack on a source without cursor rows", err, qid)
	}
	item := store.AckItem{TransactionID: "seed", PartitionID: pid, LeaseID: popped.LeaseID, Status: "completed"}
	if res, err := ack(ctx, s, tenant, "g", []store.AckItem{item}); err != nil || res[0].Success {
		t.Errorf("without shards (no epoch) nothing is fenced: %+v %v, want the lease refused", res, err)
	}
}
