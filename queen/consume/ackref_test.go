package consume

// The general ack as it stood before the lease rule moved into
// queen.ack_verdict (migration 019), when Go's applyAck stated the rule a
// second time beside the combined completions' SQL CASE (that one is kept
// in queen/store's ackref_test.go). It is kept here, in the test build
// only, as the reference the property test TestAckMatchesTheOldTwoRules
// holds the state machine (ackstate.go) to.

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/store"
)

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

// refAckTx is ackTx as it stood; dbNow is the store's injected database
// instant (the old code read it from the store).
func refAckTx(ctx context.Context, st *store.Store, dbNow *time.Time, tx pgx.Tx, tenant, group string, items []store.AckItem, strict bool) ([]store.AckResult, error) {
	out := make([]store.AckResult, len(items))
	msgs := make([]*ackMsg, len(items))
	states := map[string]*cursorState{}
	var now time.Time
	pids, txids := make([]string, len(items)), make([]string, len(items))
	for i, it := range items {
		pids[i], txids[i] = it.PartitionID, it.TransactionID
		out[i] = store.AckResult{Index: i, TransactionID: it.TransactionID}
	}
	rows, err := tx.Query(ctx, refAckReadSQL, pids, txids, group, tenant, dbNow)
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
			out[i].Error = store.ErrMsgNotFound
			continue
		case !owned:
			out[i].Error = store.ErrNotOwned
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
	w := store.AckWriteParams{AckCursorsParams: store.AckCursorsParams{Group: group}}
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
		// The same statements, ackCursorsOnlySQL or ackWriteSQL, now
		// run through the driver (which fills Now from the same store).
		if err := st.AckWrite(ctx, tx, w); err != nil {
			return nil, err
		}
	}
	if strict {
		for _, r := range out {
			if !r.Success {
				return nil, store.Rejected("ack_rejected", "ack %s: %s", r.TransactionID, r.Error)
			}
		}
	}
	return out, nil
}

// refApplyAck is the per-item state machine of a general ack: it edits st and
// res, and queues a DLQ row in w.
func refApplyAck(it store.AckItem, m *ackMsg, st *cursorState, now time.Time, strict bool, res *store.AckResult, w *store.AckWriteParams) {
	if st == nil {
		res.Error = store.ErrInvalidLease
		return
	}
	status := store.NormalizeAckStatus(it.Status)
	if st.releasedBy != "" && status != "completed" && (it.LeaseID == "" || it.LeaseID == st.releasedBy) {
		// An earlier item of this request already gave the lease back for
		// a retry; the rest of that batch is redelivered with it.
		res.Success, res.LeaseReleased = true, true
		return
	}
	if m.seq <= st.seq {
		res.Error = store.ErrAlreadyCommitted
		return
	}
	ignore := canary.On("ack-ignores-lease")
	live := st.worker != nil && st.expires != nil && st.expires.After(now)
	if (!live || (it.LeaseID != "" && *st.worker != it.LeaseID)) && !ignore {
		res.Error = store.ErrInvalidLease
		return
	}
	if m.seq > st.leaseMax && !ignore {
		// Never handed out under this lease: completing it would move the
		// cursor past a message nobody has seen.
		res.Error = store.ErrInvalidLease
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
