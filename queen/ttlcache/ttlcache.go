// Package ttlcache is a bounded map of keys to ids whose entries live for
// one fixed ttl on a given clock. It holds the broker's name caches
// (queen/names) and the store's encryption hint: ids only, never state a
// statement decides on.
package ttlcache

import (
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// MaxEntries bounds each cache: a put past it drops the oldest entry, so
// names used once do not accumulate for the life of the process.
const MaxEntries = 100000

// Cache maps keys to ids for ttl, at most MaxEntries of them. It is safe
// for concurrent use.
type Cache[K comparable] struct {
	clock clock.Clock
	ttl   time.Duration

	mu sync.Mutex
	m  ttlMap[K]
}

// New returns an empty cache whose entries live for ttl on c.
func New[K comparable](c clock.Clock, ttl time.Duration) *Cache[K] {
	return &Cache[K]{clock: c, ttl: ttl, m: ttlMap[K]{m: map[K]cached{}}}
}

// Get returns k's live entry.
func (c *Cache[K]) Get(k K) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m.m[k]
	if !ok || c.clock.Now().After(e.expires) {
		return "", false
	}
	return e.id, true
}

// Put stores id under k for ttl.
func (c *Cache[K]) Put(k K, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.put(k, id, c.clock.Now(), c.ttl, MaxEntries)
}

// Delete drops k.
func (c *Cache[K]) Delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.delete(k)
}

// DeleteIf drops every entry drop names. It walks the whole map.
func (c *Cache[K]) DeleteIf(drop func(k K, id string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m.m {
		if drop(k, e.id) {
			c.m.delete(k)
		}
	}
}

// Clear drops every entry.
func (c *Cache[K]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.clear()
}

// Len is the number of entries held, live or expired but not yet dropped.
func (c *Cache[K]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m.m)
}

type cached struct {
	id      string
	expires time.Time
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
