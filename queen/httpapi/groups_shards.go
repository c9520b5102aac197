package httpapi

import (
	"context"
	"time"
)

// The consumer groups' writes with shards. A group's cursors and
// subscriptions live on the shards of the queues it consumes: a write
// naming a queue runs on that queue's shard (planeFor); one naming the
// group alone runs on every shard (fanOut). These statements carry no
// epoch (the fence does not check them: SPEC "Not yet"). A fan-out failing
// on one shard answers 503 naming it, the other shards' part written:
// each of these writes is idempotent, so the client's retry completes it.
// Without shards each is the one statement on the one store it always was.

// deleteGroupOn deletes group's cursors (on queue only, when not nil)
// and, when meta, its subscriptions: on queue's shard, or on every shard.
// It answers how many cursors went and the queues they were on, and lets
// the next empty pops write the watermarks the delete took.
func (s *Server) deleteGroupOn(ctx context.Context, tenant, group string, queue *string, meta bool) (int, []string, error) {
	if queue != nil {
		pl, err := s.planeFor(ctx, tenant, "", *queue, false)
		if err != nil {
			return 0, nil, err
		}
		n, queues, err := pl.names.DeleteGroup(ctx, tenant, group, queue, meta)
		if err == nil {
			pl.consumer.ForgetWatermarks(tenant, *queue, group)
		}
		return n, queues, err
	}
	type deleted struct {
		n      int
		queues []string
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) (deleted, error) {
		n, queues, err := pl.names.DeleteGroup(ctx, tenant, group, nil, meta)
		pl.consumer.ForgetWatermarks(tenant, "", group)
		return deleted{n, queues}, err
	})
	if err != nil {
		return 0, nil, err
	}
	var n int
	var queues []string
	for _, d := range per {
		n, queues = n+d.n, append(queues, d.queues...)
	}
	return n, queues, nil
}

// setSubscriptionOn sets the subscription instant of every subscription
// of group, on every shard, and lets the next empty pops write the
// watermarks the change dropped. It answers the rows updated, summed.
func (s *Server) setSubscriptionOn(ctx context.Context, tenant, group string, at time.Time) (int64, error) {
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) (int64, error) {
		n, err := pl.store.SetSubscription(ctx, tenant, group, at)
		pl.consumer.ForgetWatermarks(tenant, "", group) // the change dropped the group's watermarks
		return n, err
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, v := range per {
		n += v
	}
	return n, nil
}
