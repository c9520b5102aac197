package store

import (
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// cache is the process cache of names to ids: (tenant, queue, partition) ->
// partition id for pushes, and (tenant, queue, group) -> queue id for pops
// whose group is known to be subscribed. It holds ids only, never state a
// statement decides on: queue configuration is read inside each statement.
//
// Entries live for ttl (QUEEN_CACHE_REFRESH_INTERVAL_MS) and are dropped at
// once on a local configure or delete, and on a foreign-key miss (a push into
// a partition another broker deleted). A stale entry costs at most one retry
// or, for a queue deleted and recreated on another broker, empty pops until
// the entry expires.
type cache struct {
	clock clock.Clock
	ttl   time.Duration

	mu    sync.Mutex
	parts map[partName]cached
	subs  map[subName]cached
	// sealed: (tenant, queue) -> "t" when the queue has encryptionEnabled.
	sealed map[subName]cached
}

// maxCacheEntries is where a put starts pruning expired entries, so names
// used once do not accumulate for the life of the process.
const maxCacheEntries = 100000

type partName struct{ tenant, queue, partition string }

type subName struct{ tenant, queue, group string }

type cached struct {
	id      string
	expires time.Time
}

func newCache(c clock.Clock, ttl time.Duration) *cache {
	return &cache{clock: c, ttl: ttl, parts: map[partName]cached{}, subs: map[subName]cached{},
		sealed: map[subName]cached{}}
}

func (c *cache) partition(k partName) (string, bool) { return lookup(c, c.parts, k) }

func (c *cache) putPartition(k partName, id string) { store(c, c.parts, k, id) }

func (c *cache) subscription(k subName) (string, bool) { return lookup(c, c.subs, k) }

func (c *cache) putSubscription(k subName, queueID string) { store(c, c.subs, k, queueID) }

// lookup returns a live entry of m.
func lookup[K comparable](c *cache, m map[K]cached, k K) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := m[k]
	if !ok || c.clock.Now().After(e.expires) {
		return "", false
	}
	return e.id, true
}

// store puts an entry in m for ttl, first pruning expired entries when m
// is large.
func store[K comparable](c *cache, m map[K]cached, k K, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if len(m) >= maxCacheEntries {
		for k, e := range m {
			if now.After(e.expires) {
				delete(m, k)
			}
		}
	}
	m[k] = cached{id: id, expires: now.Add(c.ttl)}
}

// forgetQueue drops every entry of one queue: after configure or delete.
func (c *cache) forgetQueue(tenant, queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.parts {
		if k.tenant == tenant && k.queue == queue {
			delete(c.parts, k)
		}
	}
	for k := range c.subs {
		if k.tenant == tenant && k.queue == queue {
			delete(c.subs, k)
		}
	}
	delete(c.sealed, subName{tenant: tenant, queue: queue})
}

// forgetGroup drops a group's subscription entry for a queue: its cursors
// were deleted, so its next pop must subscribe again.
func (c *cache) forgetGroup(tenant, queue, group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, subName{tenant: tenant, queue: queue, group: group})
}

// forgetPartitionIDs drops the entries naming these partition ids: after a
// foreign-key miss says one of them no longer exists.
func (c *cache) forgetPartitionIDs(ids map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.parts {
		if ids[e.id] {
			delete(c.parts, k)
		}
	}
}

// ForgetQueue drops what this process caches of a queue: another broker
// configured or deleted it.
func (s *Store) ForgetQueue(tenant, queue string) { s.cache.forgetQueue(tenant, queue) }

// forgetSealed drops every queue's encryption hint: a statement found one
// stale (encryption was turned on from another broker).
func (c *cache) forgetSealed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.sealed)
}
