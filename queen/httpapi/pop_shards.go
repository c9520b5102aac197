package httpapi

import (
	"cmp"
	"context"
	"net/http"
	"slices"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// Pops by namespace or task with shards. Each try lists the tenant's
// matching queues on every shard (fanOut: a shard that cannot be read
// fails the pop, 503 naming it, rather than pop the others only), orders
// them as one database would (priority first, then name), and pops each in
// turn on the shard its placement names, at the placement's epoch, exactly
// as GET /api/v1/pop/queue/{queue} routes: a queue listed on two shards (a
// move's copy, or the tombstone it leaves) is tried once, where it is
// placed. The first queue that has messages answers.
//
// The wait is the one a pop without shards has: the pop parks on the
// tenant-wide wake key, which every push through this broker (and every
// peer's hint) notifies whatever the queue's shard, and between wakes
// re-tries every shard on the back-off interval (POP_WAIT_*), the floor
// under a lost wake.

// shardClaim is where a try across shards claimed: its plane and lease,
// so the claim is delivered, completed or given back on that shard.
type shardClaim struct {
	pl    *plane
	lease string
}

// discoverSharded is popDiscover with shards.
func (s *Server) discoverSharded(w http.ResponseWriter, r *http.Request, p popParams, namespace, task string) {
	at := &shardClaim{}
	try := func(ctx context.Context) (consume.PopResult, error) {
		res, pl, err := s.discoverOnce(ctx, p.req, namespace, task)
		at.pl, at.lease = pl, res.LeaseID
		return res, err
	}
	_ = s.longPollAt(w, r, s.router.order[0], p, s.admitted(r, try), at)
}

// discoverOnce is one try of a pop by namespace and/or task across the
// shards: the claim and the plane that made it (nil when nothing was
// claimed).
func (s *Server) discoverOnce(ctx context.Context, req consume.PopRequest, namespace, task string) (consume.PopResult, *plane, error) {
	queues, err := s.discoverQueues(ctx, req.Tenant, namespace, task)
	if err != nil {
		return consume.PopResult{}, nil, err
	}
	for _, name := range queues {
		one := req
		one.Queue = name
		res, pl, err := s.popPlaced(ctx, one)
		if err != nil || len(res.Messages) > 0 {
			return res, pl, err
		}
	}
	return consume.PopResult{}, nil, nil
}

// discoverQueues are the names of tenant's queues of namespace and task
// (empty: any) on every shard, each once, highest priority first, then by
// name (store.QueuesFor's order).
func (s *Server) discoverQueues(ctx context.Context, tenant, namespace, task string) ([]string, error) {
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]store.Queue, error) {
		return pl.store.QueueRows(ctx, tenant, store.QueueFilter{Namespace: namespace, Task: task})
	})
	if err != nil {
		return nil, err
	}
	all := slices.Concat(per...)
	slices.SortStableFunc(all, func(a, b store.Queue) int {
		return cmp.Or(cmp.Compare(b.Options.Priority, a.Options.Priority), cmp.Compare(a.Name, b.Name))
	})
	names := make([]string, 0, len(all))
	seen := make(map[string]bool, len(all))
	for _, q := range all {
		if !seen[q.Name] {
			seen[q.Name] = true
			names = append(names, q.Name)
		}
	}
	return names, nil
}

// popPlaced claims from req.Queue on the shard its placement names, at the
// placement's epoch. A queue that moved is routed again once (as pop's
// popAgain); one still moving is passed over by this try (nothing
// claimed): the next try, or the client's next pop, routes it anew.
func (s *Server) popPlaced(ctx context.Context, req consume.PopRequest) (consume.PopResult, *plane, error) {
	pl, epoch, err := s.queuePlane(ctx, req.Tenant, "", req.Queue, false)
	if err != nil {
		return consume.PopResult{}, nil, err
	}
	req.Epoch = epoch
	res, err := pl.consumer.One(req)(ctx)
	if !s.movedOnce(err, req.Tenant, func() []string { return []string{req.Queue} }) {
		return res, pl, err
	}
	again, epoch, err := s.queuePlane(ctx, req.Tenant, "", req.Queue, false)
	if err != nil || (again == pl && epoch == req.Epoch) {
		return consume.PopResult{}, nil, err
	}
	req.Epoch = epoch
	res, err = again.consumer.One(req)(ctx)
	if store.Moved(err) {
		return consume.PopResult{}, nil, nil
	}
	return res, again, err
}
