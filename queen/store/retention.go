package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetentionLock is the advisory lock id of the retention leader.
const RetentionLock = 737001

// RetentionResult counts what one pass deleted.
type RetentionResult struct {
	Expired, Completed, Evicted int64
}

// TryLeader takes the session advisory lock id on a dedicated connection.
// It returns ok=false when another broker holds it; release must be called
// when ok.
func (s *Store) TryLeader(ctx context.Context, id int64) (release func(), ok bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, false, err
	}
	return func() {
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, id); err != nil {
			// A connection that may still hold the lock must not go back
			// to the pool; closing it releases the lock server-side.
			_ = conn.Conn().Close(context.Background())
		}
		conn.Release()
	}, true, nil
}

// RetentionPass deletes, in batches of at most batch rows per rule:
// messages older than retentionSeconds (retentionEnabled queues); consumed
// messages older than completedRetentionSeconds (at or below every group's
// cursor; a partition nobody consumes keeps its messages); and messages
// older than maxWaitTimeSeconds (eviction). It is idempotent, so a brief
// double leader does no harm.
func (s *Store) RetentionPass(ctx context.Context, batch int) (RetentionResult, error) {
	var r RetentionResult
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		for _, rule := range []struct {
			count *int64
			where string
		}{
			{&r.Expired, `q.retention_enabled AND q.retention_seconds > 0
				AND m.created_at < $1::timestamptz - make_interval(secs => q.retention_seconds)`},
			// A group still at the sentinel (0) holds back every message.
			{&r.Completed, `q.retention_enabled AND q.completed_retention_seconds > 0
				AND m.created_at < $1::timestamptz - make_interval(secs => q.completed_retention_seconds)
				AND m.seq <= (SELECT min(pc.last_consumed_seq) FROM queen.partition_consumers pc
					WHERE pc.partition_id = p.id)`},
			{&r.Evicted, `q.max_wait_time_seconds > 0
				AND m.created_at < $1::timestamptz - make_interval(secs => q.max_wait_time_seconds)`},
		} {
			tag, err := tx.Exec(ctx, `
				DELETE FROM queen.messages WHERE id IN (
					SELECT m.id FROM queen.messages m
					JOIN queen.partitions p ON p.id = m.partition_id
					JOIN queen.queues q ON q.id = p.queue_id
					WHERE `+rule.where+`
					LIMIT $2)`, now, batch)
			if err != nil {
				return err
			}
			*rule.count = tag.RowsAffected()
		}
		return nil
	})
	return r, err
}
