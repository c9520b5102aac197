package httpapi

import (
	"context"
	"sync"
)

// seenPartitions remembers, per tenant and partition, the partition's queue
// and the shard locate routed it to by that queue's placement, so that an
// ack of a partition seen before asks the placement (the broker's cache)
// instead of every shard. Without it each ack request ran one statement
// per shard (PartitionsHere), and a shard that was slow or held a lock on
// its partitions stalled the acks of every other shard's queues.
//
// A partition belongs to one queue for life (its id is never reused), so
// the queue is safe to keep; the shard is only trusted while the queue's
// placement still names it. A move changes the placement (or, for a broker
// whose placement is stale, the fence answers moved and the placement is
// invalidated), and the next ack asks every shard again. Bounded: cleared
// when it reaches seenLimit entries.
type seenPartitions struct {
	mu sync.Mutex
	m  map[seenKey]seenAt
}

// seenLimit bounds seenPartitions (about 100 bytes an entry).
const seenLimit = 100_000

type seenKey struct{ tenant, partition string }

type seenAt struct{ queue, shard string }

// get is the partition's remembered queue and shard.
func (c *seenPartitions) get(tenant, pid string) (seenAt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[seenKey{tenant, pid}]
	return at, ok
}

// put remembers the partition's queue and shard.
func (c *seenPartitions) put(tenant, pid string, at seenAt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= seenLimit {
		c.m = make(map[seenKey]seenAt)
	}
	c.m[seenKey{tenant, pid}] = at
}

// locateSeen is locate from seenPartitions alone: every partition seen
// before, each on the shard its queue's placement still names, all on one
// shard. ok false sends the caller to ask every shard.
func (rt *router) locateSeen(ctx context.Context, tenant string, pids []string) (*plane, map[string]partitionAt, bool) {
	var pl *plane
	at := make(map[string]partitionAt, len(pids))
	for _, pid := range pids {
		seen, ok := rt.seen.get(tenant, pid)
		if !ok {
			return nil, nil, false
		}
		p, found, err := rt.place.Lookup(ctx, tenant, seen.queue)
		if err != nil || !found || p.Shard != seen.shard || (pl != nil && rt.planes[p.Shard] != pl) {
			return nil, nil, false
		}
		pl = rt.planes[p.Shard]
		at[pid] = partitionAt{queue: seen.queue, Epoch: p.Epoch}
	}
	return pl, at, pl != nil
}

// remember keeps what locate found of each partition served by pl, the
// shard its queue's placement names (an unplaced queue's, or one served
// elsewhere than placed, is asked of every shard each time).
func (rt *router) remember(ctx context.Context, tenant string, pl *plane, at map[string]partitionAt) {
	for pid, where := range at {
		p, found, err := rt.place.Lookup(ctx, tenant, where.queue)
		if err == nil && found && rt.planes[p.Shard] == pl {
			rt.seen.put(tenant, pid, seenAt{queue: where.queue, shard: p.Shard})
		}
	}
}
