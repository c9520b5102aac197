package store_test

import (
	"context"
	"testing"
)

// RecountMoved sets what a logical copy leaves stale on a destination (the
// id sequences behind copied ids, dlq_counts, the stored counts, pop
// marks), for the moved queue only, and run again sets the same.
func TestRecountMovedSetsWhatTheCopyLeftStale(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid := fencedPartition(t, ctx, s, "recount")
	_, other := fencedPartition(t, ctx, s, "recount-other")
	pool := s.Pool()
	// What an apply leaves: a copied dead letter whose id the sequence
	// never gave, counters the triggers would have kept, a stale mark.
	for _, stmt := range []string{
		`INSERT INTO queen.dead_letter_queue (id, message_id, partition_id, consumer_group, failed_at)
			SELECT 1000, id, partition_id, 'g', now() FROM queen.messages WHERE partition_id = $1`,
		`UPDATE queen.dlq_counts SET n = 7 WHERE partition_id = $1`,
		`UPDATE queen.partitions SET appended = 42 WHERE id = $1`,
		`INSERT INTO queen.message_deletes (partition_id, n) VALUES ($1, 3)`,
	} {
		if _, err := pool.Exec(ctx, stmt, pid); err != nil {
			t.Fatalf("%.40s: %v", stmt, err)
		}
	}
	for _, q := range []string{qid, other} {
		if _, err := pool.Exec(ctx, `INSERT INTO queen.pop_marks (queue_id, groups) VALUES ($1, '{"g": 1}')
			ON CONFLICT (queue_id) DO UPDATE SET groups = '{"g": 1}'`, q); err != nil {
			t.Fatal(err)
		}
	}
	for run := range 2 {
		if err := s.RecountMoved(ctx, pool, qid); err != nil {
			t.Fatal(err)
		}
		var dlq, appended, deletes int64
		var marks, otherMarks string
		err := pool.QueryRow(ctx, `SELECT (SELECT n FROM queen.dlq_counts WHERE partition_id = $1 AND consumer_group = 'g'),
			(SELECT appended FROM queen.partitions WHERE id = $1),
			(SELECT count(*) FROM queen.message_deletes WHERE partition_id = $1),
			(SELECT groups::text FROM queen.pop_marks WHERE queue_id = $2), (SELECT groups::text FROM queen.pop_marks WHERE queue_id = $3)`,
			pid, qid, other).Scan(&dlq, &appended, &deletes, &marks, &otherMarks)
		if err != nil {
			t.Fatal(err)
		}
		if dlq != 1 || appended != 1 || deletes != 0 || marks != "{}" || otherMarks == "{}" {
			t.Fatalf("run %d: dlq count %d, appended %d, deletes rows %d, marks %s, other queue's %s; want 1, 1, 0, {} and kept",
				run, dlq, appended, deletes, marks, otherMarks)
		}
	}
	var next int64
	if err := pool.QueryRow(ctx, `SELECT nextval('queen.dead_letter_queue_id_seq')`).Scan(&next); err != nil || next <= 1000 {
		t.Fatalf("the dead letter sequence gives %d (%v), want past the copied 1000", next, err)
	}
}

// Unfreeze gives a frozen queue back at its epoch; run again, or on a
// queue never frozen, it changes nothing. MoveQueue finds the queue and
// its partitions, and tells a missing one.
func TestUnfreezeAndMoveQueue(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid := fencedPartition(t, ctx, s, "unfreeze")
	mq, found, err := s.MoveQueue(ctx, s.Pool(), tenant, "unfreeze")
	if err != nil || !found || mq.ID != qid || len(mq.Partitions) != 1 || mq.Partitions[0] != pid {
		t.Fatalf("move queue %+v %v %v", mq, found, err)
	}
	if _, found, err := s.MoveQueue(ctx, s.Pool(), tenant, "nosuch"); err != nil || found {
		t.Fatalf("a missing queue: found %v, %v", found, err)
	}
	if r, err := s.Unfreeze(ctx, s.Pool(), tenant, "unfreeze", 1); err != nil || r.Updated != 0 {
		t.Fatalf("unfreeze of a queue never frozen: %+v %v", r, err)
	}
	if _, err := s.Freeze(ctx, s.Pool(), tenant, "unfreeze", 1); err != nil {
		t.Fatal(err)
	}
	wantMoved(t, "frozen", appendAt(ctx, s, s.Pool(), pid, "frozen", []int64{1}), qid)
	for run := range 2 {
		r, err := s.Unfreeze(ctx, s.Pool(), tenant, "unfreeze", 1)
		if err != nil || (run == 0) != (r.Updated > 0) {
			t.Fatalf("unfreeze run %d: %+v %v", run, r, err)
		}
	}
	if err := appendAt(ctx, s, s.Pool(), pid, "thawed", []int64{1}); err != nil {
		t.Fatalf("append at epoch 1 after the unfreeze: %v", err)
	}
}

// What a move away leaves on its source is a tombstone: the queue row,
// frozen, and nothing else. A move back drops it (the copy brings the
// queue row again); a queue that is more than that is never dropped. It
// fails with the tombstone test or the statement's guards loosened.
func TestTombstoneGivesWayOnlyWhenBare(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	_, qid := fencedPartition(t, ctx, s, "tomb")
	exists := func() bool {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.queues WHERE id = $1`, qid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	mq, _, err := s.MoveQueue(ctx, pool, tenant, "tomb")
	if err != nil || mq.Tombstone() || mq.Epoch != 1 {
		t.Fatalf("a live queue: %+v %v", mq, err)
	}
	if err := s.DropTombstone(ctx, pool, qid); err != nil || !exists() {
		t.Fatalf("a live queue was dropped (%v)", err)
	}
	if _, err := s.Freeze(ctx, pool, tenant, "tomb", 1); err != nil {
		t.Fatal(err)
	}
	if mq, _, _ := s.MoveQueue(ctx, pool, tenant, "tomb"); mq.Tombstone() {
		t.Fatalf("a frozen queue with its partition is a tombstone: %+v", mq)
	}
	if err := s.DropTombstone(ctx, pool, qid); err != nil || !exists() {
		t.Fatalf("a frozen queue with its partition was dropped (%v)", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM queen.partitions WHERE queue_id = $1`, qid); err != nil {
		t.Fatal(err)
	}
	if mq, _, err := s.MoveQueue(ctx, pool, tenant, "tomb"); err != nil || !mq.Tombstone() || mq.Epoch != -1 {
		t.Fatalf("after the cleanup: %+v %v, want a tombstone at -1", mq, err)
	}
	if err := s.DropTombstone(ctx, pool, qid); err != nil || exists() {
		t.Fatalf("the tombstone stayed (%v)", err)
	}
}
