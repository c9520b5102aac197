package store

import (
	"context"
	"errors"
)

// Stale cached ids. The cache (cache.go) maps names to ids for ttl; another
// broker can delete what an id names (a queue deleted, and perhaps created
// again under its name, or a group's cursors deleted) without this broker
// hearing of it (no mesh, or a lost frame). Every path that resolves an id
// through the cache runs under freshRetry: when the path finds an id it used
// names nothing, it answers a *staleIDs naming the entries to drop, and
// freshRetry forgets them and runs the path once more, resolving the names
// again. A second stale answer is a real race (deleted again meanwhile) and
// goes to the caller as the path's own error. The path here: RetryMessage
// (DLQ); queen/pushpath's push, queen/txn, queen/streams, queen/consume's
// pop and queen/sweeper's timer fire run theirs through the exported
// FreshRetry.
//
// Before, only a plain push did this; a transaction or a streams cycle into
// a queue recreated elsewhere failed "a partition was deleted during the
// transaction" until the entry expired (60 s), a timer into it waited out
// its claim's lease (30 s) and a group deleted elsewhere popped nothing
// until the entry expired.

// staleIDs is a path's answer when ids it had from the cache name rows that
// are gone: the partition ids and the subscription to forget. err is what
// the caller gets when the retry is stale too; nil means the stale
// attempt's result stands (an empty pop is a correct answer).
type staleIDs struct {
	partitions map[string]bool
	sub        *subName
	err        error
}

func (e *staleIDs) Error() string {
	if e.err == nil {
		return "store: cached ids name deleted rows"
	}
	return e.err.Error()
}

// Unwrap lets IsRollback and RollbackReason see the path's own error.
func (e *staleIDs) Unwrap() error { return e.err }

// FreshRetry is freshRetry, for the paths outside the store that resolve
// names through its cache (queen/pushpath's push, queen/consume's pop).
func FreshRetry[T any](s *Store, op func() (T, error)) (T, error) { return freshRetry(s, op) }

// freshRetry runs op, and once more after forgetting what a *staleIDs
// answer names. op must leave nothing behind when it answers *staleIDs (its
// transaction rolled back), or record what it did finish itself (Push).
func freshRetry[T any](s *Store, op func() (T, error)) (T, error) {
	out, err := op()
	var stale *staleIDs
	if !errors.As(err, &stale) {
		return out, err
	}
	s.cache.forgetStale(stale)
	out, err = op()
	if errors.As(err, &stale) {
		// Forgotten again, so the caller's next call resolves afresh.
		s.cache.forgetStale(stale)
		return out, stale.err
	}
	return out, err
}

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

// StaleSubscription is the answer of a path run under FreshRetry that found
// the cached subscription of the group to the queue names nothing
// (SubscriptionLive): FreshRetry forgets it and runs the path once more,
// which subscribes again. A second such answer leaves the first attempt's
// result standing (an empty pop is a correct answer).
func StaleSubscription(tenant, queue, group string) error {
	return &staleIDs{sub: &subName{tenant: tenant, queue: queue, group: group}}
}

// goneIDs is the set of partition ids whose rows an append found gone.
func goneIDs(rows []AppendRow, out []AppendOut) map[string]bool {
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
