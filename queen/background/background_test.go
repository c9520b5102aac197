package background

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queen-go/queen/queen/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type counter struct {
	runs  atomic.Int64
	clock clock.Clock
	every Every
}

func (c *counter) Name() string                    { return "counter" }
func (c *counter) NextDue(now time.Time) time.Time { return c.every.Next(now) }
func (c *counter) RunOnce(ctx context.Context) error {
	c.runs.Add(1)
	c.every.Mark(c.clock.Now())
	return nil
}

// The shell runs a service at once, then only when virtual time reaches its
// next due instant, and stops on cancel.
func TestRunPacesOnTheClockAndStopsOnCancel(t *testing.T) {
	sim := clock.NewSim(time.Unix(0, 0))
	svc := &counter{clock: sim, every: Every{Interval: 10 * time.Second}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, sim, slog.New(slog.NewTextHandler(io.Discard, nil)), svc)
	}()
	waitFor := func(n int64) {
		deadline := time.Now().Add(5 * time.Second)
		for svc.runs.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("runs %d, want %d", svc.runs.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(1)
	// Wait until the shell parks on its timer, then move time short of due.
	for _, ok := sim.NextTimer(); !ok; _, ok = sim.NextTimer() {
		time.Sleep(time.Millisecond)
	}
	sim.Advance(5 * time.Second)
	time.Sleep(20 * time.Millisecond)
	if svc.runs.Load() != 1 {
		t.Fatalf("ran before it was due: %d", svc.runs.Load())
	}
	sim.Advance(5 * time.Second)
	waitFor(2)
	cancel()
	<-done
}
