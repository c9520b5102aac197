package store

// The ack code as it stood before the lease rule moved into
// queen.ack_verdict (migration 019): two statements of one rule, the SQL
// CASE of the combined completions and Go's applyAck. It is kept here, in
// the test build only, as the reference the property test
// TestAckMatchesTheOldTwoRules holds the new code to.

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
)

const refAckCompletedSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[])
		WITH ORDINALITY AS v(pid, txid, lease, grp, tenant, ord)
),
found AS (
	SELECT i.ord, i.pid, i.lease, i.grp, m.id, m.seq, m.created_at, p.name AS pname, q.name AS qname,
		q.tenant_id = i.tenant AS owned
	FROM input i
	JOIN queen.messages m ON m.partition_id = i.pid AND m.transaction_id = i.txid
	JOIN queen.partitions p ON p.id = m.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
),
cur AS (
	SELECT pc.partition_id, pc.consumer_group, pc.last_consumed_seq, pc.worker_id, pc.lease_expires_at, pc.lease_max_seq
	FROM queen.partition_consumers pc
	WHERE (pc.partition_id, pc.consumer_group) IN (SELECT pid, grp FROM found WHERE owned)
		AND (SELECT $8::text IS NULL OR set_config('lock_timeout', $8, true) <> '')
	ORDER BY pc.partition_id, pc.consumer_group
	FOR UPDATE
),
clock AS (SELECT coalesce($6::timestamptz, now()) AS now),
judged AS (
	SELECT f.*, CASE
		WHEN NOT f.owned THEN 'not_owned'
		WHEN c.partition_id IS NULL THEN 'invalid_lease'
		WHEN f.seq <= c.last_consumed_seq THEN 'committed'
		WHEN $7::bool THEN 'ok'
		WHEN c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at <= clock.now THEN 'invalid_lease'
		WHEN f.lease <> '' AND f.lease <> c.worker_id THEN 'invalid_lease'
		WHEN f.seq > c.lease_max_seq THEN 'invalid_lease'
		ELSE 'ok' END AS verdict
	FROM found f LEFT JOIN cur c ON c.partition_id = f.pid AND c.consumer_group = f.grp, clock
),
accepted AS (
	SELECT pid, grp, max(seq) AS seq, count(*) AS n, (array_agg(id ORDER BY seq DESC))[1] AS id,
		(array_agg(created_at ORDER BY seq DESC))[1] AS created_at
	FROM judged WHERE verdict = 'ok' GROUP BY pid, grp
),
moved AS (
	UPDATE queen.partition_consumers pc SET
		last_consumed_seq = a.seq, last_consumed_id = a.id, last_consumed_created_at = a.created_at,
		acked_count = pc.acked_count + a.n,
		lease_expires_at = CASE WHEN a.seq >= pc.lease_max_seq THEN NULL ELSE pc.lease_expires_at END,
		batch_retry_count = CASE WHEN a.seq >= pc.lease_max_seq THEN 0 ELSE pc.batch_retry_count END,
		total_messages_consumed = pc.total_messages_consumed + a.n,
		total_batches_consumed = pc.total_batches_consumed + CASE WHEN a.seq >= pc.lease_max_seq THEN 1 ELSE 0 END,
		last_consumed_at = clock.now
	FROM accepted a, clock
	WHERE pc.partition_id = a.pid AND pc.consumer_group = a.grp
	RETURNING pc.partition_id, pc.consumer_group, a.seq AS top, pc.lease_expires_at IS NULL AS released
)
SELECT i.ord, coalesce(j.verdict, 'not_found'), coalesce(j.qname, ''), coalesce(j.pname, ''),
	coalesce(mv.released AND j.seq = mv.top, false)
FROM input i
LEFT JOIN judged j ON j.ord = i.ord
LEFT JOIN moved mv ON mv.partition_id = j.pid AND mv.consumer_group = j.grp
ORDER BY i.ord`

const refAckReadSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS v(pid, txid, ord)
),
found AS (
	SELECT i.ord, i.pid, m.id, m.seq, m.created_at, p.name AS pname, q.name AS qname, q.retry_limit,
		q.tenant_id = $4::uuid AS owned
	FROM input i
	JOIN queen.messages m ON m.partition_id = i.pid AND m.transaction_id = i.txid
	JOIN queen.partitions p ON p.id = m.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
),
cur AS (
	SELECT pc.partition_id, pc.last_consumed_seq, pc.last_consumed_id::text AS last_id, pc.last_consumed_created_at,
		pc.worker_id, pc.lease_expires_at, pc.acked_count, pc.batch_retry_count, pc.lease_max_seq
	FROM queen.partition_consumers pc
	WHERE pc.consumer_group = $3 AND pc.partition_id IN (SELECT pid FROM found WHERE owned)
	ORDER BY pc.partition_id
	FOR UPDATE
)
SELECT i.ord, f.id IS NOT NULL, coalesce(f.owned, false), f.id::text, f.seq, f.created_at, f.pname, f.qname, f.retry_limit,
	c.partition_id IS NOT NULL, c.last_consumed_seq, c.last_id, c.last_consumed_created_at, c.worker_id,
	c.lease_expires_at, c.acked_count, c.batch_retry_count, c.lease_max_seq, coalesce($5::timestamptz, now())
FROM input i
LEFT JOIN found f ON f.ord = i.ord
LEFT JOIN cur c ON c.partition_id = f.pid
ORDER BY i.ord`

func (s *Store) refAckTx(ctx context.Context, tx pgx.Tx, tenant, group string, items []AckItem, strict bool) ([]AckResult, error) {
	out := make([]AckResult, len(items))
	msgs := make([]*ackMsg, len(items))
	states := map[string]*cursorState{}
	var now time.Time
	pids, txids := make([]string, len(items)), make([]string, len(items))
	for i, it := range items {
		pids[i], txids[i] = it.PartitionID, it.TransactionID
		out[i] = AckResult{Index: i, TransactionID: it.TransactionID}
	}
	rows, err := tx.Query(ctx, refAckReadSQL, pids, txids, group, tenant, s.dbNow())
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var ord int64
		var found, owned, hasCursor bool
		var m struct {
			id, pname, qname *string
			seq              *int64
			created          *time.Time
			limit            *int
		}
		var c struct {
			seq, leaseMax    *int64
			id               *string
			created, expires *time.Time
			worker           *string
			acked, retries   *int
		}
		if err := rows.Scan(&ord, &found, &owned, &m.id, &m.seq, &m.created, &m.pname, &m.qname, &m.limit,
			&hasCursor, &c.seq, &c.id, &c.created, &c.worker, &c.expires, &c.acked, &c.retries, &c.leaseMax, &now); err != nil {
			rows.Close()
			return nil, err
		}
		i := int(ord - 1)
		switch {
		case !found:
			out[i].Error = ErrMsgNotFound
			continue
		case !owned:
			out[i].Error = ErrNotOwned
			continue
		}
		msgs[i] = &ackMsg{id: *m.id, partition: *m.pname, queue: *m.qname, seq: *m.seq, createdAt: *m.created, retryLimit: *m.limit}
		out[i].QueueName, out[i].PartitionName = *m.qname, *m.pname
		if _, ok := states[items[i].PartitionID]; ok || !hasCursor {
			if !hasCursor {
				states[items[i].PartitionID] = nil
			}
			continue
		}
		states[items[i].PartitionID] = &cursorState{seq: *c.seq, id: *c.id, createdAt: c.created, worker: c.worker,
			expires: c.expires, acked: *c.acked, retries: *c.retries, leaseMax: *c.leaseMax}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	order := make([]int, 0, len(items))
	for i := range items {
		if msgs[i] != nil {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		ia, ib := order[a], order[b]
		if items[ia].PartitionID != items[ib].PartitionID {
			return items[ia].PartitionID < items[ib].PartitionID
		}
		return msgs[ia].seq < msgs[ib].seq
	})
	w := ackWriteParams{ackCursorsParams: ackCursorsParams{Group: group, Now: s.dbNow()}}
	for _, i := range order {
		refApplyAck(items[i], msgs[i], states[items[i].PartitionID], now, strict, &out[i], &w)
	}
	for pid, st := range states {
		if st == nil || !st.dirty {
			continue
		}
		w.PartitionIDs = append(w.PartitionIDs, pid)
		w.Seqs = append(w.Seqs, st.seq)
		w.IDs = append(w.IDs, st.id)
		w.CreatedAts = append(w.CreatedAts, st.createdAt)
		w.Workers = append(w.Workers, st.worker)
		w.Expires = append(w.Expires, st.expires)
		w.Acked = append(w.Acked, st.acked)
		w.Retries = append(w.Retries, st.retries)
		w.Completed = append(w.Completed, st.completed)
		w.Batches = append(w.Batches, st.batches)
	}
	if len(w.PartitionIDs) > 0 || len(w.DLQMessageIDs) > 0 {
		args := []any{w.PartitionIDs, w.Seqs, w.IDs, w.CreatedAts, w.Workers, w.Expires,
			w.Acked, w.Retries, w.Completed, w.Batches, w.Group, w.Now}
		sql := ackCursorsOnlySQL
		if len(w.DLQMessageIDs) > 0 {
			sql = ackWriteSQL
			args = append(args, w.DLQMessageIDs, w.DLQPartitionIDs, w.DLQMessages, w.DLQRetries, w.DLQCreatedAts)
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return nil, err
		}
	}
	if strict {
		for _, r := range out {
			if !r.Success {
				return nil, rejected("ack_rejected", "ack %s: %s", r.TransactionID, r.Error)
			}
		}
	}
	return out, nil
}

// refApplyAck is the per-item state machine of a general ack: it edits st and
// res, and queues a DLQ row in w.
func refApplyAck(it AckItem, m *ackMsg, st *cursorState, now time.Time, strict bool, res *AckResult, w *ackWriteParams) {
	if st == nil {
		res.Error = ErrInvalidLease
		return
	}
	status := NormalizeAckStatus(it.Status)
	if st.releasedBy != "" && status != "completed" && (it.LeaseID == "" || it.LeaseID == st.releasedBy) {
		// An earlier item of this request already gave the lease back for
		// a retry; the rest of that batch is redelivered with it.
		res.Success, res.LeaseReleased = true, true
		return
	}
	if m.seq <= st.seq {
		res.Error = ErrAlreadyCommitted
		return
	}
	ignore := canary.On("ack-ignores-lease")
	live := st.worker != nil && st.expires != nil && st.expires.After(now)
	if (!live || (it.LeaseID != "" && *st.worker != it.LeaseID)) && !ignore {
		res.Error = ErrInvalidLease
		return
	}
	if m.seq > st.leaseMax && !ignore {
		// Never handed out under this lease: completing it would move the
		// cursor past a message nobody has seen.
		res.Error = ErrInvalidLease
		return
	}
	toDLQ := status == "dlq" || (status == "failed" && (strict || st.retries >= m.retryLimit))
	switch {
	case status == "completed" || toDLQ || (status == "failed" && canary.On("failed-ack-completes")):
		if toDLQ {
			msg := it.Error
			if msg == "" {
				msg = "Retries exhausted"
				if status == "dlq" {
					msg = "Moved to DLQ"
				}
			}
			w.DLQMessageIDs = append(w.DLQMessageIDs, m.id)
			w.DLQPartitionIDs = append(w.DLQPartitionIDs, it.PartitionID)
			w.DLQMessages = append(w.DLQMessages, msg)
			w.DLQRetries = append(w.DLQRetries, st.retries)
			w.DLQCreatedAts = append(w.DLQCreatedAts, m.createdAt)
			res.DLQ = true
		}
		st.seq, st.id, st.createdAt = m.seq, m.id, &m.createdAt
		st.acked++
		st.completed++
		if st.seq >= st.leaseMax {
			st.worker, st.expires = nil, nil
			st.retries = 0
			st.batches++
			res.LeaseReleased = true
		}
	case status == "failed":
		st.retries++
		st.releasedBy = deref(st.worker)
		st.worker, st.expires = nil, nil
		res.LeaseReleased = true
	case status == "retry":
		st.releasedBy = deref(st.worker)
		st.worker, st.expires = nil, nil
		res.LeaseReleased = true
	}
	st.dirty = true
	res.Success = true
}
