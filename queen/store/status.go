package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseStats are live leases: distinct lease tokens, the partitions they
// hold, their batch sizes and what was acked of them.
type LeaseStats struct {
	Active, Partitions, BatchSize, Acked int64
}

// DLQStats summarise a tenant's dead-letter queue.
type DLQStats struct {
	Total, Partitions int64
}

// ErrorCount is one error message and how many dead letters carry it.
type ErrorCount struct {
	Error string
	Count int64
}

// topDeadLetterErrorsSQL counts the five commonest errors of tenant $1's
// newest $2 dead letters.
const topDeadLetterErrorsSQL = `SELECT e, count(*) FROM (
			SELECT coalesce(d.error_message, '') AS e FROM queen.dead_letter_queue d
			JOIN queen.partitions p ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant_id = $1 ORDER BY d.failed_at DESC LIMIT $2) newest
		GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5`

// TopDeadLetterErrors are the five most common errors among the tenant's
// newest topErrorsWindow dead letters, read along dead_letter_queue's
// failed_at index (counting every one scanned a million rows per status
// request).
func (s *Store) TopDeadLetterErrors(ctx context.Context, tenant string) ([]ErrorCount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, topDeadLetterErrorsSQL, tenant, topErrorsWindow)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ErrorCount, error) {
		var e ErrorCount
		err := r.Scan(&e.Error, &e.Count)
		return e, err
	})
}

// topErrorsWindow is how many of the newest dead letters the top errors
// are counted over.
const topErrorsWindow = 1000

// messagesPerBucketSQL counts tenant $1's messages created in [$5, $6) per
// $7-second bucket.
const messagesPerBucketSQL = `
		SELECT to_timestamp(floor(extract(epoch FROM m.created_at) / $7) * $7), count(*)
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND ($2 = '' OR q.name = $2) AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)
			AND m.created_at >= $5 AND m.created_at < $6
		GROUP BY 1`

// MessagesPerBucket counts the tenant's stored messages created in each
// bucket of width step within [from, to), optionally for one queue,
// namespace or task. Buckets with none are left out (the caller fills
// zeros). It reads every message of the window.
func (s *Store) MessagesPerBucket(ctx context.Context, tenant, queue, namespace, task string, from, to time.Time, step time.Duration) (map[time.Time]int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, messagesPerBucketSQL, tenant, queue, namespace, task, from, to, step.Seconds())
	if err != nil {
		return nil, err
	}
	out := map[time.Time]int64{}
	for rows.Next() {
		var at time.Time
		var n int64
		if err := rows.Scan(&at, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[at.UTC()] = n
	}
	return out, rows.Err()
}
