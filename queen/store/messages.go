package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/crypt"
)

// Message inspection for the admin routes: statuses computed from the
// cursors, as Queen computes them (contract-admin.md section 3).

// MessageFilter narrows a listing; empty strings match everything.
type MessageFilter struct {
	Tenant, Queue, Partition, Namespace, Task, Status string
	From, To                                          time.Time
	Limit, Offset                                     int
}

// MessageRow is one message with its computed statuses.
type MessageRow struct {
	ID, TransactionID, PartitionID, Queue, Partition, Namespace, Task string
	TraceID, ProducerSub                                              *string
	Priority                                                          int
	CreatedAt                                                         time.Time
	LeaseExpiresAt                                                    *time.Time // the queue-mode lease, when live
	Status, QueueStatus                                               string
	ConsumedBy, TotalGroups                                           int
	// RetryCount is the failed deliveries counted against it: the DLQ's
	// count once dead-lettered, the queue-mode batch's while it is in the
	// batch last handed out, else 0.
	RetryCount int
}

// messageStatusSQL computes, for messages m of partitions p of queues q,
// queueStatus and status (section 3.1's rules), and the bus counts. It is
// the common part of the list and get statements; $now is the injected now.
const messageStatusSQL = `
SELECT m.id::text AS id, m.transaction_id, p.id::text AS partition_id, q.name AS queue, p.name AS partition,
	coalesce(q.namespace, '') AS namespace, coalesce(q.task, '') AS task,
	m.trace_id::text AS trace_id, m.producer_sub, q.priority, m.created_at,
	CASE WHEN qm.lease_expires_at > coalesce(@now::timestamptz, now()) THEN qm.lease_expires_at END AS lease_expires_at,
	CASE WHEN dl THEN 'dead_letter'
		WHEN qm.partition_id IS NOT NULL AND qm.last_consumed_seq >= m.seq THEN 'completed'
		WHEN qm.lease_expires_at > coalesce(@now::timestamptz, now()) THEN 'processing'
		ELSE 'pending' END AS queue_status,
	CASE WHEN dl THEN 'dead_letter'
		WHEN qm.partition_id IS NULL AND bus.total > 0 THEN CASE WHEN bus.consumed = bus.total THEN 'completed' ELSE 'pending' END
		WHEN qm.partition_id IS NOT NULL AND qm.last_consumed_seq >= m.seq THEN 'completed'
		WHEN qm.lease_expires_at > coalesce(@now::timestamptz, now()) THEN 'processing'
		ELSE 'pending' END AS status,
	bus.consumed, bus.total,
	CASE WHEN dl THEN x.dl_retries
		WHEN m.seq > qm.last_consumed_seq AND m.seq <= qm.lease_max_seq THEN qm.batch_retry_count ELSE 0 END AS retry_count
FROM queen.messages m
JOIN queen.partitions p ON p.id = m.partition_id
JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN queen.partition_consumers qm ON qm.partition_id = p.id AND qm.consumer_group = '__QUEUE_MODE__'
CROSS JOIN LATERAL (SELECT r IS NOT NULL AS dl, r AS dl_retries
	FROM (SELECT max(d.retry_count) AS r FROM queen.dead_letter_queue d WHERE d.message_id = m.id) d) x
CROSS JOIN LATERAL (SELECT (count(*) FILTER (WHERE pc.last_consumed_seq >= m.seq))::int AS consumed, count(*)::int AS total
	FROM queen.partition_consumers pc WHERE pc.partition_id = p.id AND pc.consumer_group <> '__QUEUE_MODE__') bus`

const listMessagesSQL = `
SELECT * FROM (` + messageStatusSQL + `
	WHERE q.tenant_id = @tenant AND (@queue = '' OR q.name = @queue) AND (@partition = '' OR p.name = @partition)
		AND (@ns = '' OR q.namespace = @ns) AND (@task = '' OR q.task = @task)
		AND m.created_at >= @from AND m.created_at < @to
) s
WHERE @status = '' OR s.status = @status
ORDER BY created_at DESC, id DESC
LIMIT @limit OFFSET @offset`

func scanMessageRow(r pgx.Row) (MessageRow, error) {
	var m MessageRow
	err := r.Scan(&m.ID, &m.TransactionID, &m.PartitionID, &m.Queue, &m.Partition, &m.Namespace, &m.Task, &m.TraceID,
		&m.ProducerSub, &m.Priority, &m.CreatedAt, &m.LeaseExpiresAt, &m.QueueStatus, &m.Status, &m.ConsumedBy, &m.TotalGroups, &m.RetryCount)
	return m, err
}

// ListMessages lists messages newest first.
func (s *Store) ListMessages(ctx context.Context, f MessageFilter) ([]MessageRow, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, listMessagesSQL, pgx.NamedArgs{"tenant": f.Tenant, "queue": f.Queue, "partition": f.Partition,
		"ns": f.Namespace, "task": f.Task, "from": f.From, "to": f.To, "status": f.Status, "limit": f.Limit, "offset": f.Offset,
		"now": s.dbNow()})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MessageRow, error) { return scanMessageRow(r) })
}

// consumptionModeSQL tells whether queue-mode consumers read tenant $1's
// queue $2 (empty: any)
// and how many named groups do.
const consumptionModeSQL = `
		SELECT coalesce(bool_or(pc.consumer_group = '__QUEUE_MODE__'), false),
			count(DISTINCT pc.consumer_group) FILTER (WHERE pc.consumer_group <> '__QUEUE_MODE__')
		FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.tenant_id = $1 AND ($2 = '' OR q.name = $2)`

// ConsumptionMode says how a queue (or all queues, for "") is consumed:
// by the queue-mode group, by named groups, both or neither.
func (s *Store) ConsumptionMode(ctx context.Context, tenant, queue string) (hasQueueMode bool, busGroups int, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.pool.QueryRow(ctx, consumptionModeSQL, tenant, queue).Scan(&hasQueueMode, &busGroups)
	return hasQueueMode, busGroups, err
}

// consumptionGroupsSQL is consumptionModeSQL answering the named groups
// themselves, not their count.
const consumptionGroupsSQL = `
		SELECT coalesce(bool_or(pc.consumer_group = '__QUEUE_MODE__'), false),
			coalesce(array_agg(DISTINCT pc.consumer_group) FILTER (WHERE pc.consumer_group <> '__QUEUE_MODE__'), '{}')
		FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.tenant_id = $1 AND ($2 = '' OR q.name = $2)`

// ConsumptionGroups is ConsumptionMode with the named groups' names: a
// broker with shards counts a group reading queues on several shards
// once. Its cost is ConsumptionMode's; it answers one name per group.
func (s *Store) ConsumptionGroups(ctx context.Context, tenant, queue string) (hasQueueMode bool, busGroups []string, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.pool.QueryRow(ctx, consumptionGroupsSQL, tenant, queue).Scan(&hasQueueMode, &busGroups)
	return hasQueueMode, busGroups, err
}

// MessageDetail is one message with its payload, DLQ record, queue
// configuration and every cursor of its partition.
type MessageDetail struct {
	MessageRow
	Payload      crypt.Payload // as stored: its reader opens it
	IsEncrypted  bool
	ErrorMessage *string
	DLQRetries   *int
	Config       QueueConfig
	Groups       []GroupCursor
}

// QueueConfig is the part of a queue's options a message view shows.
type QueueConfig struct {
	LeaseTime, RetryLimit, RetryDelay, TTL, Priority int
}

// GroupCursor is one consumer row of a partition.
type GroupCursor struct {
	Name           string
	Consumed       bool
	LeaseExpiresAt *time.Time
}

// messageDetailSQL reads message $1's payload and its queue's options.
const messageDetailSQL = `SELECT m.payload, m.is_encrypted, q.lease_time, q.retry_limit, q.retry_delay, q.ttl, q.priority
			FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE m.id = $1`

// messageLastErrorSQL reads message $1's latest dead letter.
const messageLastErrorSQL = `SELECT error_message, retry_count FROM queen.dead_letter_queue WHERE message_id = $1
			ORDER BY failed_at DESC LIMIT 1`

// messageGroupsSQL lists each group's view of message $1: consumed, and its
// live lease's expiry.
const messageGroupsSQL = `SELECT pc.consumer_group, pc.last_consumed_seq >= m.seq,
				CASE WHEN pc.lease_expires_at > coalesce($2::timestamptz, now()) THEN pc.lease_expires_at END
			FROM queen.partition_consumers pc JOIN queen.messages m ON m.id = $1
			WHERE pc.partition_id = m.partition_id ORDER BY 1`

// messageOneSQL is messageStatusSQL for one message of the tenant.
const messageOneSQL = messageStatusSQL + `
			WHERE q.tenant_id = @tenant AND p.id = @pid AND m.transaction_id = @txid`

// GetMessage returns one message, or ErrNotFound.
func (s *Store) GetMessage(ctx context.Context, tenant, partitionID, txid string) (MessageDetail, error) {
	var d MessageDetail
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		var err error
		d.MessageRow, err = scanMessageRow(tx.QueryRow(ctx, messageOneSQL, pgx.NamedArgs{"tenant": tenant, "pid": partitionID, "txid": txid, "now": s.dbNow()}))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var payload []byte
		if err := tx.QueryRow(ctx, messageDetailSQL, d.ID).Scan(&payload, &d.IsEncrypted, &d.Config.LeaseTime,
			&d.Config.RetryLimit, &d.Config.RetryDelay, &d.Config.TTL, &d.Config.Priority); err != nil {
			return err
		}
		d.Payload = crypt.Stored(payload, d.IsEncrypted)
		err = tx.QueryRow(ctx, messageLastErrorSQL, d.ID).Scan(&d.ErrorMessage, &d.DLQRetries)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rows, err := tx.Query(ctx, messageGroupsSQL, d.ID, s.dbNow())
		if err != nil {
			return err
		}
		d.Groups, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupCursor, error) {
			var g GroupCursor
			err := r.Scan(&g.Name, &g.Consumed, &g.LeaseExpiresAt)
			return g, err
		})
		return err
	})
	return d, err
}

// deleteMessageSQL deletes tenant $1's message $3 of partition $2.
const deleteMessageSQL = `DELETE FROM queen.messages m USING queen.partitions p, queen.queues q
		WHERE m.partition_id = p.id AND p.queue_id = q.id AND q.tenant_id = $1 AND p.id = $2 AND m.transaction_id = $3`

// deleteMessageFencedSQL is deleteMessageSQL routed at epoch $4 (shards):
// the partition row is read FOR SHARE, which a freeze's rewrite conflicts
// with, so a delete that waited behind one is rechecked at the new epoch;
// a partition at another epoch fails it as moved (queen.fence_moved).
const deleteMessageFencedSQL = `WITH p AS (
		SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND p.id = $2 AND (p.epoch = $4 OR queen.fence_moved(p.queue_id))
		FOR SHARE OF p)
	DELETE FROM queen.messages m USING p WHERE m.partition_id = p.id AND m.transaction_id = $3`

// DeleteMessage deletes one message row (its DLQ rows go with it; cursors
// stay). It reports whether there was one. epoch is the placement epoch of
// the partition's queue (0: none, without shards: nothing checked, no
// lock); a queue frozen or moved from it is a *MovedError, nothing
// deleted.
func (s *Store) DeleteMessage(ctx context.Context, tenant, partitionID, txid string, epoch int64) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if epoch != 0 {
		tag, err := s.pool.Exec(ctx, deleteMessageFencedSQL, tenant, partitionID, txid, epoch)
		return tag.RowsAffected() > 0, movedOr(err)
	}
	tag, err := s.pool.Exec(ctx, deleteMessageSQL, tenant, partitionID, txid)
	return tag.RowsAffected() > 0, err
}

// Retried is the message a DLQ retry pushed.
type Retried struct {
	Queue, Partition, PartitionID, MessageID, TransactionID string
	Duplicate                                               bool
}

// retryDeadLetterSQL reads the latest dead letter of tenant $1's message $3
// of partition $2.
const retryDeadLetterSQL = `SELECT d.id, q.name, p.name, m.payload, m.is_encrypted, m.trace_id::text, m.producer_sub
		FROM queen.dead_letter_queue d JOIN queen.messages m ON m.id = d.message_id
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND p.id = $2 AND m.transaction_id = $3 ORDER BY d.failed_at DESC, d.id DESC LIMIT 1`

// deleteDeadLetterSQL deletes dead letter $1.
const deleteDeadLetterSQL = `DELETE FROM queen.dead_letter_queue WHERE id = $1`

// DeadLetter is a dead-lettered message's newest DLQ row, read for a retry
// (ReadDeadLetter): the item to push again, and what the retry answers.
type DeadLetter struct {
	id      int64
	Item    PushItem
	Retried Retried
}

// ReadDeadLetter reads the newest DLQ row of the tenant's message txid of
// partitionID, as the item a retry pushes to the end of its partition under
// transactionId "dlq:<row id>" (so a repeated retry of that row dedups).
// ErrNotFound: no DLQ row. queen/pushpath's RetryMessage resolves the
// item's partition and, in one transaction, runs DeleteDeadLetter and the
// append.
func (s *Store) ReadDeadLetter(ctx context.Context, tenant, partitionID, txid string) (DeadLetter, error) {
	var d DeadLetter
	r := &d.Retried
	var payload []byte
	var trace *string
	var sub *string
	var sealed bool
	err := s.pool.QueryRow(ctx, retryDeadLetterSQL, tenant, partitionID, txid).Scan(&d.id, &r.Queue, &r.Partition, &payload, &sealed, &trace, &sub)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, err
	}
	r.TransactionID = fmt.Sprintf("dlq:%d", d.id)
	// The stored payload travels with whether it is sealed: it is opened
	// and stored again as the queue asks, never sealed a second time.
	d.Item = PushItem{Queue: r.Queue, Partition: r.Partition, Payload: crypt.Stored(payload, sealed), TransactionID: r.TransactionID}
	if trace != nil {
		d.Item.TraceID = *trace
	}
	if sub != nil {
		d.Item.ProducerSub = *sub
	}
	return d, nil
}

// DeleteDeadLetter runs deleteDeadLetterSQL on q: d's DLQ row is deleted,
// in the transaction that appends d.Item again (queen/pushpath's
// RetryMessage).
func (s *Store) DeleteDeadLetter(ctx context.Context, q Executor, d DeadLetter) error {
	_, err := q.Exec(ctx, deleteDeadLetterSQL, d.id)
	return err
}
