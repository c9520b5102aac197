package catalog

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
)

// Source is where a Cache reads a placement it does not hold: the
// catalogue (*Catalog).
type Source interface {
	Lookup(ctx context.Context, tenant, queue string) (Placement, error)
}

// ErrEpochBehind refuses a catalogue answer older than an epoch the cache
// has already seen for the queue (a catalogue failed over to a standby
// that had not caught up, say): serving it would send writes to a shard
// the queue left.
var ErrEpochBehind = errors.New("the catalogue answered an epoch older than one seen")

// ErrUnsettled is a Lookup that gave up after its catalogue reads kept
// being invalidated while in flight.
var ErrUnsettled = errors.New("placement invalidated during every read")

// fillAttempts bounds the catalogue reads of one Lookup.
const fillAttempts = 4

// Cache is a broker's placement cache: a queue's shard and epoch from
// memory, read from the catalogue on a miss, forgotten on Invalidate (a
// "moved" answer from a shard's fence, or a mesh hint). It holds at most
// its size in entries, dropping the least recently used. Entries do not
// expire: a placement changes only by a move, which the fence reports, so
// while the catalogue is down cached queues keep being served (invariant
// 8).
//
// Per queue the epoch it serves never goes down. One read per queue is in
// flight at a time (concurrent misses wait for it); an Invalidate marks
// that read stale, so its answer, which may predate the move, is never
// stored nor served, and the caller reads again. An invalidated entry
// keeps its epoch as a floor: a later answer below it is ErrEpochBehind.
// (An entry dropped for room forgets its floor.)
type Cache struct {
	src  Source
	size int

	mu    sync.Mutex
	lru   *list.List // of *entry, most recently used first
	keys  map[key]*list.Element
	fills map[key]*fill
}

// key names a queue.
type key struct{ tenant, queue string }

// entry is a queue's cached placement; an invalid one is kept only as the
// floor of its epoch.
type entry struct {
	key   key
	p     Placement
	valid bool
}

// fill is one catalogue read in flight; done closes when it ends.
type fill struct {
	done    chan struct{}
	err     error
	stale   bool // an Invalidate came while it was in flight
	waiters int  // the Lookups that joined it (what a test waits for)
}

// NewCache returns a cache over src holding at most size entries (at
// least one).
func NewCache(src Source, size int) *Cache {
	return &Cache{src: src, size: max(size, 1), lru: list.New(), keys: map[key]*list.Element{}, fills: map[key]*fill{}}
}

// Lookup returns a queue's placement: from memory, else from the
// catalogue (then kept). A failed read's error wraps its cause; a queue
// with no placement wraps ErrNotPlaced and is not kept.
func (c *Cache) Lookup(ctx context.Context, tenant, queue string) (Placement, error) {
	k := key{tenant, queue}
	for range fillAttempts {
		p, f, lead := c.begin(k)
		switch {
		case f == nil:
			return p, nil
		case !lead:
			if err := c.await(ctx, k, f); err != nil {
				return Placement{}, err
			}
			continue // the fill stored its answer, or was stale: look again
		}
		p, err := c.src.Lookup(ctx, tenant, queue)
		if p, done, err := c.finish(k, f, p, err); done {
			return p, err
		}
	}
	return Placement{}, fmt.Errorf("catalog cache: %s/%s: %w", tenant, queue, ErrUnsettled)
}

// begin serves a valid entry, or returns the fill in flight to wait for,
// or starts one that the caller leads (lead).
func (c *Cache) begin(k key) (p Placement, f *fill, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.keys[k]; ok && el.Value.(*entry).valid {
		c.lru.MoveToFront(el)
		return el.Value.(*entry).p, nil, false
	}
	if f := c.fills[k]; f != nil {
		f.waiters++
		return Placement{}, f, false
	}
	f = &fill{done: make(chan struct{})}
	c.fills[k] = f
	return Placement{}, f, true
}

// await waits for another caller's fill. Its error is this caller's too,
// unless it is that caller's context ending: then this one looks again.
func (c *Cache) await(ctx context.Context, k key, f *fill) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("catalog cache: %s/%s: %w", k.tenant, k.queue, ctx.Err())
	case <-f.done:
	}
	if errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded) {
		return nil
	}
	return f.err
}

// finish ends the fill k led with the catalogue's answer (p, err): it
// stores p unless an Invalidate made the fill stale (done false: read
// again) or p is older than the entry's epoch.
func (c *Cache) finish(k key, f *fill, p Placement, err error) (Placement, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(f.done)
	if c.fills[k] == f {
		delete(c.fills, k)
	}
	if err != nil {
		f.err = fmt.Errorf("catalog cache: %s/%s: %w", k.tenant, k.queue, err)
		return Placement{}, true, f.err
	}
	if f.stale {
		return Placement{}, false, nil
	}
	el, ok := c.keys[k]
	if ok && el.Value.(*entry).p.Epoch > p.Epoch {
		if e := el.Value.(*entry); e.valid {
			return e.p, true, nil
		}
		f.err = fmt.Errorf("catalog cache: %s/%s: epoch %d on %s: %w (%d)", k.tenant, k.queue, p.Epoch, p.Shard,
			ErrEpochBehind, el.Value.(*entry).p.Epoch)
		return Placement{}, true, f.err
	}
	c.store(k, el, p)
	return p, true, nil
}

// store keeps p as k's valid entry (el, if it has one), dropping the least
// recently used entry past the size.
func (c *Cache) store(k key, el *list.Element, p Placement) {
	if el != nil {
		e := el.Value.(*entry)
		e.p, e.valid = p, true
		c.lru.MoveToFront(el)
		return
	}
	c.keys[k] = c.lru.PushFront(&entry{key: k, p: p, valid: true})
	if c.lru.Len() > c.size {
		last := c.lru.Back()
		c.lru.Remove(last)
		delete(c.keys, last.Value.(*entry).key)
	}
}

// Invalidate forgets a queue's placement: the next Lookup reads the
// catalogue, and a read already in flight is neither stored nor served.
// The entry's epoch stays as the floor of what may be served next.
func (c *Cache) Invalidate(tenant, queue string) {
	k := key{tenant, queue}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.keys[k]; ok {
		el.Value.(*entry).valid = false
	}
	if f := c.fills[k]; f != nil {
		f.stale = true
		delete(c.fills, k)
	}
}

// Len is the number of entries held, invalidated ones included.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
