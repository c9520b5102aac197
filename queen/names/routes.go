package names

import (
	"context"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/store"
)

// The statements that change what a name means: each runs its store
// statement and then drops or records what this cache holds of it.

// ConfigureResult echoes the stored configuration.
type ConfigureResult struct {
	Queue              store.Queue
	DefaultPartitionID string
}

// Configure runs store.ConfigureQueue, forgets the write policy's
// encryption hint of the queue once its row committed, makes sure the
// queue's Default partition exists (resolvePartitions, past the cache)
// and, once the queue's row is written, forgets the queue's entries and
// caches its Default partition.
func (n *Names) Configure(ctx context.Context, in store.ConfigureInput) (ConfigureResult, error) {
	q, err := n.st.ConfigureQueue(ctx, in)
	if err == nil {
		n.hints.ForgetSealHint(in.Tenant, in.Queue)
	}
	res := ConfigureResult{Queue: q}
	if q.ID == "" {
		return res, err // nothing was written
	}
	key := partKey{Queue: in.Queue, Partition: store.DefaultPartition}
	var pids map[partKey]string
	if err == nil {
		pids, err = n.resolvePartitions(ctx, in.Tenant, []partKey{key})
	}
	n.forgetNames(in.Tenant, in.Queue)
	if err != nil {
		return res, err
	}
	res.DefaultPartitionID = pids[key]
	n.parts.Put(partName{tenant: in.Tenant, queue: in.Queue, partition: store.DefaultPartition}, res.DefaultPartitionID)
	return res, nil
}

// DeleteQueue runs store.DeleteQueue and forgets the queue, whether or not
// the statement failed (it may have run).
func (n *Names) DeleteQueue(ctx context.Context, tenant, name string) (bool, error) {
	existed, err := n.st.DeleteQueue(ctx, tenant, name)
	if !canary.On("delete-keeps-cache") {
		n.ForgetQueue(tenant, name)
	}
	return existed, err
}

// DeleteGroup runs store.DeleteGroup and forgets the group's subscription
// to each queue its cursors were deleted on (and to queue, when given).
func (n *Names) DeleteGroup(ctx context.Context, tenant, group string, queue *string, deleteMetadata bool) (int, []string, error) {
	count, queues, err := n.st.DeleteGroup(ctx, tenant, group, queue, deleteMetadata)
	if err != nil {
		return count, queues, err
	}
	for _, q := range queues {
		n.forgetGroup(tenant, q, group)
	}
	if queue != nil {
		n.forgetGroup(tenant, *queue, group)
	}
	return count, queues, nil
}

// Subscribe runs store.Subscribe and caches the subscription: the group's
// next pops of the queue on this broker skip it.
func (n *Names) Subscribe(ctx context.Context, p store.SubscribeParams) (string, error) {
	qid, err := n.st.Subscribe(ctx, p)
	if err != nil {
		return "", err
	}
	n.subs.Put(subName{tenant: p.Tenant, queue: p.Queue, group: p.Group}, qid)
	return qid, nil
}
