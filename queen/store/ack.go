package store

import (
	"context"
	"errors"
	"github.com/queen-go/queen/queen/canary"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AckItem is one acknowledgement.
type AckItem struct {
	TransactionID string
	PartitionID   string
	Status        string // completed (default), failed, retry, dlq
	LeaseID       string // "" skips the token check (the lease must still be live)
	Error         string
}

// AckResult is the outcome of one acknowledgement.
type AckResult struct {
	Index         int
	TransactionID string
	Success       bool
	Error         string
	QueueName     string
	PartitionName string
	LeaseReleased bool
	DLQ           bool
}

// Ack errors reported per item.
const (
	ErrMsgNotFound      = "Message not found"
	ErrInvalidLease     = "Invalid or expired lease"
	ErrAlreadyCommitted = "already committed: the group's cursor is past this message"
	ErrNotOwned         = "partition not owned by tenant"
)

// NormalizeAckStatus maps Queen's status spellings to completed, failed,
// retry or dlq.
func NormalizeAckStatus(s string) string {
	switch strings.ToLower(s) {
	case "", "completed", "success", "acked", "ok":
		return "completed"
	case "retry":
		return "retry"
	case "dlq":
		return "dlq"
	}
	return "failed"
}

// Ack applies acknowledgements for one consumer group in one transaction.
// Per-item failures are results, not errors.
func (s *Store) Ack(ctx context.Context, tenant, group string, items []AckItem) ([]AckResult, error) {
	var out []AckResult
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		var err error
		out, err = ackTx(ctx, tx, now, tenant, group, items, false)
		return err
	})
	return out, err
}

type ackMsg struct {
	id, partition, queue, tenant string
	seq                          int64
	createdAt                    time.Time
	retryLimit                   int
}

// cursorState is a locked partition_consumers row being edited in Go; it is
// written back once per partition.
type cursorState struct {
	seq                int64
	id                 string
	createdAt          *time.Time
	worker             *string
	expires            *time.Time
	batchSize, acked   int
	leaseMax           int64
	retries            int
	releasedBy         string // the lease this request gave back, if any
	completed, batches int
	dirty              bool
}

// ackTx applies acks inside tx. Items are applied in (partition, seq) order
// so that a batch ack walks the cursor forward.
//
// Invariant (lease compare-and-set): the partition_consumers row is locked
// FOR UPDATE, and an ack applies only while its lease is live in database
// time and, when a leaseId is given, held by that leaseId. A consumer whose
// lease expired cannot complete a message that was handed to someone else.
//
// strict (transactions): a failed or dlq ack goes straight to the DLQ, and
// any per-item failure aborts the transaction.
func ackTx(ctx context.Context, tx pgx.Tx, now time.Time, tenant, group string, items []AckItem, strict bool) ([]AckResult, error) {
	if group == "" {
		group = QueueModeGroup
	}
	out := make([]AckResult, len(items))
	msgs := make([]*ackMsg, len(items))
	for i, it := range items {
		out[i] = AckResult{Index: i, TransactionID: it.TransactionID}
		var m ackMsg
		err := tx.QueryRow(ctx, `
			SELECT m.id::text, m.seq, m.created_at, p.name, q.name, q.retry_limit, q.tenant_id::text
			FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE m.partition_id = $1::uuid AND m.transaction_id = $2`, it.PartitionID, it.TransactionID).
			Scan(&m.id, &m.seq, &m.createdAt, &m.partition, &m.queue, &m.retryLimit, &m.tenant)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			out[i].Error = ErrMsgNotFound
		case err != nil:
			return nil, err
		case m.tenant != tenant:
			out[i].Error = ErrNotOwned
		default:
			msgs[i] = &m
			out[i].QueueName, out[i].PartitionName = m.queue, m.partition
		}
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
	states := map[string]*cursorState{}
	var pidOrder []string
	for _, i := range order {
		it, m := items[i], msgs[i]
		st, ok := states[it.PartitionID]
		if !ok {
			st = &cursorState{}
			err := tx.QueryRow(ctx, `
				SELECT last_consumed_seq, last_consumed_id::text, last_consumed_created_at, worker_id,
					lease_expires_at, batch_size, acked_count, batch_retry_count, lease_max_seq
				FROM queen.partition_consumers WHERE partition_id = $1 AND consumer_group = $2
				FOR UPDATE`, it.PartitionID, group).
				Scan(&st.seq, &st.id, &st.createdAt, &st.worker, &st.expires, &st.batchSize, &st.acked, &st.retries, &st.leaseMax)
			if errors.Is(err, pgx.ErrNoRows) {
				st = nil
			} else if err != nil {
				return nil, err
			}
			states[it.PartitionID] = st
			pidOrder = append(pidOrder, it.PartitionID)
		}
		if st == nil {
			out[i].Error = ErrInvalidLease
			continue
		}
		status := NormalizeAckStatus(it.Status)
		if st.releasedBy != "" && status != "completed" && (it.LeaseID == "" || it.LeaseID == st.releasedBy) {
			// An earlier item of this request already gave the lease back
			// for a retry; the rest of that batch is redelivered with it.
			out[i].Success, out[i].LeaseReleased = true, true
			continue
		}
		if m.seq <= st.seq {
			out[i].Error = ErrAlreadyCommitted
			continue
		}
		live := st.worker != nil && st.expires != nil && st.expires.After(now)
		if (!live || (it.LeaseID != "" && *st.worker != it.LeaseID)) && !canary.On("ack-ignores-lease") {
			out[i].Error = ErrInvalidLease
			continue
		}
		if m.seq > st.leaseMax && !canary.On("ack-ignores-lease") {
			// Never handed out under this lease: completing it would move
			// the cursor past a message nobody has seen.
			out[i].Error = ErrInvalidLease
			continue
		}
		toDLQ := status == "dlq" || (status == "failed" && (strict || st.retries >= m.retryLimit))
		switch {
		case status == "completed" || toDLQ:
			if toDLQ {
				msg := it.Error
				if msg == "" {
					msg = "Retries exhausted"
					if status == "dlq" {
						msg = "Moved to DLQ"
					}
				}
				if _, err := tx.Exec(ctx, `
					INSERT INTO queen.dead_letter_queue
						(message_id, partition_id, consumer_group, error_message, retry_count, original_created_at, failed_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7)
					ON CONFLICT (message_id, consumer_group) DO NOTHING`,
					m.id, it.PartitionID, group, msg, st.retries, m.createdAt, now); err != nil {
					return nil, err
				}
				out[i].DLQ = true
			}
			st.seq, st.id, st.createdAt = m.seq, m.id, &m.createdAt
			st.acked++
			st.completed++
			if st.seq >= st.leaseMax {
				st.worker, st.expires = nil, nil
				st.retries = 0
				st.batches++
				out[i].LeaseReleased = true
			}
		case status == "failed":
			st.retries++
			st.releasedBy = deref(st.worker)
			st.worker, st.expires = nil, nil
			out[i].LeaseReleased = true
		case status == "retry":
			st.releasedBy = deref(st.worker)
			st.worker, st.expires = nil, nil
			out[i].LeaseReleased = true
		}
		st.dirty = true
		out[i].Success = true
	}
	for _, pid := range pidOrder {
		st := states[pid]
		if st == nil || !st.dirty {
			continue
		}
		if _, err := tx.Exec(ctx, `
			UPDATE queen.partition_consumers SET
				last_consumed_seq = $3, last_consumed_id = $4::uuid, last_consumed_created_at = $5,
				worker_id = $6, lease_expires_at = $7,
				lease_acquired_at = CASE WHEN $6::text IS NULL THEN NULL ELSE lease_acquired_at END,
				acked_count = $8, batch_retry_count = $9,
				total_messages_consumed = total_messages_consumed + $10,
				total_batches_consumed = total_batches_consumed + $11,
				last_consumed_at = CASE WHEN $10 > 0 THEN $12 ELSE last_consumed_at END
			WHERE partition_id = $1 AND consumer_group = $2`,
			pid, group, st.seq, st.id, st.createdAt, st.worker, st.expires, st.acked, st.retries,
			st.completed, st.batches, now); err != nil {
			return nil, err
		}
	}
	if strict {
		for _, r := range out {
			if !r.Success {
				return nil, rollback("ack %s: %s", r.TransactionID, r.Error)
			}
		}
	}
	return out, nil
}

// ExtendLease pushes out every live lease held by leaseID to at least
// now+seconds. It returns how many partition leases it renewed and the new
// expiry. An expired lease is not revived: its messages may already be
// someone else's.
func (s *Store) ExtendLease(ctx context.Context, tenant, leaseID string, seconds int) (int64, *time.Time, error) {
	var n int64
	var exp *time.Time
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		rows, err := tx.Query(ctx, `
			UPDATE queen.partition_consumers pc
			SET lease_expires_at = GREATEST(pc.lease_expires_at, $3::timestamptz + make_interval(secs => $4::int))
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE pc.partition_id = p.id AND q.tenant_id = $1
				AND pc.worker_id = $2 AND pc.lease_expires_at > $3::timestamptz
			RETURNING pc.lease_expires_at`, tenant, leaseID, now, seconds)
		if err != nil {
			return err
		}
		for rows.Next() {
			var t time.Time
			if err := rows.Scan(&t); err != nil {
				return err
			}
			n++
			if exp == nil || t.After(*exp) {
				exp = &t
			}
		}
		return rows.Err()
	})
	return n, exp, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
