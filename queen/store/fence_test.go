package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// fencedPartition pushes one message to queue's partition p0 and answers
// the partition's id and the queue's.
func fencedPartition(t *testing.T, ctx context.Context, s *store.Store, queue string) (pid, qid string) {
	t.Helper()
	res, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: queue, Partition: "p0", TransactionID: "seed"}}, "")
	if err != nil || res[0].Status != "queued" {
		t.Fatalf("seed push: %v %+v", err, res)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT queue_id::text FROM queen.partitions WHERE id = $1`, res[0].PartitionID).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	return res[0].PartitionID, qid
}

// appendAt appends one message (transactionId txid) to pid routed with
// epochs (nil: no shards), on q.
func appendAt(ctx context.Context, s *store.Store, q store.Executor, pid, txid string, epochs []int64) error {
	rows := s.NewRows([]store.PushItem{{TransactionID: txid}}, []string{pid}, "")
	_, err := s.AppendRows(ctx, q, store.AppendRowsParams{Rows: rows, Epochs: epochs})
	return err
}

// messageCount is how many messages pid holds.
func messageCount(t *testing.T, ctx context.Context, s *store.Store, pid string) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE partition_id = $1`, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantMoved fails unless err is the fence's "moved" for queue qid.
func wantMoved(t *testing.T, what string, err error, qid string) {
	t.Helper()
	var moved *store.MovedError
	if !errors.Is(err, store.ErrMoved) || !errors.As(err, &moved) || moved.QueueID != qid {
		t.Fatalf("%s: want moved for queue %s, got %v", what, qid, err)
	}
	if store.Classify(err) != store.Transient {
		t.Fatalf("%s: moved must be transient (never quarantined): %v", what, err)
	}
}

// An append routed with an epoch its partition is not at fails as moved and
// writes nothing; a freeze and an activation move the epoch, and each is a
// no-op run again (invariant 9). No epochs (no shards) checks nothing.
func TestFenceRefusesAStaleEpoch(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid := fencedPartition(t, ctx, s, "fence-stale")
	if err := appendAt(ctx, s, s.Pool(), pid, "e1", []int64{1}); err != nil {
		t.Fatalf("append at the partition's epoch: %v", err)
	}
	wantMoved(t, "epoch 2 on a queue at 1", appendAt(ctx, s, s.Pool(), pid, "e2", []int64{2}), qid)
	if n := messageCount(t, ctx, s, pid); n != 2 {
		t.Fatalf("a moved append wrote: %d messages, want 2", n)
	}
	if r, err := s.Freeze(ctx, s.Pool(), tenant, "fence-stale", 1); err != nil || r.Found != 1 || r.Updated < 2 {
		t.Fatalf("freeze: %+v %v (want the queue row and its partition rewritten)", r, err)
	}
	if r, err := s.Freeze(ctx, s.Pool(), tenant, "fence-stale", 1); err != nil || r.Updated != 0 {
		t.Fatalf("a freeze run again: %+v %v (want nothing rewritten)", r, err)
	}
	wantMoved(t, "epoch 1 on a frozen queue", appendAt(ctx, s, s.Pool(), pid, "e3", []int64{1}), qid)
	if _, err := s.Activate(ctx, s.Pool(), tenant, "fence-stale", 1, 2); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Activate(ctx, s.Pool(), tenant, "fence-stale", 1, 2); err != nil || r.Updated != 0 {
		t.Fatalf("activation run again: %+v %v", r, err)
	}
	wantMoved(t, "epoch 1 after activation at 2", appendAt(ctx, s, s.Pool(), pid, "e4", []int64{1}), qid)
	if err := appendAt(ctx, s, s.Pool(), pid, "e5", []int64{2}); err != nil {
		t.Fatalf("append at the activated epoch: %v", err)
	}
	if err := appendAt(ctx, s, s.Pool(), pid, "e6", nil); err != nil {
		t.Fatalf("append without shards: %v", err)
	}
	if n := messageCount(t, ctx, s, pid); n != 4 {
		t.Fatalf("%d messages, want 4 (seed, e1, e5, e6)", n)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-stale", 1); err == nil {
		t.Fatal("a freeze at epoch 1 of a queue at 2 succeeded")
	}
	var epochs [3]int64
	if err := s.Pool().QueryRow(ctx, `SELECT q.epoch, p.epoch, (SELECT count(*) FROM queen.partitions x WHERE x.queue_id = q.id AND x.epoch <> 2)
		FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id WHERE p.id = $1`, pid).Scan(&epochs[0], &epochs[1], &epochs[2]); err != nil {
		t.Fatal(err)
	}
	if epochs != [3]int64{2, 2, 0} {
		t.Fatalf("epochs (queue, partition, partitions elsewhere) %v, want [2 2 0]", epochs)
	}
}

// A push that waited behind the freeze for its partition's lock is
// rechecked against the frozen row when the freeze commits and fails as
// moved, writing nothing: the freeze updates the fenced rows, a lock alone
// would let it through. The order is fixed: the push is seen waiting on the
// freeze's transaction before that commits.
func TestFreezeFailsAWriterBlockedBehindIt(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid := fencedPartition(t, ctx, s, "fence-blocked")
	freeze, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = freeze.Rollback(ctx) }()
	if _, err := s.Freeze(ctx, freeze, tenant, "fence-blocked", 1); err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pgPID := conn.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() { done <- appendAt(ctx, s, conn, pid, "blocked", []int64{1}) }()
	for waiting := false; !waiting; {
		if err := s.Pool().QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, pgPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the push did not wait for the freeze: %v", err)
		default:
		}
	}
	if err := freeze.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantMoved(t, "the push that waited behind the freeze", <-done, qid)
	if n := messageCount(t, ctx, s, pid); n != 1 {
		t.Fatalf("%d messages, want the seed alone", n)
	}
}

// Rows created on a frozen queue are frozen too: a new partition takes the
// queue row's epoch, its cursor rows and a new group's take theirs, so a
// freeze cannot leave a writable row behind by a partition or a group that
// came after it (for the pushes that run unrouted, as without shards).
func TestNewFencedRowsTakeTheQueueEpoch(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, qid := fencedPartition(t, ctx, s, "fence-new")
	if _, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-new", Group: "g1", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-new", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "fence-new", Partition: "p1"}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-new", Group: "g2", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	var live int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.partitions WHERE queue_id = $1 AND epoch <> -1)
		+ (SELECT count(*) FROM queen.partition_consumers WHERE queue_id = $1 AND epoch <> -1)`, qid).Scan(&live); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.partition_consumers WHERE queue_id = $1`, qid).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if live != 0 || rows != 4 {
		t.Fatalf("%d fenced rows of the frozen queue not frozen, %d cursor rows (want 0 and 4: 2 partitions x 2 groups)", live, rows)
	}
}

// A pop routed with a stale epoch fails as moved and claims nothing: with
// a message claimable (the cursor row's epoch) and with none (the queue
// row's, a one-time filter), and after a freeze.
func TestPopRoutedWithAStaleEpochIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, qid := fencedPartition(t, ctx, s, "fence-pop")
	if _, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-pop", Group: "g", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "fence-pop", Partition: "p1", TransactionID: "second"}}, ""); err != nil {
		t.Fatal(err)
	}
	pop := func(epoch int64) (store.PopRows, error) {
		return s.RunPop(ctx, store.PopParams{QueueID: qid, Group: "g", Partitions: 1, Batch: 1, LeaseSeconds: 60, Epoch: &epoch})
	}
	_, err := pop(2)
	wantMoved(t, "a pop at epoch 2 of a queue at 1", err, qid)
	if got, err := pop(1); err != nil || len(got.Rows) != 1 || got.Rows[0].TransactionID != "second" {
		t.Fatalf("the pop at the queue's epoch after a moved one: %+v %v (want the message the moved pop left)", got, err)
	}
	_, err = pop(2)
	wantMoved(t, "a pop at epoch 2 with nothing claimable", err, qid)
	stale := int64(2)
	_, err = s.RunPopMany(ctx, store.PopParams{QueueID: qid, Group: "g", Batch: 1, LeaseSeconds: 60, Epoch: &stale}, 2)
	wantMoved(t, "pops of one partition each at epoch 2", err, qid)
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-pop", 1); err != nil {
		t.Fatal(err)
	}
	_, err = pop(1)
	wantMoved(t, "a pop of a frozen queue", err, qid)
	if got, err := s.RunPop(ctx, store.PopParams{QueueID: qid, Group: "g", Partitions: 1, Batch: 1}); err != nil || len(got.Rows) != 0 {
		t.Fatalf("an unrouted pop (no shards): %+v %v", got, err)
	}
}

// An ack routed with a stale epoch fails as moved and moves no cursor: the
// same completion at the queue's epoch is then accepted, and one after a
// freeze fails again.
func TestAckRoutedWithAStaleEpochIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, qid := fencedPartition(t, ctx, s, "fence-ack")
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "fence-ack", Partition: "p0", TransactionID: "second"}}, ""); err != nil {
		t.Fatal(err)
	}
	popped, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-ack", Group: "g", Batch: 2})
	if err != nil || len(popped.Messages) != 2 {
		t.Fatalf("pop: %+v %v", popped, err)
	}
	ackAt := func(txid string, epoch int64) ([]store.AckResult, error) {
		return s.AckCompletions(ctx, []store.AckRow{{AckItem: store.AckItem{TransactionID: txid, PartitionID: popped.PartitionID,
			LeaseID: popped.LeaseID, Epoch: epoch}, Tenant: tenant, Group: "g"}})
	}
	_, err = ackAt("seed", 2)
	wantMoved(t, "an ack at epoch 2 of a queue at 1", err, qid)
	if res, err := ackAt("seed", 1); err != nil || !res[0].Success {
		t.Fatalf("the ack at the queue's epoch after a moved one: %+v %v", res, err)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-ack", 1); err != nil {
		t.Fatal(err)
	}
	_, err = ackAt("second", 1)
	wantMoved(t, "an ack of a frozen queue", err, qid)
	var cursor int64
	if err := s.Pool().QueryRow(ctx, `SELECT last_consumed_seq FROM queen.partition_consumers WHERE partition_id = $1 AND consumer_group = 'g'`,
		popped.PartitionID).Scan(&cursor); err != nil || cursor != 1 {
		t.Fatalf("cursor at %d (%v), want 1: the moved acks moved it", cursor, err)
	}
}

// createPartition creates queue's partition name and its cursor rows on q,
// as a push's name resolution does, and answers its id.
func createPartition(ctx context.Context, s *store.Store, q store.Executor, queue, name string) error {
	var id string
	if err := q.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
		return err
	}
	created, err := s.CreatePartitions(ctx, q, store.CreatePartitionsParams{Tenant: tenant, IDs: []string{id}, Queues: []string{queue}, Partitions: []string{name}})
	if err != nil || len(created) != 1 {
		return fmt.Errorf("create partition %s: %v %+v", name, err, created)
	}
	return s.CreateConsumers(ctx, q, store.CreateConsumersParams{Tenant: tenant, PartitionIDs: []string{id}, QueueIDs: []string{created[0].QueueID}})
}

// waitBlocked returns once the backend pgPID waits on a lock, or, if it
// finished first, logs it and answers a channel holding what done
// answered: the caller's checks then say what its not waiting broke.
func waitBlocked(t *testing.T, ctx context.Context, s *store.Store, pgPID uint32, done chan error, what string) chan error {
	t.Helper()
	for waiting := false; !waiting; {
		if err := s.Pool().QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, pgPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Logf("%s did not wait (%v)", what, err)
			done <- err
			return done
		default:
		}
	}
	return done
}

// liveRows is how many fenced rows of queue qid are not at epoch.
func liveRows(t *testing.T, ctx context.Context, s *store.Store, qid string, epoch int64) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.partitions WHERE queue_id = $1 AND epoch <> $2)
		+ (SELECT count(*) FROM queen.partition_consumers WHERE queue_id = $1 AND epoch <> $2)
		+ (SELECT count(*) FROM queen.queues WHERE id = $1 AND epoch <> $2)`, qid, epoch).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A freeze that runs while a partition (and its cursor row) is being
// created, in either order, leaves no fenced row of the queue live: a
// creation open before the freeze is waited for and its rows frozen; one
// that starts after the freeze took the queue row waits for its commit and
// creates its rows frozen. The order is fixed by seeing each one wait.
func TestFreezeRacingAPartitionCreation(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, qid := fencedPartition(t, ctx, s, "fence-race")
	if _, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-race", Group: "g", Batch: 1}); err != nil {
		t.Fatal(err)
	}
	t.Run("creation first", func(t *testing.T) {
		create, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = create.Rollback(ctx) }()
		if err := createPartition(ctx, s, create, "fence-race", "p1"); err != nil {
			t.Fatal(err)
		}
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		done := make(chan error, 1)
		go func() {
			_, err := s.Freeze(ctx, conn, tenant, "fence-race", 1)
			done <- err
		}()
		done = waitBlocked(t, ctx, s, conn.Conn().PgConn().PID(), done, "the freeze behind an open partition creation")
		if err := create.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := liveRows(t, ctx, s, qid, -1); n != 0 {
			t.Fatalf("%d fenced rows of the frozen queue not frozen", n)
		}
	})
	t.Run("freeze first", func(t *testing.T) {
		if _, err := s.Activate(ctx, s.Pool(), tenant, "fence-race", 1, 2); err != nil {
			t.Fatal(err)
		}
		freeze, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = freeze.Rollback(ctx) }()
		if _, err := s.Freeze(ctx, freeze, tenant, "fence-race", 2); err != nil {
			t.Fatal(err)
		}
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		done := make(chan error, 1)
		go func() {
			done <- pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return createPartition(ctx, s, tx, "fence-race", "p2") })
		}()
		done = waitBlocked(t, ctx, s, conn.Conn().PgConn().PID(), done, "the partition creation behind an open freeze")
		if err := freeze.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := liveRows(t, ctx, s, qid, -2); n != 0 {
			t.Fatalf("%d fenced rows of the frozen queue not frozen", n)
		}
	})
}

// A lease extension of a frozen queue's lease fails as moved and extends
// nothing: a lease names no queue, so the frozen cursor row itself refuses
// it. Live, it extends as without shards.
func TestExtendOfAFrozenLeaseIsMoved(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, qid := fencedPartition(t, ctx, s, "fence-extend")
	popped, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "fence-extend", Group: "g", Batch: 1})
	if err != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop: %+v %v", popped, err)
	}
	if n, _, err := s.ExtendLease(ctx, tenant, popped.LeaseID, 60); err != nil || n != 1 {
		t.Fatalf("extend a live lease: %d %v", n, err)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "fence-extend", 1); err != nil {
		t.Fatal(err)
	}
	var before time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT lease_expires_at FROM queen.partition_consumers WHERE worker_id = $1`, popped.LeaseID).Scan(&before); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.ExtendLease(ctx, tenant, popped.LeaseID, 3600)
	wantMoved(t, "extend a frozen lease", err, qid)
	var after time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT lease_expires_at FROM queen.partition_consumers WHERE worker_id = $1`, popped.LeaseID).Scan(&after); err != nil || !after.Equal(before) {
		t.Fatalf("the frozen lease moved from %v to %v (%v)", before, after, err)
	}
}
