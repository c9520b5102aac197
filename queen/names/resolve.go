package names

import (
	"context"

	"github.com/queen-go/queen/queen/store"
)

// partitionIDs resolves (queue, partition) names of one tenant to partition
// ids, from the cache when it can, else through resolvePartitions (which
// creates queues and partitions that do not exist yet), caching what it
// answers.
func (n *Names) partitionIDs(ctx context.Context, tenant string, keys []partKey) (map[partKey]string, error) {
	out := make(map[partKey]string, len(keys))
	var missing []partKey
	for _, k := range keys {
		if id, ok := n.parts.Get(partName{tenant: tenant, queue: k.Queue, partition: k.Partition}); ok {
			out[k] = id
		} else {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	found, err := n.resolvePartitions(ctx, tenant, missing)
	if err != nil {
		return nil, err
	}
	for k, id := range found {
		out[k] = id
		n.parts.Put(partName{tenant: tenant, queue: k.Queue, partition: k.Partition}, id)
	}
	return out, nil
}

// PushPartitions resolves the items' partitions (queues and partitions are
// created on first use): pids[i] is items[i]'s, from which the write
// policy makes the rows the append stores (queen/writes' BuildRows). It
// neither combines nor retries: a caller runs it under Retry.
func (n *Names) PushPartitions(ctx context.Context, tenant string, items []store.PushItem) ([]string, error) {
	keys := make([]partKey, len(items))
	for i, it := range items {
		keys[i] = partKey{Queue: it.Queue, Partition: it.Partition}
		if keys[i].Partition == "" {
			keys[i].Partition = store.DefaultPartition
		}
	}
	ids, err := n.partitionIDs(ctx, tenant, keys)
	if err != nil {
		return nil, err
	}
	pids := make([]string, len(items))
	for i, k := range keys {
		pids[i] = ids[k]
	}
	return pids, nil
}

// TimerRows resolves the claimed timers' partitions (queues and
// partitions are created on first use, as for any push: harmless if the
// fire rolls back) and makes one row per timer, in order
// (store.FiredRow). A caller runs it under Retry.
func (n *Names) TimerRows(ctx context.Context, claimed []store.ClaimedTimer) ([]store.AppendRow, error) {
	rows := make([]store.AppendRow, len(claimed))
	byTenant := map[string][]int{}
	for i, c := range claimed {
		byTenant[c.Tenant] = append(byTenant[c.Tenant], i)
	}
	for tenant, idx := range byTenant {
		keys := make([]partKey, len(idx))
		for j, i := range idx {
			keys[j] = partKey{Queue: claimed[i].Queue, Partition: claimed[i].Partition}
		}
		pids, err := n.partitionIDs(ctx, tenant, keys)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			rows[i] = store.FiredRow(claimed[i], pids[keys[j]])
		}
	}
	return rows, nil
}
