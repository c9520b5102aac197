// Package admission meters database work by lane, so that background
// replay can never crowd out live traffic.
//
// An Arbiter holds a budget of slots (by default the pool size). Each
// caller takes a slot in its lane before it takes a connection. When a slot
// frees, waiters are woken in lane order ack > pop > push > maint, and the
// maint lane may never hold more than its share of the budget (at least
// one slot), so a recovering spool cannot outrank the requests arriving now.
package admission

import (
	"context"
	"math"
	"sync"
)

// Lane is a class of work.
type Lane int

// Lanes in wake order.
const (
	Ack Lane = iota
	Pop
	Push
	Maint
	lanes
)

func (l Lane) String() string { return [...]string{"ack", "pop", "push", "maint"}[l] }

// Arbiter hands out slots.
type Arbiter struct {
	mu       sync.Mutex
	budget   int
	maintCap int
	inflight [lanes]int
	waiters  [lanes][]chan struct{}
}

// New returns an arbiter with budget slots, maintShare of which (at least
// one) the maint lane may hold.
func New(budget int, maintShare float64) *Arbiter {
	if budget < 1 {
		budget = 1
	}
	mc := int(math.Floor(float64(budget) * maintShare))
	if mc < 1 {
		mc = 1
	}
	return &Arbiter{budget: budget, maintCap: mc}
}

func (a *Arbiter) total() int {
	n := 0
	for _, v := range a.inflight {
		n += v
	}
	return n
}

func (a *Arbiter) fits(l Lane) bool {
	if a.total() >= a.budget {
		return false
	}
	return l != Maint || a.inflight[Maint] < a.maintCap
}

// Acquire waits for a slot in lane l. The returned release must be called
// exactly once.
func (a *Arbiter) Acquire(ctx context.Context, l Lane) (func(), error) {
	a.mu.Lock()
	if a.fits(l) && a.noneWaitingBefore(l) {
		a.inflight[l]++
		a.mu.Unlock()
		return a.releaser(l), nil
	}
	ch := make(chan struct{})
	a.waiters[l] = append(a.waiters[l], ch)
	a.mu.Unlock()
	select {
	case <-ch:
		return a.releaser(l), nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, w := range a.waiters[l] {
			if w == ch {
				a.waiters[l] = append(a.waiters[l][:i], a.waiters[l][i+1:]...)
				return nil, ctx.Err()
			}
		}
		// Granted while giving up: hand the slot on.
		a.inflight[l]--
		a.wake()
		return nil, ctx.Err()
	}
}

// noneWaitingBefore keeps arrivals from jumping a queue of equal or higher
// priority.
func (a *Arbiter) noneWaitingBefore(l Lane) bool {
	for i := Ack; i <= l; i++ {
		if len(a.waiters[i]) > 0 {
			return false
		}
	}
	return true
}

func (a *Arbiter) releaser(l Lane) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.inflight[l]--
			a.wake()
		})
	}
}

// wake grants free slots to waiters, highest lane first. Caller holds mu.
func (a *Arbiter) wake() {
	for l := Ack; l < lanes; l++ {
		for len(a.waiters[l]) > 0 && a.fits(l) {
			ch := a.waiters[l][0]
			a.waiters[l] = a.waiters[l][1:]
			a.inflight[l]++
			close(ch)
		}
	}
}

// Stats are the arbiter's gauges.
type Stats struct {
	Budget   int
	Inflight [lanes]int
	Waiting  [lanes]int
}

// Stats returns a snapshot.
func (a *Arbiter) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{Budget: a.budget, Inflight: a.inflight}
	for l := range a.waiters {
		s.Waiting[l] = len(a.waiters[l])
	}
	return s
}

// Lanes lists every lane, for metrics.
func Lanes() []Lane { return []Lane{Ack, Pop, Push, Maint} }
