package store

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/queen-go/queen/queen/canary"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueModeGroup is the consumer group of plain queue-mode consumers: one
// shared cursor, competing consumers.
const QueueModeGroup = "__QUEUE_MODE__"

// PopRequest is one pop call.
type PopRequest struct {
	Tenant    string
	Queue     string
	Partition string // "" pops any partition
	Group     string // "" means QueueModeGroup
	Batch     int    // max messages in total
	// Partitions is the max partitions claimed by one wildcard pop.
	Partitions int
	AutoAck    bool
	// SubscriptionMode (all or new) and SubscriptionFrom apply only when a
	// named group first touches the queue.
	SubscriptionMode string
	SubscriptionFrom *time.Time
	// LeaseSeconds overrides the queue's leaseTime when > 0.
	LeaseSeconds int
}

// Message is a delivered message.
type Message struct {
	ID            string
	TransactionID string
	TraceID       *string
	Data          json.RawMessage
	ProducerSub   *string
	CreatedAt     time.Time
	Seq           int64
	PartitionID   string
	Partition     string
	Queue         string
	LeaseID       string
	ConsumerGroup string
	RetryCount    int
}

// PopResult is what a pop claimed. An empty Messages means nothing was
// claimed and no lease is held.
type PopResult struct {
	Queue              string
	Partition          string
	PartitionID        string
	LeaseID            string
	Group              string
	Messages           []Message
	PartitionsClaimed  int
	WindowBufferActive bool
	LeaseExpiresAt     time.Time
}

type claimed struct {
	pid, name  string
	cursor     int64
	retryCount int
}

// Pop claims up to req.Partitions partitions for the group and returns up
// to req.Batch messages after the group's cursor, in seq order.
//
// Invariant (exclusive lease): a partition_consumers row is claimed only if
// its lease is absent or expired in database time, under FOR UPDATE SKIP
// LOCKED, so two pops of one group never hold the same partition at once.
// Invariant (nothing skipped): delivery stops at the first message still
// inside delayedProcessing, so a cursor never jumps over a younger message.
func (s *Store) Pop(ctx context.Context, req PopRequest) (PopResult, error) {
	if req.Group == "" {
		req.Group = QueueModeGroup
	}
	if req.Batch < 1 {
		req.Batch = 1
	}
	if req.Partitions < 1 || req.Partition != "" {
		req.Partitions = 1
	}
	res := PopResult{Queue: req.Queue, Group: req.Group}
	if err := ctx.Err(); err != nil {
		// The client is gone: claim nothing.
		return res, err
	}
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		q, err := getQueue(ctx, tx, req.Tenant, req.Queue, false)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		subStart, err := subscriptionStart(ctx, tx, now, req)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO queen.partition_consumers (partition_id, consumer_group, last_consumed_seq, created_at)
			SELECT p.id, $2,
				CASE WHEN $3::timestamptz IS NULL THEN 0
				ELSE coalesce((SELECT max(m.seq) FROM queen.messages m
					WHERE m.partition_id = p.id AND m.created_at <= $3::timestamptz), 0) END,
				$5
			FROM queen.partitions p
			WHERE p.queue_id = $1 AND ($4::text = '' OR p.name = $4::text)
				AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers pc
					WHERE pc.partition_id = p.id AND pc.consumer_group = $2)
			ON CONFLICT DO NOTHING`, q.ID, req.Group, subStart, req.Partition, now); err != nil {
			return err
		}
		if req.Partition != "" && q.Options.WindowBuffer > 0 {
			var active bool
			err := tx.QueryRow(ctx, `SELECT coalesce(last_message_at > $3::timestamptz - make_interval(secs => $4::int), false)
				FROM queen.partitions WHERE queue_id = $1 AND name = $2`,
				q.ID, req.Partition, now, q.Options.WindowBuffer).Scan(&active)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if active {
				res.WindowBufferActive = true
				return nil
			}
		}
		leaseSecs := req.LeaseSeconds
		if leaseSecs <= 0 {
			leaseSecs = q.Options.LeaseTime
		}
		if leaseSecs <= 0 {
			leaseSecs = 60
		}
		leaseID := s.ids.New()
		rows, err := tx.Query(ctx, `
			WITH cand AS (
				SELECT pc.partition_id
				FROM queen.partition_consumers pc
				JOIN queen.partitions p ON p.id = pc.partition_id
				WHERE p.queue_id = $1 AND pc.consumer_group = $2
					AND ($3::text = '' OR p.name = $3::text)
					AND (pc.lease_expires_at IS NULL OR pc.lease_expires_at <= $4::timestamptz OR $9::bool)
					AND p.last_seq > pc.last_consumed_seq
					AND ($5::int = 0 OR p.last_message_at <= $4::timestamptz - make_interval(secs => $5::int))
				ORDER BY pc.lease_acquired_at NULLS FIRST, p.id
				LIMIT $6
				FOR UPDATE OF pc SKIP LOCKED
			)
			UPDATE queen.partition_consumers pc
			SET worker_id = $7, lease_acquired_at = $4::timestamptz,
				lease_expires_at = $4::timestamptz + make_interval(secs => $8::int), batch_size = 0, acked_count = 0
			FROM cand, queen.partitions p
			WHERE pc.partition_id = cand.partition_id AND pc.consumer_group = $2 AND p.id = pc.partition_id
			RETURNING pc.partition_id::text, p.name, pc.last_consumed_seq, pc.batch_retry_count, pc.lease_expires_at`,
			q.ID, req.Group, req.Partition, now, q.Options.WindowBuffer, req.Partitions, leaseID, leaseSecs,
			canary.On("pop-ignores-lease"))
		if err != nil {
			return err
		}
		var claims []claimed
		for rows.Next() {
			var c claimed
			if err := rows.Scan(&c.pid, &c.name, &c.cursor, &c.retryCount, &res.LeaseExpiresAt); err != nil {
				return err
			}
			claims = append(claims, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		remaining := req.Batch
		for _, c := range claims {
			var msgs []Message
			if remaining > 0 {
				msgs, err = fetchAfter(ctx, tx, c, remaining, now, q.Options.DelayedProcessing)
				if err != nil {
					return err
				}
			}
			if len(msgs) == 0 {
				if _, err := tx.Exec(ctx, `UPDATE queen.partition_consumers
					SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL
					WHERE partition_id = $1 AND consumer_group = $2`, c.pid, req.Group); err != nil {
					return err
				}
				continue
			}
			remaining -= len(msgs)
			last := msgs[len(msgs)-1]
			if req.AutoAck {
				_, err = tx.Exec(ctx, `UPDATE queen.partition_consumers
					SET last_consumed_seq = $3, last_consumed_id = $4, last_consumed_created_at = $5,
						worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL,
						batch_size = 0, acked_count = 0, batch_retry_count = 0,
						total_messages_consumed = total_messages_consumed + $6,
						total_batches_consumed = total_batches_consumed + 1, last_consumed_at = $7
					WHERE partition_id = $1 AND consumer_group = $2`,
					c.pid, req.Group, last.Seq, last.ID, last.CreatedAt, len(msgs), now)
			} else {
				_, err = tx.Exec(ctx, `UPDATE queen.partition_consumers SET batch_size = $3, lease_max_seq = $4
					WHERE partition_id = $1 AND consumer_group = $2`, c.pid, req.Group, len(msgs), last.Seq)
			}
			if err != nil {
				return err
			}
			if res.PartitionID == "" {
				res.PartitionID, res.Partition = c.pid, c.name
			}
			res.PartitionsClaimed++
			for i := range msgs {
				msgs[i].Queue, msgs[i].ConsumerGroup = req.Queue, req.Group
				if !req.AutoAck {
					msgs[i].LeaseID = leaseID
				}
			}
			res.Messages = append(res.Messages, msgs...)
		}
		if len(res.Messages) > 0 && !req.AutoAck {
			res.LeaseID = leaseID
		}
		return nil
	})
	if err != nil {
		return PopResult{Queue: req.Queue, Group: req.Group}, err
	}
	return res, nil
}

// fetchAfter reads up to limit messages after the claim's cursor, stopping
// at the first one that delayedProcessing still hides.
func fetchAfter(ctx context.Context, tx pgx.Tx, c claimed, limit int, now time.Time, delaySecs int) ([]Message, error) {
	rows, err := tx.Query(ctx, `
		SELECT id::text, transaction_id, trace_id::text, payload, producer_sub, created_at, seq
		FROM queen.messages WHERE partition_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, c.pid, c.cursor, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	visibleBefore := now.Add(-time.Duration(delaySecs) * time.Second)
	var out []Message
	for rows.Next() {
		m := Message{PartitionID: c.pid, Partition: c.name, RetryCount: c.retryCount}
		var payload []byte
		if err := rows.Scan(&m.ID, &m.TransactionID, &m.TraceID, &payload, &m.ProducerSub, &m.CreatedAt, &m.Seq); err != nil {
			return nil, err
		}
		if delaySecs > 0 && m.CreatedAt.After(visibleBefore) {
			break
		}
		if payload == nil {
			payload = []byte("null")
		}
		m.Data = payload
		out = append(out, m)
	}
	return out, rows.Err()
}

// subscriptionStart records the group's subscription on first touch and
// returns the instant its cursor starts after (nil: from the beginning).
// The first touch wins; later modes are ignored, as in Queen.
func subscriptionStart(ctx context.Context, tx pgx.Tx, now time.Time, req PopRequest) (*time.Time, error) {
	if req.Group == QueueModeGroup {
		return nil, nil
	}
	mode, ts := req.SubscriptionMode, now
	if req.SubscriptionFrom != nil {
		mode, ts = "from", *req.SubscriptionFrom
	}
	if mode == "" {
		mode = "all"
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO queen.consumer_groups_metadata (tenant_id, consumer_group, queue_name, subscription_mode, subscription_timestamp, created_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
		req.Tenant, req.Group, req.Queue, mode, ts, now); err != nil {
		return nil, err
	}
	if err := tx.QueryRow(ctx, `SELECT subscription_mode, subscription_timestamp FROM queen.consumer_groups_metadata
		WHERE tenant_id = $1 AND consumer_group = $2 AND queue_name = $3 AND partition_name = '' AND namespace = '' AND task = ''`,
		req.Tenant, req.Group, req.Queue).Scan(&mode, &ts); err != nil {
		return nil, err
	}
	if mode == "all" {
		return nil, nil
	}
	return &ts, nil
}

// QueuesFor lists the tenant's queues matching a namespace and/or task,
// highest priority first: the order a discovery pop tries them in.
func (s *Store) QueuesFor(ctx context.Context, tenant, namespace, task string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT name FROM queen.queues
		WHERE tenant_id = $1 AND ($2 = '' OR namespace = $2) AND ($3 = '' OR task = $3)
		ORDER BY priority DESC, name`, tenant, namespace, task)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Release gives back every live lease held by leaseID without moving any
// cursor: the messages are redelivered at once. Used when a pop's client
// went away after the claim committed.
func (s *Store) Release(ctx context.Context, leaseID string) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		tag, err := tx.Exec(ctx, `UPDATE queen.partition_consumers
			SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL
			WHERE worker_id = $1 AND lease_expires_at > $2`, leaseID, now)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
