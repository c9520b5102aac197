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
// Entries live for ttl (QUEEN_CACHE_REFRESH_INTERVAL_MS), at most
// maxCacheEntries per map (the oldest goes first), and are dropped at
// once on a local configure or delete. An entry another broker made stale
// (it deleted the queue or the group, and this broker did not hear of it)
// costs one retry: every path that resolves an id here runs under
// freshRetry (stale.go), which forgets the entries its stale answer names
// and runs the path once more.
type cache struct {
	clock clock.Clock
	ttl   time.Duration

	mu    sync.Mutex
	parts *ttlMap[partName]
	subs  *ttlMap[subName]
	// sealed: (tenant, queue) -> "t" when the queue has encryptionEnabled.
	sealed *ttlMap[subName]
}

// maxCacheEntries bounds each map: a put past it drops the oldest entry,
// so names used once do not accumulate for the life of the process.
const maxCacheEntries = 100000

type partName struct{ tenant, queue, partition string }

type subName struct{ tenant, queue, group string }

type cached struct {
	id      string
	expires time.Time
}

func newCache(c clock.Clock, ttl time.Duration) *cache {
	return &cache{clock: c, ttl: ttl, parts: newTTLMap[partName](), subs: newTTLMap[subName](), sealed: newTTLMap[subName]()}
}

func (c *cache) partition(k partName) (string, bool) { return lookup(c, c.parts, k) }

func (c *cache) putPartition(k partName, id string) { store(c, c.parts, k, id) }

func (c *cache) subscription(k subName) (string, bool) { return lookup(c, c.subs, k) }

func (c *cache) putSubscription(k subName, queueID string) { store(c, c.subs, k, queueID) }

// lookup returns a live entry of m.
func lookup[K comparable](c *cache, m *ttlMap[K], k K) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := m.m[k]
	if !ok || c.clock.Now().After(e.expires) {
		return "", false
	}
	return e.id, true
}

// store puts an entry in m for ttl.
func store[K comparable](c *cache, m *ttlMap[K], k K, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m.put(k, id, c.clock.Now(), c.ttl, maxCacheEntries)
}

// ttlMap is a map whose entries live for one fixed ttl, with its puts kept
// in order, which is expiry order. A put drops the expired entries at the
// front and, at the cap, the oldest live one: O(1) amortized. Before, a put
// into a full map scanned all of it under the cache's lock (2.4 ms a put at
// 100,000 names). A key deleted or put again leaves a stale place in the
// order, skipped when it reaches the front.
type ttlMap[K comparable] struct {
	m     map[K]cached
	order []placed[K]
	head  int // order[head:] are the live places
}

type placed[K comparable] struct {
	k       K
	expires time.Time
}

func newTTLMap[K comparable]() *ttlMap[K] { return &ttlMap[K]{m: map[K]cached{}} }

func (t *ttlMap[K]) put(k K, id string, now time.Time, ttl time.Duration, max int) {
	for t.head < len(t.order) {
		front := t.order[t.head]
		e, current := t.m[front.k]
		current = current && e.expires.Equal(front.expires)
		if current && !now.After(front.expires) && len(t.m) < max {
			break // live, and there is room
		}
		if current {
			delete(t.m, front.k)
		}
		t.order[t.head] = placed[K]{}
		t.head++
	}
	if t.head > len(t.order)/2 {
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
	e := cached{id: id, expires: now.Add(ttl)}
	t.m[k] = e
	t.order = append(t.order, placed[K]{k: k, expires: e.expires})
}

// delete drops k; its place in the order goes stale.
func (t *ttlMap[K]) delete(k K) { delete(t.m, k) }

// clear drops every entry.
func (t *ttlMap[K]) clear() {
	clear(t.m)
	t.order, t.head = t.order[:0], 0
}

// forgetQueue drops every entry of one queue: after configure or delete.
func (c *cache) forgetQueue(tenant, queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.parts.m {
		if k.tenant == tenant && k.queue == queue {
			c.parts.delete(k)
		}
	}
	for k := range c.subs.m {
		if k.tenant == tenant && k.queue == queue {
			c.subs.delete(k)
		}
	}
	c.sealed.delete(subName{tenant: tenant, queue: queue})
}

// forgetGroup drops a group's subscription entry for a queue: its cursors
// were deleted, so its next pop must subscribe again.
func (c *cache) forgetGroup(tenant, queue, group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs.delete(subName{tenant: tenant, queue: queue, group: group})
}

// forgetPartitionIDs drops the entries naming these partition ids: after a
// foreign-key miss says one of them no longer exists.
//
// It walks the whole map, so it must cost nothing when there is nothing to
// forget: every push calls it, and nearly always with none. Before that
// return, a push after 5,000 partitions were cached spent more than half
// of the broker's CPU here and ran at 0.58 of a fresh broker's rate.
func (c *cache) forgetPartitionIDs(ids map[string]bool) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.parts.m {
		if ids[e.id] {
			c.parts.delete(k)
		}
	}
}

// forgetStale drops the entries a path found stale (freshRetry).
func (c *cache) forgetStale(e *staleIDs) {
	c.forgetPartitionIDs(e.partitions)
	if e.sub != nil {
		c.forgetGroup(e.sub.tenant, e.sub.queue, e.sub.group)
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
	c.sealed.clear()
}
