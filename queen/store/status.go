package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Live figures for the status routes: computed from the rows when asked,
// never from a snapshot.

// LeaseStats are the tenant's live leases.
type LeaseStats struct {
	Active, Partitions, BatchSize, Acked int64
}

// Leases counts the tenant's live leases.
func (s *Store) Leases(ctx context.Context, tenant string) (LeaseStats, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var l LeaseStats
	err := s.pool.QueryRow(ctx, `
		SELECT count(DISTINCT pc.worker_id), count(DISTINCT pc.partition_id), coalesce(sum(pc.batch_size), 0), coalesce(sum(pc.acked_count), 0)
		FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.tenant_id = $1 AND pc.lease_expires_at > coalesce($2::timestamptz, now())`, tenant, s.dbNow()).
		Scan(&l.Active, &l.Partitions, &l.BatchSize, &l.Acked)
	return l, err
}

// DLQStats summarise the tenant's dead-letter queue.
type DLQStats struct {
	Total, Partitions int64
	TopErrors         []ErrorCount
}

// ErrorCount is one error message and how many dead letters carry it.
type ErrorCount struct {
	Error string
	Count int64
}

// DeadLetters summarises the tenant's DLQ: totals from the counters of
// queen.dlq_counts, and the five most common errors among its newest
// topErrorsWindow dead letters (counting every one scanned a million rows
// per status request).
func (s *Store) DeadLetters(ctx context.Context, tenant string) (DLQStats, error) {
	var d DLQStats
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, _ time.Time) error {
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(c.n), 0)::bigint, count(DISTINCT c.partition_id) FILTER (WHERE c.n > 0)
			FROM queen.dlq_counts c JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1`, tenant).Scan(&d.Total, &d.Partitions); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT e, count(*) FROM (
				SELECT coalesce(d.error_message, '') AS e FROM queen.dead_letter_queue d
				JOIN queen.partitions p ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id
				WHERE q.tenant_id = $1 ORDER BY d.failed_at DESC LIMIT $2) newest
			GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5`, tenant, topErrorsWindow)
		if err != nil {
			return err
		}
		d.TopErrors, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ErrorCount, error) {
			var e ErrorCount
			err := r.Scan(&e.Error, &e.Count)
			return e, err
		})
		return err
	})
	return d, err
}

// topErrorsWindow is how many of the newest dead letters the top errors
// are counted over.
const topErrorsWindow = 1000

// MessagesPerBucket counts the tenant's stored messages created in each
// bucket of width step within [from, to), optionally for one queue,
// namespace or task. Buckets with none are left out (the caller fills
// zeros). It reads every message of the window.
func (s *Store) MessagesPerBucket(ctx context.Context, tenant, queue, namespace, task string, from, to time.Time, step time.Duration) (map[time.Time]int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT to_timestamp(floor(extract(epoch FROM m.created_at) / $7) * $7), count(*)
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND ($2 = '' OR q.name = $2) AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)
			AND m.created_at >= $5 AND m.created_at < $6
		GROUP BY 1`, tenant, queue, namespace, task, from, to, step.Seconds())
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
