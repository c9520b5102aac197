package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Consumer-group management: the cursors (partition_consumers) and the
// subscriptions (consumer_groups_metadata) of a tenant's groups. Every
// statement takes the injected now as a parameter.

// GroupSummary is one (group, queue) pair that has cursors.
type GroupSummary struct {
	Group, Queue          string
	Members               int   // partitions with a cursor of the group
	PartitionsWithLag     int   // partitions holding messages past the cursor
	MaxTimeLagSeconds     int64 // age of the oldest message past any cursor of the group
	LagMessages           int64 // messages pushed past the cursors (sequence arithmetic)
	Consumed              bool  // some cursor has consumed something
	SubscriptionMode      string
	SubscriptionTimestamp *time.Time
	SubscriptionCreatedAt *time.Time
}

// listGroupsSQL sums tenant $1's cursors by (group, queue) at $2. The time
// lag is the age of the oldest message past a cursor, read by one index
// probe per lagging cursor only (the probe's WHERE gates it on the cursor
// lagging, so a caught-up cursor costs none): the newest message's age,
// read from the partition row, showed a group ten minutes behind as a
// few seconds behind whenever its queue was still being pushed to.
const listGroupsSQL = `
SELECT pc.consumer_group, q.name, count(*)::int,
	(count(*) FILTER (WHERE p.last_seq > pc.last_consumed_seq))::int,
	coalesce(max(extract(epoch FROM coalesce($2::timestamptz, now()) - nx.created_at)), 0)::bigint,
	bool_or(pc.last_consumed_at IS NOT NULL),
	coalesce(g.subscription_mode, ''), g.subscription_timestamp, g.created_at,
	coalesce(sum(greatest(p.last_seq - pc.last_consumed_seq, 0)), 0)::bigint
FROM queen.partition_consumers pc
JOIN queen.partitions p ON p.id = pc.partition_id
JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN LATERAL (SELECT m.created_at FROM queen.messages m
	WHERE p.last_seq > pc.last_consumed_seq AND m.partition_id = p.id AND m.seq > pc.last_consumed_seq
	ORDER BY m.seq LIMIT 1) nx ON true
LEFT JOIN LATERAL (SELECT subscription_mode, subscription_timestamp, created_at FROM queen.consumer_groups_metadata g
	WHERE g.tenant_id = q.tenant_id AND g.consumer_group = pc.consumer_group AND g.queue_name = q.name
	ORDER BY partition_name LIMIT 1) g ON true
WHERE q.tenant_id = $1
GROUP BY pc.consumer_group, q.name, g.subscription_mode, g.subscription_timestamp, g.created_at
ORDER BY 1, 2`

// ListGroups lists the tenant's (group, queue) pairs, by group then queue.
func (s *Store) ListGroups(ctx context.Context, tenant string) ([]GroupSummary, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, listGroupsSQL, tenant, s.dbNow())
	if err != nil {
		return nil, err
	}
	var out []GroupSummary
	for rows.Next() {
		var g GroupSummary
		if err := rows.Scan(&g.Group, &g.Queue, &g.Members, &g.PartitionsWithLag, &g.MaxTimeLagSeconds, &g.Consumed,
			&g.SubscriptionMode, &g.SubscriptionTimestamp, &g.SubscriptionCreatedAt, &g.LagMessages); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// GroupPartition is one cursor of a group, with its lag.
type GroupPartition struct {
	Queue, Partition, PartitionID, WorkerID string
	LastConsumedAt                          *time.Time
	TotalConsumed, OffsetLag                int64
	TimeLagSeconds                          int64 // age of the oldest message past the cursor
	OldestUnconsumedAt                      *time.Time
	LeaseActive                             bool
}

// groupPartitionsSQL lists a group's cursors (all groups when $2 is NULL)
// with the exact count and the age of what lies past each cursor.
const groupPartitionsSQL = `
SELECT q.name, p.name, p.id::text, CASE WHEN pc.lease_expires_at > coalesce($3::timestamptz, now()) THEN coalesce(pc.worker_id, '') ELSE '' END,
	pc.last_consumed_at, pc.total_messages_consumed,
	(SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id AND m.seq > pc.last_consumed_seq),
	o.created_at, coalesce(pc.lease_expires_at > coalesce($3::timestamptz, now()), false), pc.consumer_group,
	coalesce(greatest(extract(epoch FROM coalesce($3::timestamptz, now()) - o.created_at), 0), 0)::bigint
FROM queen.partition_consumers pc
JOIN queen.partitions p ON p.id = pc.partition_id
JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN LATERAL (SELECT m.created_at FROM queen.messages m WHERE m.partition_id = p.id AND m.seq > pc.last_consumed_seq
	ORDER BY m.seq LIMIT 1) o ON true
WHERE q.tenant_id = $1 AND ($2::text IS NULL OR pc.consumer_group = $2)
ORDER BY q.name, p.name`

// GroupPartitions lists the cursors of group (every group when group is
// nil), keyed by group.
func (s *Store) GroupPartitions(ctx context.Context, tenant string, group *string) (map[string][]GroupPartition, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, groupPartitionsSQL, tenant, group, s.dbNow())
	if err != nil {
		return nil, err
	}
	out := map[string][]GroupPartition{}
	for rows.Next() {
		var gp GroupPartition
		var g string
		if err := rows.Scan(&gp.Queue, &gp.Partition, &gp.PartitionID, &gp.WorkerID, &gp.LastConsumedAt, &gp.TotalConsumed,
			&gp.OffsetLag, &gp.OldestUnconsumedAt, &gp.LeaseActive, &g, &gp.TimeLagSeconds); err != nil {
			rows.Close()
			return nil, err
		}
		out[g] = append(out[g], gp)
	}
	return out, rows.Err()
}

// deleteGroupSQL drops a group's cursors (on one queue when $3 is not
// NULL), live leases with them, and, when $4, its subscriptions, so a group
// created again under that name subscribes afresh. It returns the queues
// whose cursors went. The group's watermarks go too (on that queue). It
// touches the queues' statistics rows, so the next incremental count
// recounts them (changedQueuesSQL: a delete leaves no row version behind).
const deleteGroupSQL = `
WITH gone AS (
	DELETE FROM queen.partition_consumers pc USING queen.queues q
	WHERE pc.queue_id = q.id AND q.tenant_id = $1 AND pc.consumer_group = $2 AND ($3::text IS NULL OR q.name = $3)
	RETURNING q.name, q.id
), touched AS (
	UPDATE queen.queue_stats st SET refreshed_at = st.refreshed_at WHERE st.queue_id IN (SELECT id FROM gone)
), meta AS (
	DELETE FROM queen.consumer_groups_metadata g
	WHERE $4::boolean AND g.tenant_id = $1 AND g.consumer_group = $2 AND ($3::text IS NULL OR g.queue_name = $3)
), marks AS (
	DELETE FROM queen.consumer_watermarks w
	WHERE w.tenant_id = $1 AND w.consumer_group = $2 AND ($3::text IS NULL OR w.queue_name = $3)
)
SELECT name FROM gone` // meta and touched run to completion unread, as every data-modifying WITH does

// DeleteGroup deletes a group's cursors (on queue only, when not nil) and,
// when deleteMetadata, its subscriptions. It answers how many cursors went
// and the queues they were on.
func (s *Store) DeleteGroup(ctx context.Context, tenant, group string, queue *string, deleteMetadata bool) (int, []string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, deleteGroupSQL, tenant, group, queue, deleteMetadata)
	if err != nil {
		return 0, nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, nil, err
	}
	seen := map[string]bool{}
	var queues []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			queues = append(queues, n)
		}
	}
	return len(names), queues, nil
}

// seekSQL moves a group's existing cursors on a queue (one partition when
// $4 is not NULL) to the newest message ($5: to end) or to the newest
// message created at or before $6 (none: the start), releasing their
// leases: a consumer still holding one gets "invalid lease" on ack.
const seekSQL = `
UPDATE queen.partition_consumers pc SET
	last_consumed_seq = CASE WHEN $5 THEN p.last_seq
		ELSE coalesce((SELECT max(m.seq) FROM queen.messages m WHERE m.partition_id = p.id AND m.created_at <= $6::timestamptz), 0) END,
	worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, lease_max_seq = 0, batch_size = 0, acked_count = 0,
	batch_retry_count = 0, last_consumed_at = coalesce($7::timestamptz, now())
FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
WHERE pc.partition_id = p.id AND q.tenant_id = $1 AND pc.consumer_group = $2 AND q.name = $3
	AND ($4::text IS NULL OR p.name = $4) AND (NOT $5 OR p.last_seq > 0)
RETURNING p.last_message_at`

// forgetWatermarkSQL deletes group $3's watermark on tenant $1's queue $2.
const forgetWatermarkSQL = `DELETE FROM queen.consumer_watermarks WHERE tenant_id = $1 AND queue_name = $2 AND consumer_group = $3`

// Seek moves a group's cursors on a queue; see seekSQL. It answers how many
// moved and, for one partition, when the message it now stands on was
// stored.
func (s *Store) Seek(ctx context.Context, tenant, group, queue string, partition *string, toEnd bool, to *time.Time) (int, *time.Time, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if !toEnd && partition == nil {
		// A group sent back in time has a backlog again: its watermark
		// is stale (a seek to the end, or of one partition, keeps it).
		if _, err := s.pool.Exec(ctx, forgetWatermarkSQL, tenant, queue, group); err != nil {
			return 0, nil, err
		}
	}
	rows, err := s.pool.Query(ctx, text("seek"), tenant, group, queue, partition, toEnd, to, s.dbNow())
	if err != nil {
		return 0, nil, err
	}
	ats, err := pgx.CollectRows(rows, pgx.RowTo[*time.Time])
	if err != nil || len(ats) == 0 {
		return 0, nil, err
	}
	return len(ats), ats[0], nil
}

// partitionExistsSQL tells whether tenant $1's queue $2 has partition $3.
const partitionExistsSQL = `SELECT EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND q.name = $2 AND p.name = $3)`

// PartitionExists reports whether the tenant's queue has that partition.
func (s *Store) PartitionExists(ctx context.Context, tenant, queue, partition string) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ok bool
	err := s.pool.QueryRow(ctx, partitionExistsSQL, tenant, queue, partition).Scan(&ok)
	return ok, err
}

// setSubscriptionSQL moves group $2's subscription instant to $3 (not mode
// all) and drops its watermarks.
const setSubscriptionSQL = `WITH marks AS (DELETE FROM queen.consumer_watermarks WHERE tenant_id = $1 AND consumer_group = $2),
		moved AS (UPDATE queen.consumer_groups_metadata SET subscription_timestamp = $3
			WHERE tenant_id = $1 AND consumer_group = $2 AND subscription_mode <> 'all' RETURNING 1)
		SELECT count(*) FROM moved`

// SetSubscription sets the subscription instant of every subscription the
// group has, and drops its watermarks. Cursors already placed do not move.
func (s *Store) SetSubscription(ctx context.Context, tenant, group string, at time.Time) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := s.pool.QueryRow(ctx, setSubscriptionSQL, tenant, group, at).Scan(&n)
	return n, err
}
