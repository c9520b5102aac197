package consume

import (
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// popMarkThrottle spaces one broker's mark attempts (and its checks of
// cached subscriptions) per (queue id, group).
type popMarkThrottle struct {
	clock clock.Clock
	every time.Duration
	mu    sync.Mutex
	last  map[[2]string]time.Time
}

func newPopMarkThrottle(c clock.Clock, every time.Duration) *popMarkThrottle {
	if every == 0 {
		every = 250 * time.Millisecond
	}
	return &popMarkThrottle{clock: c, every: every, last: map[[2]string]time.Time{}}
}

// due reports whether an attempt may run now, and if so counts it. Entries
// older than every are dropped when the map grows, so names only polled
// once do not accumulate.
func (t *popMarkThrottle) due(queueID, group string) bool {
	if t.every < 0 {
		return true
	}
	now := t.clock.Now()
	k := [2]string{queueID, group}
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.last[k]; ok && now.Sub(at) < t.every {
		return false
	}
	if len(t.last) >= 4096 {
		for k2, at := range t.last {
			if now.Sub(at) >= t.every {
				delete(t.last, k2)
			}
		}
	}
	t.last[k] = now
	return true
}

// watermarkEvery is how seldom one (queue, group) is checked: at most once
// per 30 s per broker, and the statement (store.WriteWatermark) skips rows
// younger than that.
const watermarkEvery = 30 * time.Second

// watermarkThrottle remembers when this broker last checked each key and
// found its row there (written or confirmed), so a busy long poll does not
// run the check on every empty pass. A check that left no row (messages
// were still pending, say leased) does not arm it: the next empty pop,
// once they are acked, writes the row at once. Entries older
// than watermarkEvery are dropped when the map grows, so names only polled
// do not accumulate.
type watermarkThrottle struct {
	clock clock.Clock
	mu    sync.Mutex
	last  map[[3]string]time.Time
}

func newWatermarkThrottle(c clock.Clock) *watermarkThrottle {
	return &watermarkThrottle{clock: c, last: map[[3]string]time.Time{}}
}

func (w *watermarkThrottle) due(tenant, queue, group string) bool {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [3]string{tenant, queue, group}
	at, ok := w.last[k]
	return !ok || now.Sub(at) >= watermarkEvery
}

// arm starts the quiet period of a key whose row was written or confirmed.
func (w *watermarkThrottle) arm(tenant, queue, group string) {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.last) >= 4096 {
		for k2, at := range w.last {
			if now.Sub(at) >= watermarkEvery {
				delete(w.last, k2)
			}
		}
	}
	w.last[[3]string{tenant, queue, group}] = now
}

// forget lets the next empty pop of (queue, group) check at once, after
// its row was deleted.
func (w *watermarkThrottle) forget(tenant, queue, group string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.last {
		if k[0] == tenant && (queue == "" || k[1] == queue) && (group == "" || k[2] == group) {
			delete(w.last, k)
		}
	}
}
