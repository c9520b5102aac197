package store

import (
	"context"
)

// Ids that name nothing. A caller may hold a partition id or a queue id
// that another broker made stale (it deleted the queue, perhaps created it
// again under its name, or deleted a group's cursors): the statements here
// say so instead of guessing. An append into a gone partition writes
// nothing for that row and answers a *GoneError naming it; a cached
// subscription is checked with SubscriptionLive. Forgetting the stale ids
// and running once more is queen/names' (names.Retry).

// GoneError is a statement's answer when partition ids it was given name
// rows that are gone (deleted since the caller resolved them): nothing was
// written for those rows. Err is the error the caller reports for it.
type GoneError struct {
	// Partitions are the ids found gone.
	Partitions map[string]bool
	Err        error
}

func (e *GoneError) Error() string { return e.Err.Error() }

// Unwrap lets IsRollback and RollbackReason see the statement's own error.
func (e *GoneError) Unwrap() error { return e.Err }

// subscriptionLiveSQL tells whether a cached subscription still holds: its
// queue id names a queue (not one deleted, perhaps created again under its
// name with another id) and the group has a cursor on it, unless the queue
// has no partition yet. Index probes only. A group deleted while it keeps
// its subscription, then given a cursor in a partition created since, is
// not seen: that costs what a stale entry cost before, until its ttl.
const subscriptionLiveSQL = `
SELECT EXISTS (SELECT 1 FROM queen.queues q WHERE q.id = $1 AND (
	EXISTS (SELECT 1 FROM queen.partition_consumers pc WHERE pc.queue_id = $1 AND pc.consumer_group = $2)
	OR NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.queue_id = $1)))`

// SubscriptionLiveParams are subscriptionLiveSQL's arguments, $1 and $2.
type SubscriptionLiveParams struct {
	QueueID, Group string
}

// SubscriptionLive runs subscriptionLiveSQL: whether a cached subscription
// still holds.
func (s *Store) SubscriptionLive(ctx context.Context, p SubscriptionLiveParams) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var live bool
	err := s.pool.QueryRow(ctx, text("subscription.live"), argsOf(p)...).Scan(&live)
	return live, err
}

// GoneIDs is the set of partition ids whose rows an append found gone
// (out[i] is rows[i]'s outcome): a *GoneError's Partitions.
func GoneIDs(rows []AppendRow, out []AppendOut) map[string]bool {
	var gone map[string]bool
	for i, o := range out {
		if o.gone {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[rows[i].pid] = true
		}
	}
	return gone
}
