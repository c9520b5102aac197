package passes

import (
	"errors"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Each pass is recorded with its role, session, start, end and error; the
// hook it wraps is still told; a pass that left the ring ends quietly.
func TestRecordKeepsThePassesLed(t *testing.T) {
	c := clock.NewSim(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	r := New(c)
	told := 0
	hook := r.Hook(func(string, uint32) func(error) { return func(error) { told++ } })
	end := hook("retention", 42)
	c.Advance(250 * time.Millisecond)
	end(errors.New("lost the lock"))
	hook("stats", 43)(nil)
	ps := r.Passes()
	if len(ps) != 2 || ps[0].Role != "retention" || ps[0].Session != 42 || ps[0].End.Sub(ps[0].Start) != 250*time.Millisecond ||
		ps[0].Err != "lost the lock" || ps[1].Role != "stats" || ps[1].Err != "" || ps[1].End.IsZero() || told != 2 {
		t.Fatalf("passes: %+v (told %d)", ps, told)
	}
	late := hook("retention", 44)
	for range Keep {
		hook("queue-stats", 45)(nil)
	}
	late(nil)
	if ps := r.Passes(); len(ps) != Keep || ps[0].Role != "queue-stats" {
		t.Fatalf("%d passes kept, first %+v", len(ps), ps[0])
	}
	if New(nil).Hook(nil)("stats", 1) == nil {
		t.Fatal("a hook with nothing to wrap")
	}
}
