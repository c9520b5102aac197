// Package passes keeps, in memory, the leader passes one broker led: each
// pass's role (retention, queue-stats, stats), when it began, how long it
// took and how it ended. It is the broker's own record for the dashboard's
// leaders page: a bounded ring, nothing written anywhere, so a restart
// forgets it, and each broker knows only its own passes.
package passes

import (
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Keep is how many passes the record holds; the oldest go first.
const Keep = 200

// Pass is one pass this broker led. Session is the backend pid of the
// session that held the advisory lock; End is zero while it runs; Err is
// how it failed ("" when it did not).
type Pass struct {
	Role       string
	Session    uint32
	Start, End time.Time
	Err        string
}

// Record is one broker's record; its methods are safe for concurrent use.
type Record struct {
	clock clock.Clock
	since time.Time

	mu     sync.Mutex
	passes []Pass // oldest first
	next   uint64 // the id of the next pass; ids of passes left are next-len(passes)...
}

// New starts a record now.
func New(c clock.Clock) *Record {
	if c == nil {
		c = clock.Real{}
	}
	return &Record{clock: c, since: c.Now()}
}

// Since is when the record began (the broker's start).
func (r *Record) Since() time.Time { return r.since }

// Hook is a leader.Lead Passes function that records each pass, then tells
// also (when set) as before.
func (r *Record) Hook(also func(role string, session uint32) func(error)) func(role string, session uint32) func(error) {
	return func(role string, session uint32) func(error) {
		id := r.begin(role, session)
		var then func(error)
		if also != nil {
			then = also(role, session)
		}
		return func(err error) {
			r.end(id, err)
			if then != nil {
				then(err)
			}
		}
	}
}

func (r *Record) begin(role string, session uint32) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes = append(r.passes, Pass{Role: role, Session: session, Start: r.clock.Now()})
	if len(r.passes) > Keep {
		r.passes = append(r.passes[:0:0], r.passes[len(r.passes)-Keep:]...)
	}
	r.next++
	return r.next - 1
}

// end closes pass id, unless it has left the ring.
func (r *Record) end(id uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.next - uint64(len(r.passes))
	if id < first {
		return
	}
	p := &r.passes[id-first]
	p.End = r.clock.Now()
	if err != nil {
		p.Err = err.Error()
	}
}

// Passes copies the record, oldest first.
func (r *Record) Passes() []Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Pass(nil), r.passes...)
}
