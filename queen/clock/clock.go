// Package clock is the time seam of the broker.
//
// A broker's own clock only paces loops: sweeper sleeps, long-poll timeouts,
// drain cadence, back-off. Correctness-relevant time (lease expiry, delays,
// TTLs) is decided by PostgreSQL inside each statement, never here. Every loop
// takes a Clock so the simulator can run it on virtual time.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers. Real is the production clock;
// Sim is a virtual clock driven by the simulator.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the subset of *time.Timer that loops need.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// SocketDeadline is now plus d on the real clock, for operating-system
// deadlines (net.Conn.SetDeadline), which no other clock can express.
func SocketDeadline(d time.Duration) time.Time { return time.Now().Add(d) }

// Sleep waits d on c, or until ctx ends: a pause that the simulator's
// virtual clock can pace (combine.Retry's Wait).
func Sleep(ctx context.Context, c Clock, d time.Duration) {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}
