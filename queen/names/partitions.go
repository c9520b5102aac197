package names

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/store"
)

// partKey names one partition of a tenant's queue.
type partKey struct{ Queue, Partition string }

// resolvePartitions maps the tenant's partition names to ids, creating the
// queues and partitions that do not exist yet: store.LookupPartitions,
// then createPartitions for the missing and LookupPartitions again. It
// reads and writes no cache (partitionIDs and Configure do). A name
// deleted again between its create and the second lookup is an error: the
// caller retries.
func (n *Names) resolvePartitions(ctx context.Context, tenant string, keys []partKey) (map[partKey]string, error) {
	out := make(map[partKey]string, len(keys))
	if err := n.lookupInto(ctx, tenant, keys, out); err != nil {
		return nil, err
	}
	var create []partKey
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			create = append(create, k)
		}
	}
	if len(create) == 0 {
		return out, nil
	}
	if err := n.createPartitions(ctx, tenant, create); err != nil {
		return nil, err
	}
	if err := n.lookupInto(ctx, tenant, create, out); err != nil {
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

// lookupInto runs store.LookupPartitions for keys, on the pool within the
// store's bound, and puts what it finds in out.
func (n *Names) lookupInto(ctx context.Context, tenant string, keys []partKey, out map[partKey]string) error {
	p := store.LookupPartitionsParams{Tenant: tenant}
	for _, k := range keys {
		p.Queues = append(p.Queues, k.Queue)
		p.Partitions = append(p.Partitions, k.Partition)
	}
	ctx, cancel := n.st.Bound(ctx)
	defer cancel()
	rows, err := n.st.LookupPartitions(ctx, n.st.Pool(), p)
	for _, r := range rows {
		out[partKey{Queue: r.Queue, Partition: r.Partition}] = r.ID
	}
	return err
}

// createPartitions creates the tenant's queues and partitions keys name
// that do not exist yet (store.CreateQueues, store.CreatePartitions), and
// the new partitions' cursor rows (store.CreateConsumers), in one short
// transaction. Names are sorted so that two brokers creating the same set
// wait on each other in one order. keys is sorted in place.
func (n *Names) createPartitions(ctx context.Context, tenant string, keys []partKey) error {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Queue != keys[j].Queue {
			return keys[i].Queue < keys[j].Queue
		}
		return keys[i].Partition < keys[j].Partition
	})
	qp, pp := n.createParams(tenant, keys)
	ctx, cancel := n.st.Bound(ctx)
	defer cancel()
	return pgx.BeginFunc(ctx, n.st.Pool(), func(tx pgx.Tx) error {
		if err := n.st.CreateQueues(ctx, tx, qp); err != nil {
			return fmt.Errorf("create queues: %w", err)
		}
		created, err := n.st.CreatePartitions(ctx, tx, pp)
		if err != nil {
			return fmt.Errorf("create partitions: %w", err)
		}
		// Database time is read even when nothing was created, as the
		// store did when this composition was its own: the simulator's
		// lockstep hook fires on a read.
		cp := store.CreateConsumersParams{Tenant: tenant, Now: n.st.DBNow()}
		if len(created) == 0 {
			return nil
		}
		for _, c := range created {
			cp.PartitionIDs = append(cp.PartitionIDs, c.ID)
			cp.QueueIDs = append(cp.QueueIDs, c.QueueID)
		}
		if err := n.st.CreateConsumers(ctx, tx, cp); err != nil {
			return fmt.Errorf("create cursors: %w", err)
		}
		return nil
	})
}

// createParams describes the sorted keys' queues (each once, with the
// default options and the namespace and task its dotted name gives) and
// partitions, minting their ids in key order. It reads database time
// (store.DBNow) for both before the transaction begins, as the sim's
// lockstep client counts its reads.
func (n *Names) createParams(tenant string, keys []partKey) (store.CreateQueuesParams, store.CreatePartitionsParams) {
	d := store.DefaultQueueOptions()
	qp := store.CreateQueuesParams{Tenant: tenant, LeaseTime: d.LeaseTime, RetryLimit: d.RetryLimit,
		RetryDelay: d.RetryDelay, TTL: d.TTL, Now: n.st.DBNow()}
	pp := store.CreatePartitionsParams{Tenant: tenant, Now: n.st.DBNow()}
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k.Queue] {
			seen[k.Queue] = true
			ns, task := store.SplitName(k.Queue)
			qp.IDs = append(qp.IDs, n.st.NewID())
			qp.Names = append(qp.Names, k.Queue)
			qp.Namespaces = append(qp.Namespaces, ns)
			qp.Tasks = append(qp.Tasks, task)
		}
		pp.IDs = append(pp.IDs, n.st.NewID())
		pp.Queues = append(pp.Queues, k.Queue)
		pp.Partitions = append(pp.Partitions, k.Partition)
	}
	return qp, pp
}
