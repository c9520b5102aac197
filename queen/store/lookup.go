package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Read-only look-ups for the dashboard's search. None of these statements
// is on the push, pop or ack path.

// findByTransactionSQL finds the messages whose transactionId is @txn in
// the tenant's queues (one queue when @queue is set). Each partition is
// probed through its (partition_id, transaction_id) unique index: the
// LIMIT 1 inside the lateral keeps the planner from flattening it into a
// join that scans every message for the transactionId. The cost is one
// index probe per partition of the tenant (of the queue), and the answer
// holds at most @limit messages (a transactionId is unique per partition
// only, so one may be in several partitions or queues).
const findByTransactionSQL = `
WITH hits AS MATERIALIZED (
	SELECT hit.id FROM queen.queues q
	JOIN queen.partitions p ON p.queue_id = q.id
	CROSS JOIN LATERAL (SELECT m.id FROM queen.messages m
		WHERE m.partition_id = p.id AND m.transaction_id = @txn LIMIT 1) hit
	WHERE q.tenant_id = @tenant AND (@queue = '' OR q.name = @queue)
	LIMIT @limit)
SELECT * FROM (` + messageStatusSQL + `
	WHERE m.id IN (SELECT id FROM hits)
) s
ORDER BY created_at DESC, id DESC`

// FindByTransaction lists, newest first, at most limit messages of the
// tenant whose transactionId is txid, in queue when it is not empty.
func (s *Store) FindByTransaction(ctx context.Context, tenant, queue, txid string, limit int) ([]MessageRow, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, findByTransactionSQL, pgx.NamedArgs{"tenant": tenant, "queue": queue, "txn": txid,
		"limit": limit, "now": s.dbNow()})
	if err != nil {
		return nil, fmt.Errorf("find transactionId: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MessageRow, error) { return scanMessageRow(r) })
	if err != nil {
		return nil, fmt.Errorf("find transactionId: %w", err)
	}
	return out, nil
}
