package mover

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/queen/background"
)

// Service runs the unfinished moves in the background, on every broker
// with shards: each pass resumes them all (Resume) under the mover's
// catalogue lock, so one broker runs them while the others find the lock
// taken, and a move a stopped broker left is finished by the next pass of
// any. Wake runs a pass now (a move was planned). It is a
// background.Service and background.Wakeable.
type Service struct {
	m     *Mover
	every background.Every
	due   atomic.Bool
	wake  chan struct{}
}

// NewService runs m's unfinished moves every interval, and when woken.
func NewService(m *Mover, interval time.Duration) *Service {
	return &Service{m: m, every: background.Every{Interval: interval}, wake: make(chan struct{}, 1)}
}

// Name implements background.Service.
func (s *Service) Name() string { return "mover" }

// RunOnce resumes every unfinished move; another broker's mover holding
// the lock is not an error (it runs them). A move that failed is reported
// by its state, not here.
func (s *Service) RunOnce(ctx context.Context) error {
	s.due.Store(false)
	defer func() { s.every.Mark(s.m.cfg.Clock.Now()) }()
	if err := s.m.Resume(ctx); err != nil && !errors.Is(err, ErrBusy) {
		return err
	}
	return nil
}

// NextDue implements background.Service: now when woken, else an interval
// after the last pass.
func (s *Service) NextDue(now time.Time) time.Time {
	if s.due.Load() {
		return now
	}
	return s.every.Next(now)
}

// Woken implements background.Wakeable.
func (s *Service) Woken() <-chan struct{} { return s.wake }

// Wake makes the next pass due now; it never blocks.
func (s *Service) Wake() {
	s.due.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
