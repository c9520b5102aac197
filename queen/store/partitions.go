package store

import (
	"context"
	"time"
)

// lookupPartitionsSQL maps (queue, partition) names of one tenant to
// partition ids. Missing names are simply absent from the result.
const lookupPartitionsSQL = `
SELECT k.qn, k.pn, p.id::text
FROM unnest($2::text[], $3::text[]) AS k(qn, pn)
JOIN queen.queues q ON q.tenant_id = $1 AND q.name = k.qn
JOIN queen.partitions p ON p.queue_id = q.id AND p.name = k.pn`

// LookupPartitionsParams are lookupPartitionsSQL's arguments, $1 to $3:
// Queues[i] and Partitions[i] name one partition.
type LookupPartitionsParams struct {
	Tenant     string
	Queues     []string
	Partitions []string
}

// createQueuesSQL creates missing queues with default options. DO NOTHING
// rather than an upsert: an existing queue's row is never locked by a push.
const createQueuesSQL = `
INSERT INTO queen.queues (id, tenant_id, name, namespace, task, lease_time, retry_limit, retry_delay, ttl, created_at)
SELECT v.id, $1, v.name, nullif(v.ns, ''), nullif(v.task, ''), $6, $7, $8, $9, coalesce($10::timestamptz, now())
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[]) AS v(id, name, ns, task)
ON CONFLICT (tenant_id, name) DO NOTHING`

// CreateQueuesParams are createQueuesSQL's arguments, $1 to $10: IDs[i],
// Names[i], Namespaces[i] and Tasks[i] describe one queue, created with
// the options given. Now is DBNow, read by the caller when it builds them.
type CreateQueuesParams struct {
	Tenant                                 string
	IDs, Names, Namespaces, Tasks          []string
	LeaseTime, RetryLimit, RetryDelay, TTL int
	Now                                    *time.Time
}

// createPartitionsSQL creates missing partitions and returns the ones this
// statement created. A new partition takes its queue row's epoch (the
// fence, fence.go), frozen too if the queue is, as its cursor rows do. It
// reads that epoch under FOR SHARE of the queue row, which conflicts with a
// freeze's FOR UPDATE (fenceLockSQL): a creation that waited for a freeze
// reads the row the freeze rewrote (FOR KEY SHARE, what the foreign key
// takes, would let it read the old epoch: a freeze changes no key).
//
// Invariant (every subscribed group sees every partition): the insert takes
// a KEY SHARE lock on the queue row through the foreign key, and a group's
// subscription holds that row FOR UPDATE (subscribeSQL). So either the
// subscription committed first and createConsumersSQL, a later statement
// of this transaction, sees it; or this transaction committed first and the
// subscription's cursor insert, a later statement, sees the partition.
// (FOR SHARE, taken first, conflicts with the subscription's lock too.)
const createPartitionsSQL = `
INSERT INTO queen.partitions (id, queue_id, name, created_at, last_activity, epoch)
SELECT v.id, q.id, v.pn, coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()), q.epoch
FROM unnest($2::uuid[], $3::text[], $4::text[]) AS v(id, qn, pn)
JOIN queen.queues q ON q.tenant_id = $1 AND q.name = v.qn
FOR SHARE OF q
ON CONFLICT (queue_id, name) DO NOTHING
RETURNING id::text, queue_id::text`

// CreatePartitionsParams are createPartitionsSQL's arguments, $1 to $5:
// IDs[i], Queues[i] and Partitions[i] describe one partition. Now is DBNow,
// read by the caller when it builds them.
type CreatePartitionsParams struct {
	Tenant                  string
	IDs, Queues, Partitions []string
	Now                     *time.Time
}

// createConsumersSQL gives each new partition a cursor row for every group
// subscribed to its queue. A new partition's messages are all newer than any
// subscription, so every cursor starts at the beginning. The queue row's
// epoch is read FOR SHARE, as createPartitionsSQL reads it.
const createConsumersSQL = `
INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, created_at, epoch)
SELECT v.pid, v.qid, g.consumer_group, coalesce($4::timestamptz, now()), q.epoch
FROM unnest($2::uuid[], $3::uuid[]) AS v(pid, qid)
JOIN queen.queues q ON q.id = v.qid
JOIN queen.consumer_groups_metadata g ON g.tenant_id = $1 AND g.queue_name = q.name
FOR SHARE OF q
ON CONFLICT DO NOTHING`

// CreateConsumersParams are createConsumersSQL's arguments, $1 to $4:
// PartitionIDs[i] is a new partition of the queue QueueIDs[i]. Now is
// DBNow, read by the caller when it builds them.
type CreateConsumersParams struct {
	Tenant       string
	PartitionIDs []string
	QueueIDs     []string
	Now          *time.Time
}

// PartitionRow is a partition LookupPartitions found: its names and id.
type PartitionRow struct{ Queue, Partition, ID string }

// LookupPartitions runs lookupPartitionsSQL on db: the ids of the named
// partitions that exist; a missing name is simply absent.
func (s *Store) LookupPartitions(ctx context.Context, db Executor, p LookupPartitionsParams) ([]PartitionRow, error) {
	rows, err := db.Query(ctx, text("partitions.lookup"), argsOf(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PartitionRow
	for rows.Next() {
		var r PartitionRow
		if err := rows.Scan(&r.Queue, &r.Partition, &r.ID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// CreateQueues runs createQueuesSQL on db: the queues that do not exist
// yet are created, the others left as they are (and unlocked).
func (s *Store) CreateQueues(ctx context.Context, db Executor, p CreateQueuesParams) error {
	_, err := db.Exec(ctx, text("queues.create"), argsOf(p)...)
	return err
}

// CreatedPartition is a partition CreatePartitions created: its id and
// its queue's.
type CreatedPartition struct{ ID, QueueID string }

// CreatePartitions runs createPartitionsSQL on db and answers the
// partitions this statement created (not those that existed). Their
// cursor rows are CreateConsumers', a later statement of the same
// transaction (createPartitionsSQL says why).
func (s *Store) CreatePartitions(ctx context.Context, db Executor, p CreatePartitionsParams) ([]CreatedPartition, error) {
	rows, err := db.Query(ctx, text("partitions.create"), argsOf(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []CreatedPartition
	for rows.Next() {
		var c CreatedPartition
		if err := rows.Scan(&c.ID, &c.QueueID); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CreateConsumers runs createConsumersSQL on db: the new partitions'
// cursor rows, one for each group subscribed to their queue.
func (s *Store) CreateConsumers(ctx context.Context, db Executor, p CreateConsumersParams) error {
	_, err := db.Exec(ctx, text("consumers.create"), argsOf(p)...)
	return err
}
