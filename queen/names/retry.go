package names

import (
	"errors"

	"github.com/queen-go/queen/queen/store"
)

// Stale cached ids. Another broker can delete what a cached id names (a
// queue deleted, and perhaps created again under its name, or a group's
// cursors deleted) without this broker hearing of it (no mesh, or a lost
// frame). Every path that resolves an id through the cache runs under
// Retry: when the path finds an id it used names nothing (a
// *store.GoneError from an append, or StaleSubscription after
// store.SubscriptionLive said no), Retry forgets those entries and runs the
// path once more, resolving the names again. A second stale answer is a
// real race (deleted again meanwhile) and goes to the caller as the path's
// own error. The paths: queen/pushpath's push, queen/txn, queen/streams,
// queen/consume's pop, queen/sweeper's timer fire and queen/pushpath's
// RetryMessage (DLQ).
//
// Before, only a plain push did this; a transaction or a streams cycle into
// a queue recreated elsewhere failed "a partition was deleted during the
// transaction" until the entry expired (60 s), a timer into it waited out
// its claim's lease (30 s) and a group deleted elsewhere popped nothing
// until the entry expired.

// staleSub is a path's answer when the subscription it had from the cache
// names nothing. Its retry's stale answer leaves that attempt's result
// standing (an empty pop is a correct answer).
type staleSub struct{ sub subName }

func (e *staleSub) Error() string { return "store: cached ids name deleted rows" }

// StaleSubscription is the answer of a path run under Retry that found the
// cached subscription of the group to the queue names nothing
// (store.SubscriptionLive): Retry forgets it and runs the path once more,
// which subscribes again. A second such answer leaves the first attempt's
// result standing (an empty pop is a correct answer).
func StaleSubscription(tenant, queue, group string) error {
	return &staleSub{sub: subName{tenant: tenant, queue: queue, group: group}}
}

// Retry runs op, and once more after forgetting what a stale answer names.
// op must leave nothing behind when it answers stale (its transaction
// rolled back), or record what it did finish itself (a push).
func Retry[T any](n *Names, op func() (T, error)) (T, error) {
	out, err := op()
	if !n.forgetStale(err) {
		return out, err
	}
	out, err = op()
	if n.forgetStale(err) {
		// Forgotten again, so the caller's next call resolves afresh.
		return out, staleCause(err)
	}
	return out, err
}

// forgetStale forgets what a stale answer names, and reports whether err
// was one.
func (n *Names) forgetStale(err error) bool {
	var gone *store.GoneError
	if errors.As(err, &gone) {
		n.forgetPartitionIDs(gone.Partitions)
		return true
	}
	var sub *staleSub
	if errors.As(err, &sub) {
		n.forgetGroup(sub.sub.tenant, sub.sub.queue, sub.sub.group)
		return true
	}
	return false
}

// staleCause is what the caller gets of a stale answer on the retry: the
// statement's own error, or nil for a stale subscription.
func staleCause(err error) error {
	var gone *store.GoneError
	if errors.As(err, &gone) {
		return gone.Err
	}
	return nil
}
