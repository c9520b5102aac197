package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPartition is the partition a push without one lands in.
const DefaultPartition = "Default"

// QueueOptions is a queue's configuration, with Queen's defaults.
type QueueOptions struct {
	Priority                  int  `json:"priority"`
	LeaseTime                 int  `json:"leaseTime"`
	RetryLimit                int  `json:"retryLimit"`
	RetryDelay                int  `json:"retryDelay"`
	MaxSize                   int  `json:"maxSize"`
	TTL                       int  `json:"ttl"`
	DeadLetterQueue           bool `json:"deadLetterQueue"`
	DLQAfterMaxRetries        bool `json:"dlqAfterMaxRetries"`
	DelayedProcessing         int  `json:"delayedProcessing"`
	WindowBuffer              int  `json:"windowBuffer"`
	RetentionSeconds          int  `json:"retentionSeconds"`
	CompletedRetentionSeconds int  `json:"completedRetentionSeconds"`
	RetentionEnabled          bool `json:"retentionEnabled"`
	EncryptionEnabled         bool `json:"encryptionEnabled"`
	MaxWaitTimeSeconds        int  `json:"maxWaitTimeSeconds"`
}

// DefaultQueueOptions are the options of a queue nobody configured.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{LeaseTime: 300, RetryLimit: 3, RetryDelay: 1000, TTL: 3600}
}

// OptionPatch holds the options a configure call mentioned; nil means
// "not mentioned".
type OptionPatch struct {
	Priority, LeaseTime, RetryLimit, RetryDelay, MaxSize, TTL                    *int
	DelayedProcessing, WindowBuffer, RetentionSeconds, CompletedRetentionSeconds *int
	MaxWaitTimeSeconds                                                           *int
	DeadLetterQueue, DLQAfterMaxRetries, RetentionEnabled, EncryptionEnabled     *bool
}

// Apply writes the mentioned options over o.
func (p OptionPatch) Apply(o *QueueOptions) {
	setI := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setB := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	setI(&o.Priority, p.Priority)
	setI(&o.LeaseTime, p.LeaseTime)
	setI(&o.RetryLimit, p.RetryLimit)
	setI(&o.RetryDelay, p.RetryDelay)
	setI(&o.MaxSize, p.MaxSize)
	setI(&o.TTL, p.TTL)
	setI(&o.DelayedProcessing, p.DelayedProcessing)
	setI(&o.WindowBuffer, p.WindowBuffer)
	setI(&o.RetentionSeconds, p.RetentionSeconds)
	setI(&o.CompletedRetentionSeconds, p.CompletedRetentionSeconds)
	setI(&o.MaxWaitTimeSeconds, p.MaxWaitTimeSeconds)
	setB(&o.DeadLetterQueue, p.DeadLetterQueue)
	setB(&o.DLQAfterMaxRetries, p.DLQAfterMaxRetries)
	setB(&o.RetentionEnabled, p.RetentionEnabled)
	setB(&o.EncryptionEnabled, p.EncryptionEnabled)
}

// Queue is one queue row.
type Queue struct {
	ID        string
	Tenant    string
	Name      string
	Namespace string
	Task      string
	Options   QueueOptions
	CreatedAt time.Time
}

const queueColumns = `id, tenant_id::text, name, coalesce(namespace, ''), coalesce(task, ''),
	priority, lease_time, retry_limit, retry_delay, max_queue_size, ttl, dead_letter_queue,
	dlq_after_max_retries, delayed_processing, window_buffer, retention_seconds,
	completed_retention_seconds, retention_enabled, encryption_enabled, max_wait_time_seconds, created_at`

func scanQueue(row pgx.Row) (Queue, error) {
	var q Queue
	err := row.Scan(queueScanTargets(&q)...)
	return q, err
}

// queueScanTargets are the scan targets of queueColumns, in order.
func queueScanTargets(q *Queue) []any {
	o := &q.Options
	return []any{&q.ID, &q.Tenant, &q.Name, &q.Namespace, &q.Task,
		&o.Priority, &o.LeaseTime, &o.RetryLimit, &o.RetryDelay, &o.MaxSize, &o.TTL, &o.DeadLetterQueue,
		&o.DLQAfterMaxRetries, &o.DelayedProcessing, &o.WindowBuffer, &o.RetentionSeconds,
		&o.CompletedRetentionSeconds, &o.RetentionEnabled, &o.EncryptionEnabled, &o.MaxWaitTimeSeconds, &q.CreatedAt}
}

// ErrNotFound is returned when a named object does not exist.
var ErrNotFound = errors.New("not found")

func getQueue(ctx context.Context, db pgx.Tx, tenant, name string, forUpdate bool) (Queue, error) {
	sql := `SELECT ` + queueColumns + ` FROM queen.queues WHERE tenant_id = $1 AND name = $2`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	q, err := scanQueue(db.QueryRow(ctx, sql, tenant, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return q, ErrNotFound
	}
	return q, err
}

// SplitName derives namespace and task from a dotted queue name
// ("billing.invoices" -> "billing", "invoices"), as Queen does for queues
// created implicitly.
func SplitName(name string) (ns, task string) {
	if i := strings.IndexByte(name, '.'); i > 0 && i < len(name)-1 {
		return name[:i], name[i+1:]
	}
	return "", ""
}

// ConfigureInput is a configure call.
type ConfigureInput struct {
	Tenant, Queue   string
	Namespace, Task *string
	Patch           OptionPatch
	Replace         bool // restore every unmentioned option to its default
}

// configureQueueSQL creates the tenant's queue or sets its options ($1 to
// $21), and answers its row (queueColumns).
const configureQueueSQL = `
			INSERT INTO queen.queues (id, tenant_id, name, namespace, task, priority, lease_time, retry_limit,
				retry_delay, max_queue_size, ttl, dead_letter_queue, dlq_after_max_retries, delayed_processing,
				window_buffer, retention_seconds, completed_retention_seconds, retention_enabled,
				encryption_enabled, max_wait_time_seconds, created_at)
			VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
			ON CONFLICT (tenant_id, name) DO UPDATE SET
				namespace = EXCLUDED.namespace, task = EXCLUDED.task, priority = EXCLUDED.priority,
				lease_time = EXCLUDED.lease_time, retry_limit = EXCLUDED.retry_limit,
				retry_delay = EXCLUDED.retry_delay, max_queue_size = EXCLUDED.max_queue_size, ttl = EXCLUDED.ttl,
				dead_letter_queue = EXCLUDED.dead_letter_queue, dlq_after_max_retries = EXCLUDED.dlq_after_max_retries,
				delayed_processing = EXCLUDED.delayed_processing, window_buffer = EXCLUDED.window_buffer,
				retention_seconds = EXCLUDED.retention_seconds,
				completed_retention_seconds = EXCLUDED.completed_retention_seconds,
				retention_enabled = EXCLUDED.retention_enabled, encryption_enabled = EXCLUDED.encryption_enabled,
				max_wait_time_seconds = EXCLUDED.max_wait_time_seconds
			RETURNING ` + queueColumns

// ConfigureQueue creates or updates a queue and answers its stored row.
// Merge keeps unmentioned options; Replace resets them. queen/names'
// Configure runs it, forgets the queue's names and the write policy's
// encryption hint, and makes sure the queue's Default partition exists.
func (s *Store) ConfigureQueue(ctx context.Context, in ConfigureInput) (Queue, error) {
	var res Queue
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		q, err := getQueue(ctx, tx, in.Tenant, in.Queue, true)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if !exists || in.Replace {
			q.Options = DefaultQueueOptions()
		}
		if !exists {
			q.ID = s.ids.New()
			q.Namespace, q.Task = SplitName(in.Queue)
		}
		if in.Namespace != nil {
			q.Namespace = *in.Namespace
		}
		if in.Task != nil {
			q.Task = *in.Task
		}
		in.Patch.Apply(&q.Options)
		o := q.Options
		err = tx.QueryRow(ctx, configureQueueSQL,
			q.ID, in.Tenant, in.Queue, q.Namespace, q.Task, o.Priority, o.LeaseTime, o.RetryLimit,
			o.RetryDelay, o.MaxSize, o.TTL, o.DeadLetterQueue, o.DLQAfterMaxRetries, o.DelayedProcessing,
			o.WindowBuffer, o.RetentionSeconds, o.CompletedRetentionSeconds, o.RetentionEnabled,
			o.EncryptionEnabled, o.MaxWaitTimeSeconds, now).Scan(
			&q.ID, &q.Tenant, &q.Name, &q.Namespace, &q.Task,
			&q.Options.Priority, &q.Options.LeaseTime, &q.Options.RetryLimit, &q.Options.RetryDelay,
			&q.Options.MaxSize, &q.Options.TTL, &q.Options.DeadLetterQueue, &q.Options.DLQAfterMaxRetries,
			&q.Options.DelayedProcessing, &q.Options.WindowBuffer, &q.Options.RetentionSeconds,
			&q.Options.CompletedRetentionSeconds, &q.Options.RetentionEnabled, &q.Options.EncryptionEnabled,
			&q.Options.MaxWaitTimeSeconds, &q.CreatedAt)
		if err != nil {
			return err
		}
		res = q
		return nil
	})
	return res, err
}

// QueueInfo is a queue with its counts, for the resources routes.
type QueueInfo struct {
	Queue
	Partitions     []PartitionInfo // GetQueue only: a list gives PartitionCount
	PartitionCount int
	Messages       int64 // rows stored
	Pending        int64 // not yet consumed in queue mode
	Processing     int64 // under a live queue-mode lease
	DLQ            int64 // dead-lettered by any group
	QueueDLQ       int64 // dead-lettered in queue mode
}

// PartitionInfo is a partition with its counts.
type PartitionInfo struct {
	ID         string
	Name       string
	Messages   int64
	Pending    int64 // beyond the cursor furthest along (any group)
	Processing int64 // under a live queue-mode lease
	DLQ        int64 // dead-lettered by any group
	QueueDLQ   int64 // dead-lettered by the group furthest along (its cursor passed them)
	// TotalConsumed and BatchesConsumed are the furthest cursor's counts.
	TotalConsumed, BatchesConsumed int64
	OldestAt                       *time.Time // the oldest stored message (nil: none)
	LastMessageAt                  *time.Time
	CreatedAt                      time.Time
}

// ListQueues lists every queue of the tenant with counts, newest first.
func (s *Store) ListQueues(ctx context.Context, tenant string) ([]QueueInfo, error) {
	return s.ListQueuesPage(ctx, tenant, QueueFilter{})
}

// QueueFilter picks a page of a tenant's queues, newest first (created_at,
// then id, both time-ordered): "" matches every namespace, task or name; Limit 0 lists all.
type QueueFilter struct {
	Namespace, Task, Name string
	Limit, Offset         int
}

// queuePageSQL picks the page before anything is counted, so a page costs
// what its queues hold, not what the tenant holds.
const queuePageSQL = `SELECT ` + queueColumns + ` FROM queen.queues
WHERE tenant_id = $1 AND ($2 = '' OR namespace = $2) AND ($3 = '' OR task = $3) AND ($4 = '' OR name = $4)
ORDER BY created_at DESC, id DESC LIMIT nullif($5, 0) OFFSET $6`

// ListQueuesPage lists a page of the tenant's queues with counts.
func (s *Store) ListQueuesPage(ctx context.Context, tenant string, f QueueFilter) ([]QueueInfo, error) {
	var out []QueueInfo
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		rows, err := tx.Query(ctx, queuePageSQL, tenant, f.Namespace, f.Task, f.Name, max(f.Limit, 0), max(f.Offset, 0))
		if err != nil {
			return err
		}
		qs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Queue, error) { return scanQueue(r) })
		if err != nil {
			return err
		}
		out, err = queueSummaries(ctx, tx, qs, now)
		return err
	})
	return out, err
}

// QueueRows lists a page of the tenant's queues as ListQueuesPage picks
// it, without counting them: a page across shards is picked from every
// shard's first rows, and only the queues of the page are then counted
// (CountQueues), so its cost is the page's, not the offset's.
func (s *Store) QueueRows(ctx context.Context, tenant string, f QueueFilter) ([]Queue, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, queuePageSQL, tenant, f.Namespace, f.Task, f.Name, max(f.Limit, 0), max(f.Offset, 0))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Queue, error) { return scanQueue(r) })
}

// CountQueues counts the queues qs of this database as ListQueuesPage
// does, in qs's order (a queue gone since it was listed counts zeros).
func (s *Store) CountQueues(ctx context.Context, qs []Queue) ([]QueueInfo, error) {
	var out []QueueInfo
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		var err error
		out, err = queueSummaries(ctx, tx, qs, now)
		return err
	})
	return out, err
}

// GetQueue returns one queue with its partitions and counts.
func (s *Store) GetQueue(ctx context.Context, tenant, name string) (QueueInfo, error) {
	var out QueueInfo
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		q, err := getQueue(ctx, tx, tenant, name, false)
		if err != nil {
			return err
		}
		out, err = queueInfo(ctx, tx, q, now)
		return err
	})
	return out, err
}

// queuePartitionsSQL counts the partitions of queues $1 at $2: stored rows
// (the counters of migration 014: appended minus deleted), the queue-mode
// backlog by the sequence (seqPendingSQL), what a live queue-mode lease
// holds of it (at most a batch), DLQ rows (any group, then queue mode's,
// from the counters of queen.dlq_counts), and the oldest stored message
// (one index probe). One statement for every queue listed: before, the
// queue list ran it once per queue, each DLQ count scanned every dead
// letter, each stored count every stored message, and each pending count
// every pending message's index entry.
const queuePartitionsSQL = `
SELECT p.queue_id, p.id, p.name, p.created_at, p.last_message_at,
	p.appended - coalesce(d.n, 0),
	` + seqPendingSQL + `,
	CASE WHEN pc.lease_expires_at > coalesce($2::timestamptz, now()) THEN
		(SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id
			AND m.seq > pc.last_consumed_seq AND m.seq <= pc.lease_max_seq) ELSE 0 END,
	(SELECT coalesce(sum(c.n), 0)::bigint FROM queen.dlq_counts c WHERE c.partition_id = p.id),
	(SELECT coalesce(sum(c.n), 0)::bigint FROM queen.dlq_counts c WHERE c.partition_id = p.id AND c.consumer_group = coalesce(f.consumer_group, '__QUEUE_MODE__')),
	(SELECT m.created_at FROM queen.messages m WHERE m.partition_id = p.id ORDER BY m.seq LIMIT 1),
	coalesce(f.total_messages_consumed, 0), coalesce(f.total_batches_consumed, 0)
FROM queen.partitions p
LEFT JOIN queen.message_deletes d ON d.partition_id = p.id
LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id AND pc.consumer_group = '__QUEUE_MODE__'
LEFT JOIN LATERAL (` + furthestCursorSQL + `) f ON true
WHERE p.queue_id = ANY($1::uuid[]) ORDER BY p.queue_id, p.name`

// seqPendingSQL is partition p's pending, with d its deletes counter and f
// its furthest cursor: the seqs pushed past the cursor, capped by what the
// partition stores. It reads two rows a partition whatever its backlog
// (counting the backlog made the queue list cost it: 196 ms a request
// against 2.1 ms once one queue held 500,000 pending messages, and the
// dashboard polls the list every 5 s). Exact but for two seqs without a
// row: a message deleted unconsumed (retention, eviction, the delete
// route) and a seq a duplicate inside a push batch left unused (a later
// row of the batch took the next one), each counted until a cursor passes
// it; the cap keeps a partition whose rows are all gone at zero. The
// queue statistics snapshot counts pending with the same expression.
const seqPendingSQL = `least(greatest(p.last_seq - coalesce(f.last_consumed_seq, 0), 0), p.appended - coalesce(d.n, 0))`

// furthestCursorSQL is partition p's cursor furthest along, of any group
// (queue mode is one): what is consumed and pending is counted by it, as
// Queen counts per group and shows each partition's maximum.
const furthestCursorSQL = `SELECT c.consumer_group, c.last_consumed_seq, c.total_messages_consumed, c.total_batches_consumed
	FROM queen.partition_consumers c WHERE c.partition_id = p.id
	ORDER BY c.last_consumed_seq DESC, c.consumer_group LIMIT 1`

// indexQueues is qs's ids, one QueueInfo each, and those by id.
func indexQueues(qs []Queue) ([]string, []QueueInfo, map[string]*QueueInfo) {
	ids := make([]string, len(qs))
	out := make([]QueueInfo, len(qs))
	byID := make(map[string]*QueueInfo, len(qs))
	for i, q := range qs {
		ids[i], out[i] = q.ID, QueueInfo{Queue: q}
		byID[q.ID] = &out[i]
	}
	return ids, out, byID
}

// queueInfos counts the partitions of every queue of qs in one statement.
func queueInfos(ctx context.Context, tx pgx.Tx, qs []Queue, now time.Time) ([]QueueInfo, error) {
	ids, out, byID := indexQueues(qs)
	rows, err := tx.Query(ctx, queuePartitionsSQL, ids, now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var qid string
		var p PartitionInfo
		if err := rows.Scan(&qid, &p.ID, &p.Name, &p.CreatedAt, &p.LastMessageAt, &p.Messages, &p.Pending, &p.Processing,
			&p.DLQ, &p.QueueDLQ, &p.OldestAt, &p.TotalConsumed, &p.BatchesConsumed); err != nil {
			return nil, err
		}
		info := byID[qid]
		info.Partitions = append(info.Partitions, p)
		info.PartitionCount++
		info.Messages += p.Messages
		info.Pending += p.Pending
		info.Processing += p.Processing
		info.DLQ += p.DLQ
		info.QueueDLQ += p.QueueDLQ
	}
	return out, rows.Err()
}

// queueCountsWithSQL reads what a per-queue count of queues $1 needs, each
// table once by queue id: their partitions, cursors (and each partition's
// furthest), and dead-letter counters (queueSummariesSQL,
// refreshQueueStatsSQL).
const queueCountsWithSQL = `
WITH p AS (
	SELECT p.id, p.queue_id, p.last_seq, p.appended FROM queen.partitions p WHERE p.queue_id = ANY($1::uuid[])
), cursors AS (
	SELECT c.partition_id, c.consumer_group, c.last_consumed_seq, c.lease_expires_at, c.lease_max_seq
	FROM queen.partition_consumers c WHERE c.queue_id = ANY($1::uuid[])
), furthest AS (
	SELECT DISTINCT ON (c.partition_id) c.partition_id, c.consumer_group, c.last_consumed_seq
	FROM cursors c ORDER BY c.partition_id, c.last_consumed_seq DESC, c.consumer_group
), dlq AS (
	SELECT c.partition_id, c.consumer_group, c.n FROM queen.dlq_counts c WHERE c.n <> 0 AND c.partition_id IN (SELECT id FROM p)
), dlq_all AS (
	SELECT partition_id, sum(n) AS n FROM dlq GROUP BY 1
)`

// queueCountsFromSQL joins, per partition p, its queue-mode cursor pc, its
// furthest cursor f, its deletes d, and its dead letters of any group (da)
// and of the furthest group (df).
const queueCountsFromSQL = `
FROM p
LEFT JOIN cursors pc ON pc.partition_id = p.id AND pc.consumer_group = '__QUEUE_MODE__'
LEFT JOIN furthest f ON f.partition_id = p.id
LEFT JOIN queen.message_deletes d ON d.partition_id = p.id
LEFT JOIN dlq_all da ON da.partition_id = p.id
LEFT JOIN dlq df ON df.partition_id = p.id AND df.consumer_group = coalesce(f.consumer_group, '__QUEUE_MODE__')
GROUP BY p.queue_id`

// queueProcessingSQL is what a live queue-mode lease of partition p holds
// (at most a batch: cheap).
const queueProcessingSQL = `coalesce(sum(CASE WHEN pc.lease_expires_at > coalesce($2::timestamptz, now()) AND pc.lease_max_seq > pc.last_consumed_seq THEN
		(SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id
			AND m.seq > pc.last_consumed_seq AND m.seq <= pc.lease_max_seq) END), 0)::bigint`

// queueSummariesSQL sums the partitions of queues $1 at $2 per queue, for
// the lists: the same figures as queuePartitionsSQL without the oldest
// message, in one pass of joins (the cursors read once by queue id, not
// probed per partition), pending by the sequence (seqPendingSQL), so no
// partition's backlog is read.
const queueSummariesSQL = queueCountsWithSQL + `
SELECT p.queue_id, count(*)::int,
	coalesce(sum(p.appended - coalesce(d.n, 0)), 0)::bigint,
	coalesce(sum(` + seqPendingSQL + `), 0)::bigint,
	` + queueProcessingSQL + `,
	coalesce(sum(da.n), 0)::bigint, coalesce(sum(df.n), 0)::bigint` + queueCountsFromSQL

// queueSummaries counts every queue of qs in one statement, without
// partitions.
func queueSummaries(ctx context.Context, tx pgx.Tx, qs []Queue, now time.Time) ([]QueueInfo, error) {
	ids, out, byID := indexQueues(qs)
	rows, err := tx.Query(ctx, queueSummariesSQL, ids, now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var qid string
		var c QueueInfo
		if err := rows.Scan(&qid, &c.PartitionCount, &c.Messages, &c.Pending, &c.Processing, &c.DLQ, &c.QueueDLQ); err != nil {
			return nil, err
		}
		info := byID[qid]
		info.PartitionCount, info.Messages, info.Pending, info.Processing, info.DLQ, info.QueueDLQ =
			c.PartitionCount, c.Messages, c.Pending, c.Processing, c.DLQ, c.QueueDLQ
	}
	return out, rows.Err()
}

func queueInfo(ctx context.Context, tx pgx.Tx, q Queue, now time.Time) (QueueInfo, error) {
	infos, err := queueInfos(ctx, tx, []Queue{q}, now)
	if err != nil {
		return QueueInfo{Queue: q}, err
	}
	return infos[0], nil
}

// deleteQueueSQL deletes tenant $1's queue $2 with its subscriptions and
// watermarks.
const deleteQueueSQL = `
		WITH subs AS (DELETE FROM queen.consumer_groups_metadata WHERE tenant_id = $1 AND queue_name = $2),
		marks AS (DELETE FROM queen.consumer_watermarks WHERE tenant_id = $1 AND queue_name = $2)
		DELETE FROM queen.queues WHERE tenant_id = $1 AND name = $2`

// DeleteQueue removes a queue and, by cascade, its partitions, messages,
// cursors and DLQ rows. It reports whether the queue existed.
func (s *Store) DeleteQueue(ctx context.Context, tenant, name string) (bool, error) {
	// The queue's subscriptions and watermarks go with it: a queue created
	// again under the same name starts with none.
	tag, err := s.pool.Exec(ctx, deleteQueueSQL, tenant, name)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// Overview is the tenant-wide summary.
type Overview struct {
	Queues, Partitions, Messages int64
	// Pending is what no group has reached yet (past each partition's
	// furthest cursor), as in the lists and status.
	Pending, Processing int64
	DLQ                 int64 // dead-lettered by any group
	QueueDLQ            int64 // dead-lettered by each partition's group furthest along
	ActiveLeases        int64
	Namespaces, Tasks   []string
	// LagSeconds and LagOffset summarise, over every (partition, group)
	// cursor with messages past it, the age of the oldest message not yet
	// consumed and the number of messages not yet consumed.
	LagSeconds, LagOffset Spread
}

// Spread is the average, median, minimum and maximum of a set (zeros for
// an empty set), and its size N (what merges spreads of several sets).
type Spread struct {
	Avg, Median, Min, Max float64
	N                     int64
}

// overviewCountsSQL counts a tenant's objects ($1) at $2 from their rows
// and counters, never reading a message. Messages are the stored ones
// (appended minus deleted); pending and the dead letters of the group
// furthest along are what the queue lists and status count
// (seqPendingSQL, furthestCursorSQL), so every page shows one pending and
// one completed; processing is what live leases hold.
const overviewCountsSQL = `
WITH f AS (
	SELECT p.id, p.last_seq, p.appended, f.consumer_group, f.last_consumed_seq, d.n AS deleted
	FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	LEFT JOIN LATERAL (` + furthestCursorSQL + `) f ON true
	LEFT JOIN queen.message_deletes d ON d.partition_id = p.id
	WHERE q.tenant_id = $1
)
SELECT
	(SELECT count(*) FROM queen.queues q WHERE q.tenant_id = $1),
	(SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1),
	(SELECT coalesce(sum(p.appended - coalesce(d.n, 0)), 0)::bigint FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN queen.message_deletes d ON d.partition_id = p.id WHERE q.tenant_id = $1),
	(SELECT coalesce(sum(least(greatest(f.last_seq - coalesce(f.last_consumed_seq, 0), 0), f.appended - coalesce(f.deleted, 0))), 0)::bigint FROM f),
	(SELECT coalesce(sum(greatest(pc.lease_max_seq - pc.last_consumed_seq, 0)), 0)::bigint
		FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND pc.lease_expires_at > $2),
	(SELECT coalesce(sum(c.n), 0)::bigint FROM queen.dlq_counts c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1),
	(SELECT coalesce(sum(c.n), 0)::bigint FROM f JOIN queen.dlq_counts c ON c.partition_id = f.id
		AND c.consumer_group = coalesce(f.consumer_group, '__QUEUE_MODE__')),
	(SELECT count(*) FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND pc.lease_expires_at > $2)`

// overviewLagSQL spreads the lag of every cursor ($1's partitions, every
// group, queue mode from the start where it never popped) that has
// messages past it, at $2: the oldest unconsumed message's age in seconds,
// and the count past the cursor; and how many cursors lag.
const overviewLagSQL = `
WITH cursors AS (
	SELECT p.id, p.last_seq, coalesce(pc.last_consumed_seq, 0) AS cursor
	FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id
	WHERE q.tenant_id = $1
),
lag AS (
	SELECT (c.last_seq - c.cursor)::float8 AS n,
		greatest(extract(epoch FROM $2::timestamptz - (SELECT m.created_at FROM queen.messages m
			WHERE m.partition_id = c.id AND m.seq > c.cursor ORDER BY m.seq LIMIT 1)), 0)::float8 AS secs
	FROM cursors c WHERE c.last_seq > c.cursor
)
SELECT coalesce(avg(secs), 0), coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY secs), 0), coalesce(min(secs), 0), coalesce(max(secs), 0),
	coalesce(avg(n), 0), coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY n), 0), coalesce(min(n), 0), coalesce(max(n), 0),
	count(*)
FROM lag`

// namespacesSQL lists tenant $1's namespaces.
const namespacesSQL = `SELECT DISTINCT namespace FROM queen.queues WHERE tenant_id = $1 AND namespace IS NOT NULL AND namespace <> '' ORDER BY 1`

// tasksSQL lists tenant $1's tasks.
const tasksSQL = `SELECT DISTINCT task FROM queen.queues WHERE tenant_id = $1 AND task IS NOT NULL AND task <> '' ORDER BY 1`

// Overview counts the tenant's objects and spreads their lag.
func (s *Store) Overview(ctx context.Context, tenant string) (Overview, error) {
	var o Overview
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		err := tx.QueryRow(ctx, overviewCountsSQL, tenant, now).Scan(&o.Queues, &o.Partitions, &o.Messages, &o.Pending, &o.Processing, &o.DLQ, &o.QueueDLQ, &o.ActiveLeases)
		if err != nil {
			return err
		}
		t, n := &o.LagSeconds, &o.LagOffset
		if err := tx.QueryRow(ctx, overviewLagSQL, tenant, now).Scan(&t.Avg, &t.Median, &t.Min, &t.Max, &n.Avg, &n.Median, &n.Min, &n.Max, &t.N); err != nil {
			return err
		}
		n.N = t.N
		rows, err := tx.Query(ctx, namespacesSQL, tenant)
		if err != nil {
			return err
		}
		if o.Namespaces, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, tasksSQL, tenant)
		if err != nil {
			return err
		}
		o.Tasks, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return o, err
}

// QueueDepth is one queue's backlog, for the metrics.
type QueueDepth struct {
	Tenant, Queue string
	Depth         int64 // messages pushed past the queue-mode cursor
	DLQ           int64
}

// queueDepthsSQL reads every queue's queue-mode depth (by the sequence)
// and dead-letter count from the snapshot of queen.queue_stats (a queue
// not yet counted shows zeros): one row per queue, so a scrape costs the
// same on any number of partitions and any backlog (it read every
// partition and cursor row: 95 ms on 100,000 partitions).
const queueDepthsSQL = `
SELECT q.tenant_id::text, q.name, coalesce(st.depth, 0), coalesce(st.dlq, 0)
FROM queen.queues q LEFT JOIN queen.queue_stats st ON st.queue_id = q.id
ORDER BY 1, 2`

// QueueDepths lists every tenant's queues with their depth and DLQ count.
func (s *Store) QueueDepths(ctx context.Context) ([]QueueDepth, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, queueDepthsSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueDepth, error) {
		var d QueueDepth
		err := r.Scan(&d.Tenant, &d.Queue, &d.Depth, &d.DLQ)
		return d, err
	})
}

// queueHeldSQL answers whether this database holds a row of the tenant's
// queue: with shards, where a queue created before shards were configured
// is (placement adopts it there, catalog.Adopt).
const queueHeldSQL = `SELECT EXISTS (SELECT 1 FROM queen.queues WHERE tenant_id = $1::uuid AND name = $2)`

// QueueHeldParams are queueHeldSQL's arguments.
type QueueHeldParams struct {
	Tenant string
	Name   string
}

// QueueHeld reports whether this database holds a row of the queue.
func (s *Store) QueueHeld(ctx context.Context, p QueueHeldParams) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var held bool
	if err := s.pool.QueryRow(ctx, text("queues.held"), argsOf(p)...).Scan(&held); err != nil {
		return false, fmt.Errorf("queue %s held: %w", p.Name, err)
	}
	return held, nil
}
