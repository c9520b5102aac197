// Package admission meters database work by lane, so that background
// replay can never crowd out live traffic, nor live traffic starve replay.
//
// An Arbiter holds a budget of slots (by default the pool size). Each
// caller takes a slot in its lane before it takes a connection. Every lane
// has a guaranteed share of the budget (ack 0.30, pop 0.40, push 0.25,
// maint 0.05; at least one slot each): a freed slot goes first to a lane
// below its guarantee that has waiters, then to any lane with waiters, in
// wake order ack > pop > push > maint. Shares are guarantees, not caps: a
// lane may borrow slots nobody waits for (work-conserving), and borrowed
// slots go back to whoever is owed one as they free. So a recovering spool
// drain (maint) always gets its share under saturated live traffic, and
// cannot outrank live traffic beyond it.
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
	mu        sync.Mutex
	budget    int
	guarantee [lanes]int
	inflight  [lanes]int
	waiters   [lanes][]chan struct{}
}

// Shares are the guaranteed shares of the lanes other than maint.
var Shares = [lanes]float64{Ack: 0.30, Pop: 0.40, Push: 0.25}

// New returns an arbiter with budget slots; maint is guaranteed maintShare
// of them (QUEEN_ADMISSION_SHARE_MAINT), the other lanes their Shares, each
// at least one slot.
func New(budget int, maintShare float64) *Arbiter {
	if budget < 1 {
		budget = 1
	}
	a := &Arbiter{budget: budget}
	shares := Shares
	shares[Maint] = maintShare
	for l, sh := range shares {
		a.guarantee[l] = max(1, int(math.Floor(float64(budget)*sh)))
	}
	return a
}

func (a *Arbiter) total() int {
	n := 0
	for _, v := range a.inflight {
		n += v
	}
	return n
}

// next is the lane owed the next free slot, or -1 when nobody waits.
// Caller holds mu.
func (a *Arbiter) next() Lane {
	for l := Ack; l < lanes; l++ {
		if len(a.waiters[l]) > 0 && a.inflight[l] < a.guarantee[l] {
			return l
		}
	}
	for l := Ack; l < lanes; l++ {
		if len(a.waiters[l]) > 0 {
			return l
		}
	}
	return -1
}

// Acquire waits for a slot in lane l. The returned release must be called
// exactly once.
func (a *Arbiter) Acquire(ctx context.Context, l Lane) (func(), error) {
	ch := make(chan struct{})
	a.mu.Lock()
	// Join the queue and let the grant rule decide: an arrival never
	// jumps a waiter the rule puts first.
	a.waiters[l] = append(a.waiters[l], ch)
	a.wake()
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

func (a *Arbiter) releaser(l Lane) func() {
	var once sync.Once
	return func() { once.Do(func() { a.free(l) }) }
}

// free gives a slot of lane l back and grants it on.
func (a *Arbiter) free(l Lane) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight[l]--
	a.wake()
}

// wake grants free slots by the grant rule. Caller holds mu.
func (a *Arbiter) wake() {
	for a.total() < a.budget {
		l := a.next()
		if l < 0 {
			return
		}
		ch := a.waiters[l][0]
		a.waiters[l] = a.waiters[l][1:]
		a.inflight[l]++
		close(ch)
	}
}

// Stats are the arbiter's gauges.
type Stats struct {
	Budget    int
	Guarantee [lanes]int
	Inflight  [lanes]int
	Waiting   [lanes]int
}

// Stats returns a snapshot.
func (a *Arbiter) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{Budget: a.budget, Guarantee: a.guarantee, Inflight: a.inflight}
	for l := range a.waiters {
		s.Waiting[l] = len(a.waiters[l])
	}
	return s
}

// Lanes lists every lane, for metrics.
func Lanes() []Lane { return []Lane{Ack, Pop, Push, Maint} }
