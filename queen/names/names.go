// Package names maps names to ids for the broker, cached, with the one
// retry when a cached id went stale.
//
// The cache holds (tenant, queue, partition) -> partition id for pushes,
// and (tenant, queue, group) -> queue id for pops whose group is known to
// be subscribed. It holds ids only, never state a statement decides on:
// queue configuration is read inside each statement.
//
// Entries live for ttl (QUEEN_CACHE_REFRESH_INTERVAL_MS), at most
// ttlcache.MaxEntries per map (the oldest goes first), and are dropped at
// once on a local configure or delete (Configure, DeleteQueue,
// DeleteGroup) or a mesh hint (ForgetQueue). An entry another broker made
// stale (it deleted the queue or the group, and this broker did not hear
// of it) costs one retry: every path that resolves an id here runs under
// Retry, which forgets the entries its stale answer names and runs the
// path once more.
//
// The statements are queen/store's (LookupPartitions, CreateQueues,
// CreatePartitions, CreateConsumers, ConfigureQueue, Subscribe,
// SubscriptionLive, the deletes); this package decides when to run them
// (a name missing is created: resolvePartitions), in what transaction, and
// what to remember of their answers.
package names

import (
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/ttlcache"
)

// Names is one broker's name cache over its store. It is safe for
// concurrent use.
type Names struct {
	st    *store.Store
	parts *ttlcache.Cache[partName]
	subs  *ttlcache.Cache[subName]
	hints SealHints
}

// SealHints is what else a broker caches of a queue and forgets with its
// names: the write policy's encryption hint (queen/writes' Policy, which
// decides policy, so this package holds it only through this).
type SealHints interface {
	// ForgetSealHint drops the cached encryption setting of a queue.
	ForgetSealHint(tenant, queue string)
}

// noHints is SealHints of a broker that caches no encryption setting.
type noHints struct{}

func (noHints) ForgetSealHint(string, string) {}

// Options configure Names.
type Options struct {
	// Clock ages the entries; nil means the wall clock.
	Clock clock.Clock
	// TTL bounds how long a cached name -> id entry is trusted
	// (QUEEN_CACHE_REFRESH_INTERVAL_MS). Zero means 60 s.
	TTL time.Duration
	// SealHints is the broker's write policy (queen/writes), whose
	// encryption hint of a queue is forgotten with the queue's names; nil:
	// none is cached.
	SealHints SealHints
}

type partName struct{ tenant, queue, partition string }

type subName struct{ tenant, queue, group string }

// New returns an empty cache over st. A broker builds one, beside its
// store, and every path that resolves names shares it.
func New(st *store.Store, o Options) *Names {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.TTL <= 0 {
		o.TTL = 60 * time.Second
	}
	if o.SealHints == nil {
		o.SealHints = noHints{}
	}
	return &Names{st: st, parts: ttlcache.New[partName](o.Clock, o.TTL), subs: ttlcache.New[subName](o.Clock, o.TTL),
		hints: o.SealHints}
}

// Store is the store the names resolve through.
func (n *Names) Store() *store.Store { return n.st }

// Subscription is the queue id cached for the group's subscription to the
// queue, if one is.
func (n *Names) Subscription(tenant, queue, group string) (string, bool) {
	return n.subs.Get(subName{tenant: tenant, queue: queue, group: group})
}

// ForgetQueue drops what this process caches of a queue (its partitions,
// its subscriptions and the write policy's encryption hint, Options.SealHints):
// it was configured or deleted, here or through another broker.
func (n *Names) ForgetQueue(tenant, queue string) {
	n.forgetNames(tenant, queue)
	n.hints.ForgetSealHint(tenant, queue)
}

// forgetNames drops a queue's partition and subscription entries.
func (n *Names) forgetNames(tenant, queue string) {
	n.parts.DeleteIf(func(k partName, _ string) bool { return k.tenant == tenant && k.queue == queue })
	n.subs.DeleteIf(func(k subName, _ string) bool { return k.tenant == tenant && k.queue == queue })
}

// forgetGroup drops a group's subscription entry for a queue: its cursors
// were deleted, so its next pop must subscribe again.
func (n *Names) forgetGroup(tenant, queue, group string) {
	n.subs.Delete(subName{tenant: tenant, queue: queue, group: group})
}

// forgetPartitionIDs drops the entries naming these partition ids: after an
// append found one of them gone.
//
// It walks the whole map, so it must cost nothing when there is nothing to
// forget: every push calls it, and nearly always with none. Before that
// return, a push after 5,000 partitions were cached spent more than half
// of the broker's CPU here and ran at 0.58 of a fresh broker's rate.
func (n *Names) forgetPartitionIDs(ids map[string]bool) {
	if len(ids) == 0 {
		return
	}
	n.parts.DeleteIf(func(_ partName, id string) bool { return ids[id] })
}
