package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
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

// createQueuesParams are createQueuesSQL's arguments, $1 to $10.
type createQueuesParams struct {
	Tenant                                 string
	IDs, Names, Namespaces, Tasks          []string
	LeaseTime, RetryLimit, RetryDelay, TTL int
	Now                                    *time.Time
}

// createPartitionsSQL creates missing partitions and returns the ones this
// statement created.
//
// Invariant (every subscribed group sees every partition): the insert takes
// a KEY SHARE lock on the queue row through the foreign key, and a group's
// subscription holds that row FOR UPDATE (subscribeSQL). So either the
// subscription committed first and createConsumersSQL, a later statement
// of this transaction, sees it; or this transaction committed first and the
// subscription's cursor insert, a later statement, sees the partition.
const createPartitionsSQL = `
INSERT INTO queen.partitions (id, queue_id, name, created_at, last_activity)
SELECT v.id, q.id, v.pn, coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now())
FROM unnest($2::uuid[], $3::text[], $4::text[]) AS v(id, qn, pn)
JOIN queen.queues q ON q.tenant_id = $1 AND q.name = v.qn
ON CONFLICT (queue_id, name) DO NOTHING
RETURNING id::text, queue_id::text`

// createPartitionsParams are createPartitionsSQL's arguments, $1 to $5.
type createPartitionsParams struct {
	Tenant                  string
	IDs, Queues, Partitions []string
	Now                     *time.Time
}

// createConsumersSQL gives each new partition a cursor row for every group
// subscribed to its queue. A new partition's messages are all newer than any
// subscription, so every cursor starts at the beginning.
const createConsumersSQL = `
INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, created_at)
SELECT v.pid, v.qid, g.consumer_group, coalesce($4::timestamptz, now())
FROM unnest($2::uuid[], $3::uuid[]) AS v(pid, qid)
JOIN queen.queues q ON q.id = v.qid
JOIN queen.consumer_groups_metadata g ON g.tenant_id = $1 AND g.queue_name = q.name
ON CONFLICT DO NOTHING`

// createConsumersParams are createConsumersSQL's arguments, $1 to $4.
type createConsumersParams struct {
	Tenant       string
	PartitionIDs []string
	QueueIDs     []string
	Now          *time.Time
}

// PartitionKey names one partition of a tenant's queue.
type PartitionKey struct{ Queue, Partition string }

// PartitionRow is a partition LookupPartitions found: its names and id.
type PartitionRow struct{ Queue, Partition, ID string }

// LookupPartitions runs lookupPartitionsSQL: the ids of the named
// partitions that exist; a missing name is simply absent.
func (s *Store) LookupPartitions(ctx context.Context, p LookupPartitionsParams) ([]PartitionRow, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, text("partitions.lookup"), argsOf(p)...)
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

// ResolvePartitions maps the tenant's partition names to ids, creating the
// queues and partitions that do not exist yet: LookupPartitions, then
// CreatePartitions for the missing and LookupPartitions again. It caches
// nothing (queen/names caches its answers). A name deleted again between
// its create and the second lookup is an error: the caller retries.
func (s *Store) ResolvePartitions(ctx context.Context, tenant string, keys []PartitionKey) (map[PartitionKey]string, error) {
	out := make(map[PartitionKey]string, len(keys))
	if err := s.lookupInto(ctx, tenant, keys, out); err != nil {
		return nil, err
	}
	var create []PartitionKey
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			create = append(create, k)
		}
	}
	if len(create) == 0 {
		return out, nil
	}
	if err := s.CreatePartitions(ctx, tenant, create); err != nil {
		return nil, err
	}
	if err := s.lookupInto(ctx, tenant, create, out); err != nil {
		return nil, err
	}
	for _, k := range create {
		if _, ok := out[k]; !ok {
			// Deleted again between create and lookup: let the caller retry.
			return nil, fmt.Errorf("partition %s/%s vanished while being created", k.Queue, k.Partition)
		}
	}
	return out, nil
}

// lookupInto runs LookupPartitions for keys and puts what it finds in out.
func (s *Store) lookupInto(ctx context.Context, tenant string, keys []PartitionKey, out map[PartitionKey]string) error {
	p := LookupPartitionsParams{Tenant: tenant}
	for _, k := range keys {
		p.Queues = append(p.Queues, k.Queue)
		p.Partitions = append(p.Partitions, k.Partition)
	}
	rows, err := s.LookupPartitions(ctx, p)
	for _, r := range rows {
		out[PartitionKey{Queue: r.Queue, Partition: r.Partition}] = r.ID
	}
	return err
}

// CreatePartitions creates the tenant's queues and partitions keys name
// that do not exist yet (createQueuesSQL, createPartitionsSQL), and the new
// partitions' cursor rows (createConsumersSQL), in one short transaction.
// Names are sorted so that two brokers creating the same set wait on each
// other in one order. keys is sorted in place.
func (s *Store) CreatePartitions(ctx context.Context, tenant string, keys []PartitionKey) error {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Queue != keys[j].Queue {
			return keys[i].Queue < keys[j].Queue
		}
		return keys[i].Partition < keys[j].Partition
	})
	d := DefaultQueueOptions()
	qp := createQueuesParams{Tenant: tenant, LeaseTime: d.LeaseTime, RetryLimit: d.RetryLimit, RetryDelay: d.RetryDelay,
		TTL: d.TTL, Now: s.dbNow()}
	pp := createPartitionsParams{Tenant: tenant, Now: s.dbNow()}
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k.Queue] {
			seen[k.Queue] = true
			ns, task := splitName(k.Queue)
			qp.IDs = append(qp.IDs, s.ids.New())
			qp.Names = append(qp.Names, k.Queue)
			qp.Namespaces = append(qp.Namespaces, ns)
			qp.Tasks = append(qp.Tasks, task)
		}
		pp.IDs = append(pp.IDs, s.ids.New())
		pp.Queues = append(pp.Queues, k.Queue)
		pp.Partitions = append(pp.Partitions, k.Partition)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, text("queues.create"), argsOf(qp)...); err != nil {
			return fmt.Errorf("create queues: %w", err)
		}
		rows, err := tx.Query(ctx, text("partitions.create"), argsOf(pp)...)
		if err != nil {
			return fmt.Errorf("create partitions: %w", err)
		}
		cp := createConsumersParams{Tenant: tenant, Now: s.dbNow()}
		for rows.Next() {
			var pid, qid string
			if err := rows.Scan(&pid, &qid); err != nil {
				return err
			}
			cp.PartitionIDs = append(cp.PartitionIDs, pid)
			cp.QueueIDs = append(cp.QueueIDs, qid)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("create partitions: %w", err)
		}
		if len(cp.PartitionIDs) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, text("consumers.create"), argsOf(cp)...); err != nil {
			return fmt.Errorf("create cursors: %w", err)
		}
		return nil
	})
}
