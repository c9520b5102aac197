package store

import (
	"context"
	"time"
)

// Pop marks (migration 012): after a wildcard pop of a group found nothing,
// the group is marked fully consumed on its queue, and until a push, a
// rewound cursor or a new cursor row clears the mark (triggers), or the
// mark grows older than popMarkFresh, every pop of the group skips the
// candidate scan that walks all its cursor rows.

// popMarkFresh bounds a mark's life: the triggers clear every mark that a
// write makes wrong, and this makes any mark they missed cost at most this
// much latency, the price of one full candidate scan per group and queue
// this often when nothing moves.
const popMarkFresh = "10 seconds"

// PopMarkParams are popMarkSetSQL's arguments, $1 to $3 (popMarkCheckSQL
// takes the first two).
type PopMarkParams struct {
	QueueID string
	Group   string
	Now     *time.Time
}

// popMarkSetSQL sets the group's mark unless a fresh one stands or a
// writer of the queue is in flight (the try of the advisory lock the
// triggers share), and answers whether it set it.
const popMarkSetSQL = `
WITH fresh AS (
	SELECT 1 FROM queen.pop_marks WHERE queue_id = $1
		AND (groups ->> $2)::timestamptz > coalesce($3::timestamptz, now()) - interval '` + popMarkFresh + `'
),
quiet AS (
	SELECT pg_try_advisory_xact_lock(1903520, hashtext($1::text)) AS got
	WHERE NOT EXISTS (SELECT 1 FROM fresh)
)
INSERT INTO queen.pop_marks AS m (queue_id, groups)
SELECT $1, jsonb_build_object($2::text, coalesce($3::timestamptz, now())) FROM quiet WHERE got
ON CONFLICT (queue_id) DO UPDATE SET groups = m.groups || EXCLUDED.groups
RETURNING 1`

// popMarkCheckSQL removes a mark just set if any cursor row of the group
// is behind its partition. It runs as its own statement, after the set
// committed: its snapshot sees every writer that committed before the set;
// every other one ran its trigger after the set and cleared the mark.
const popMarkCheckSQL = `
UPDATE queen.pop_marks SET groups = groups - $2::text
WHERE queue_id = $1 AND groups ? $2::text AND EXISTS (
	SELECT 1 FROM queen.partition_consumers pc
	JOIN queen.partitions p ON p.id = pc.partition_id
	WHERE pc.queue_id = $1 AND pc.consumer_group = $2 AND p.last_seq > pc.last_consumed_seq)`

// MarkPopEmpty marks the group fully consumed on the queue, after a
// wildcard pop claimed nothing: one cheap statement while a fresh mark
// stands, else the set and the check (which walks the cursor rows once).
// How often to try is the caller's (queen/consume spaces the tries).
func (s *Store) MarkPopEmpty(ctx context.Context, p PopMarkParams) error {
	// The check must follow a set even when the client has gone: a set
	// left unchecked could hide a message until the mark grows stale.
	ctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	tag, err := s.pool.Exec(ctx, text("popMark.set"), argsOf(p)...)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	_, err = s.pool.Exec(ctx, popMarkCheckSQL, p.QueueID, p.Group)
	return err
}
