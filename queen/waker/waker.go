// Package waker releases parked long-poll pops when a push commits.
//
// It is a hint path: a missed wake costs a parked pop at most one re-check
// interval, because the long-poll loop always re-reads the database on its
// own back-off too.
//
// A push wakes, in each consumer group parked on the queue, as many pops as
// partitions that got messages: one pop per partition can claim it, so
// waking every parked consumer would only send the rest to the database for
// nothing (a wake storm that, at 1,000 pushes/s and a few consumers, costs
// more CPU than the pushes themselves).
package waker

import "sync"

// Hub maps a key (tenant and queue) to the pops parked on it, per group.
// Empty entries are removed, so names that are only polled leave nothing
// behind.
type Hub struct {
	mu sync.Mutex
	m  map[string]map[string][]*waiter
}

type waiter struct {
	ch    chan struct{}
	woken bool
}

// New returns an empty hub.
func New() *Hub { return &Hub{m: map[string]map[string][]*waiter{}} }

// Wait registers a pop of group on key and returns a channel closed when a
// Notify picks it, and a function that withdraws it. Register before
// re-checking the database, so a push between check and park is not
// missed; withdraw once done waiting. passOn: a pop that leaves (answers)
// after being picked hands its wake to the next pop of its group, since the
// wake may be for a message it did not see; a pop that re-checks itself
// does not.
func (h *Hub) Wait(key, group string) (<-chan struct{}, func(passOn bool)) {
	w := &waiter{ch: make(chan struct{})}
	h.mu.Lock()
	groups := h.m[key]
	if groups == nil {
		groups = map[string][]*waiter{}
		h.m[key] = groups
	}
	groups[group] = append(groups[group], w)
	h.mu.Unlock()
	return w.ch, func(passOn bool) { h.withdraw(key, group, w, passOn) }
}

func (h *Hub) withdraw(key, group string, w *waiter, passOn bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.woken {
		if passOn {
			h.wakeGroup(key, group, 1)
		}
		return
	}
	list := h.m[key][group]
	for i, x := range list {
		if x == w {
			h.set(key, group, append(list[:i:i], list[i+1:]...))
			return
		}
	}
}

// Notify wakes up to n pops of every group parked on key (n < 1 means 1).
func (h *Hub) Notify(key string, n int) {
	if n < 1 {
		n = 1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for group := range h.m[key] {
		h.wakeGroup(key, group, n)
	}
}

// wakeGroup wakes the n oldest waiters of a group. Caller holds mu.
func (h *Hub) wakeGroup(key, group string, n int) {
	list := h.m[key][group]
	for n > 0 && len(list) > 0 {
		w := list[0]
		list = list[1:]
		w.woken = true
		close(w.ch)
		n--
	}
	h.set(key, group, list)
}

// set stores a group's list, dropping empty entries. Caller holds mu.
func (h *Hub) set(key, group string, list []*waiter) {
	if len(list) > 0 {
		h.m[key][group] = list
		return
	}
	delete(h.m[key], group)
	if len(h.m[key]) == 0 {
		delete(h.m, key)
	}
}

// Len reports how many keys have parked pops (for tests and metrics).
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// Parked reports how many pops are parked, over every key and group (the
// analytics' backoff gauge).
func (h *Hub) Parked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, groups := range h.m {
		for _, list := range groups {
			n += len(list)
		}
	}
	return n
}

// Key is the wake key of a tenant's queue; queue "" is the tenant-wide key
// that namespace/task discovery pops park on.
func Key(tenant, queue string) string { return tenant + "\x00" + queue }
