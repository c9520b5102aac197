// Package background runs the broker's periodic services.
//
// A service is a pure step plus a schedule: RunOnce does one pass and never
// sleeps; NextDue says when the next pass is due. Run is the thin goroutine
// shell that sleeps on a Clock between passes. The simulator skips the shell
// and calls RunOnce itself, in seeded order, on virtual time.
package background

import (
	"context"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Service is one periodic job.
type Service interface {
	Name() string
	// RunOnce does one pass. An error is logged and the schedule goes on.
	RunOnce(ctx context.Context) error
	// NextDue returns when the next pass is due, given the time now.
	NextDue(now time.Time) time.Time
}

// Wakeable is a Service whose next pass can move earlier while it sleeps:
// a receive from Woken makes Run read NextDue again.
type Wakeable interface {
	Woken() <-chan struct{}
}

// Run calls svc.RunOnce whenever it is due until ctx is done.
func Run(ctx context.Context, c clock.Clock, log *slog.Logger, svc Service) {
	var woken <-chan struct{}
	if w, ok := svc.(Wakeable); ok {
		woken = w.Woken()
	}
	for {
		now := c.Now()
		if wait := svc.NextDue(now).Sub(now); wait > 0 {
			t := c.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-woken:
				t.Stop()
				continue
			case <-t.C():
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err := svc.RunOnce(ctx); err != nil && ctx.Err() == nil {
			log.Warn("background pass failed", "service", svc.Name(), "err", err)
		}
	}
}

// Every is a schedule helper: due every interval after the last pass.
type Every struct {
	Interval time.Duration
	last     time.Time
}

// Mark records that a pass ran at now.
func (e *Every) Mark(now time.Time) { e.last = now }

// Next returns last+Interval, or now for a service that never ran.
func (e *Every) Next(now time.Time) time.Time {
	if e.last.IsZero() {
		return now
	}
	return e.last.Add(e.Interval)
}
