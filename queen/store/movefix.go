package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A move's statements on its shards (queen/mover): reading the queue it
// moves, giving back a frozen queue when the move fails, and setting on
// the destination what logical replication does not carry.

// moveQueueSQL reads a queue's id and its partitions' ids (sorted), the
// rows a move's publication filters on; no row: no such queue here.
const moveQueueSQL = `
SELECT q.id::text, q.epoch, coalesce(array_agg(p.id::text ORDER BY p.id) FILTER (WHERE p.id IS NOT NULL), '{}')
FROM queen.queues q LEFT JOIN queen.partitions p ON p.queue_id = q.id
WHERE q.tenant_id = $1::uuid AND q.name = $2
GROUP BY q.id`

// moveQueueParams are moveQueueSQL's arguments.
type moveQueueParams struct {
	Tenant, Name string
}

// MoveQueue is what MoveQueue reads of a queue on one shard.
type MoveQueue struct {
	ID         string
	Epoch      int64 // -E: frozen, or the tombstone a move away left
	Partitions []string
}

// Tombstone reports whether the shard holds only what a move away left of
// the queue: its queue row, frozen, and nothing else.
func (mq MoveQueue) Tombstone() bool { return mq.Epoch < 0 && len(mq.Partitions) == 0 }

// MoveQueue reads the queue (tenant, name) on this shard; found is false
// when the shard does not hold it.
func (s *Store) MoveQueue(ctx context.Context, q Executor, tenant, name string) (mq MoveQueue, found bool, err error) {
	err = q.QueryRow(ctx, text("move.queue"), argsOf(moveQueueParams{tenant, name})...).Scan(&mq.ID, &mq.Epoch, &mq.Partitions)
	if errors.Is(err, pgx.ErrNoRows) {
		return MoveQueue{}, false, nil
	}
	if err != nil {
		return MoveQueue{}, false, fmt.Errorf("move: read queue %s: %w", name, err)
	}
	return mq, true, nil
}

// dropTombstoneSQL deletes the queue row $1 if it is a tombstone: frozen,
// with no partition.
const dropTombstoneSQL = `
DELETE FROM queen.queues q WHERE q.id = $1::uuid AND q.epoch < 0
	AND NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.queue_id = q.id)`

// dropTombstoneParams are dropTombstoneSQL's arguments.
type dropTombstoneParams struct {
	QueueID string
}

// DropTombstone deletes the tombstone a move away left of the queue id on
// this shard (MoveQueue.Tombstone), so that a move back can copy the
// queue in; a queue that is more than a tombstone is left alone.
func (s *Store) DropTombstone(ctx context.Context, q Executor, id string) error {
	if _, err := q.Exec(ctx, text("move.drop_tombstone"), argsOf(dropTombstoneParams{id})...); err != nil {
		return fmt.Errorf("move: drop the tombstone of queue %s: %w", id, err)
	}
	return nil
}

// Unfreeze gives a queue frozen for a move that failed back to epoch on
// this shard, its source: every fenced row goes from -epoch to epoch. Run
// again, or on a queue never frozen, it changes nothing.
func (s *Store) Unfreeze(ctx context.Context, q TxStarter, tenant, name string, epoch int64) (FenceResult, error) {
	if epoch <= 0 {
		return FenceResult{}, fmt.Errorf("unfreeze %s: epoch %d is not positive", name, epoch)
	}
	return fence(ctx, q, "unfreeze", tenant, name, -epoch, epoch)
}

// moveSequencesSQL raises the shard's id sequences of the per-queue tables
// past every id the copy brought: logical replication carries rows, not
// sequences, and a dead letter or a retention record numbered here later
// would collide with a copied one. It never lowers one.
const moveSequencesSQL = `
SELECT setval(pg_get_serial_sequence('queen.dead_letter_queue', 'id'),
	greatest((SELECT max(id) FROM queen.dead_letter_queue), (SELECT last_value FROM queen.dead_letter_queue_id_seq), 1)),
	setval(pg_get_serial_sequence('queen.retention_history', 'id'),
	greatest((SELECT max(id) FROM queen.retention_history), (SELECT last_value FROM queen.retention_history_id_seq), 1))
WHERE $1::uuid IS NOT NULL`

// moveDLQCountsSQL recounts the queue's dead letters per (partition,
// group), a count for every key either table has: the triggers that keep
// dlq_counts do not fire on a subscriber's apply. One upsert (not a delete
// and an insert: one statement's parts do not see each other's rows).
const moveDLQCountsSQL = `
WITH parts AS (SELECT id FROM queen.partitions WHERE queue_id = $1::uuid),
keys AS (
	SELECT partition_id, consumer_group FROM queen.dead_letter_queue WHERE partition_id IN (SELECT id FROM parts)
	UNION
	SELECT partition_id, consumer_group FROM queen.dlq_counts WHERE partition_id IN (SELECT id FROM parts)
)
INSERT INTO queen.dlq_counts AS c (partition_id, consumer_group, n)
SELECT k.partition_id, k.consumer_group,
	(SELECT count(*) FROM queen.dead_letter_queue d WHERE d.partition_id = k.partition_id AND d.consumer_group = k.consumer_group)
FROM keys k ORDER BY 1, 2
ON CONFLICT (partition_id, consumer_group) DO UPDATE SET n = EXCLUDED.n`

// moveStoredSQL recounts the queue's stored messages as
// queen.recount_stored does for a whole shard (migration 014): each
// partition's appended is its message count, and its deletions counter
// goes. The delete trigger that keeps them does not fire on an apply.
const moveStoredSQL = `
WITH gone AS (
	DELETE FROM queen.message_deletes d USING queen.partitions p WHERE p.id = d.partition_id AND p.queue_id = $1::uuid
)
UPDATE queen.partitions p SET appended = (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id)
WHERE p.queue_id = $1::uuid`

// movePopMarksSQL forgets the queue's pop marks (a group's note that the
// queue had nothing to pop): they were the source's, kept by triggers
// the apply does not fire, and a stale one would hide messages; an empty
// mark costs one pop that scans.
const movePopMarksSQL = `UPDATE queen.pop_marks SET groups = '{}' WHERE queue_id = $1::uuid AND groups <> '{}'`

// moveFixParams are the recount statements' arguments: the queue's id.
type moveFixParams struct {
	QueueID string
}

// RecountMoved sets on this shard, the destination of a move, what the
// copy of queue queueID did not: the id sequences, and the trigger-kept
// counters and marks of the queue. Run it in the activation's transaction,
// before the queue is writable here; run again, it sets the same values.
func (s *Store) RecountMoved(ctx context.Context, q Executor, queueID string) error {
	for _, name := range []string{"move.sequences", "move.dlq_counts", "move.stored", "move.pop_marks"} {
		if _, err := q.Exec(ctx, text(name), argsOf(moveFixParams{queueID})...); err != nil {
			return fmt.Errorf("move: %s of queue %s: %w", name, queueID, err)
		}
	}
	return nil
}
