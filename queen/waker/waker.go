// Package waker releases parked long-poll pops when a push commits.
//
// It is a hint path: a missed wake costs a parked pop at most one re-check
// interval, because the long-poll loop always re-reads the database on its
// own back-off too.
package waker

import "sync"

// Hub maps a key (tenant and queue) to the waiters parked on it.
type Hub struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// New returns an empty hub.
func New() *Hub { return &Hub{m: map[string]chan struct{}{}} }

// Wait returns a channel closed by the next Notify of key. Take it before
// re-checking the database so a push between check and park is not missed.
func (h *Hub) Wait(key string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.m[key]
	if c == nil {
		c = make(chan struct{})
		h.m[key] = c
	}
	return c
}

// Notify wakes everyone waiting on key.
func (h *Hub) Notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.m[key]; c != nil {
		close(c)
		delete(h.m, key)
	}
}

// Key is the wake key of a tenant's queue; queue "" is the tenant-wide key
// that namespace/task discovery pops park on.
func Key(tenant, queue string) string { return tenant + "\x00" + queue }
