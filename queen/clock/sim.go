package clock

import (
	"sort"
	"sync"
	"time"
)

// Sim is a virtual clock. Time moves only when Advance or AdvanceTo is
// called; timers whose deadline is reached fire in deadline order. A Sim may
// be skewed: Skewed returns a view that reads the same virtual time plus an
// offset, as a broker with a wrong wall clock would.
type Sim struct {
	mu     sync.Mutex
	now    time.Time
	timers []*simTimer
	seq    uint64
}

// NewSim returns a virtual clock that starts at start.
func NewSim(start time.Time) *Sim { return &Sim{now: start} }

// Now returns the virtual instant.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// NewTimer returns a timer that fires when virtual time reaches Now()+d.
func (s *Sim) NewTimer(d time.Duration) Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	t := &simTimer{sim: s, at: s.now.Add(d), c: make(chan time.Time, 1), seq: s.seq}
	if d <= 0 {
		t.c <- s.now
		t.fired = true
		return t
	}
	s.timers = append(s.timers, t)
	return t
}

// Advance moves virtual time forward by d, firing due timers.
func (s *Sim) Advance(d time.Duration) { s.AdvanceTo(s.Now().Add(d)) }

// AdvanceTo moves virtual time to t (never backwards), firing due timers.
func (s *Sim) AdvanceTo(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.After(s.now) {
		s.now = t
	}
	sort.Slice(s.timers, func(i, j int) bool {
		if s.timers[i].at.Equal(s.timers[j].at) {
			return s.timers[i].seq < s.timers[j].seq
		}
		return s.timers[i].at.Before(s.timers[j].at)
	})
	kept := s.timers[:0]
	for _, tm := range s.timers {
		if !tm.at.After(s.now) {
			tm.fired = true
			tm.c <- tm.at
			continue
		}
		kept = append(kept, tm)
	}
	s.timers = kept
}

// NextTimer reports the earliest pending timer deadline, if any.
func (s *Sim) NextTimer() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best time.Time
	for _, tm := range s.timers {
		if best.IsZero() || tm.at.Before(best) {
			best = tm.at
		}
	}
	return best, !best.IsZero()
}

type simTimer struct {
	sim   *Sim
	at    time.Time
	c     chan time.Time
	seq   uint64
	fired bool
}

func (t *simTimer) C() <-chan time.Time { return t.c }

func (t *simTimer) Stop() bool {
	t.sim.mu.Lock()
	defer t.sim.mu.Unlock()
	if t.fired {
		return false
	}
	for i, tm := range t.sim.timers {
		if tm == t {
			t.sim.timers = append(t.sim.timers[:i], t.sim.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Skewed is a Clock that reads another clock plus a fixed offset. Timers are
// durations and so are unaffected by skew, exactly as with a real wrong clock.
type Skewed struct {
	Base   Clock
	Offset time.Duration
}

// Now returns the base time plus the offset.
func (s Skewed) Now() time.Time { return s.Base.Now().Add(s.Offset) }

// NewTimer delegates to the base clock.
func (s Skewed) NewTimer(d time.Duration) Timer { return s.Base.NewTimer(d) }
