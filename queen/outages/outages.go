// Package outages keeps, in memory, what one broker saw of its database:
// the server its pool last connected to, each period its writes paused (a
// read-only server, or no database taking writes) and each change of
// server. It is the broker's own record for the dashboard's failover page:
// bounded rings, nothing written anywhere, so a restart forgets it (the
// server is learned again at the first connection).
package outages

import (
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Keep is how many periods and server changes the record holds; the
// oldest go first.
const Keep = 32

// Period is a time writes paused: Kinds names what was seen ("read-only":
// a server refused a write, SQLSTATE 25006; "unavailable": the spool's
// drain found no database taking writes, down or read-only), To is zero
// while it lasts. ServerBefore is the
// server connected when it began, ServerAfter the one when it ended.
type Period struct {
	Kinds                     []string
	From, To                  time.Time
	ServerBefore, ServerAfter string
}

// Change is the pool connecting to another server than the last one.
type Change struct {
	At          time.Time
	From, To    string
	DuringPause bool // during a pause of writes (a failover), not a reconnect
}

// View is a copy of the record.
type View struct {
	Since       time.Time // when the record began (the broker's start)
	Server      string    // "" before the first connection
	ServerSince time.Time
	ReadOnly    bool // the server was last seen refusing writes
	Unavailable bool // the spool's drain last found no database taking writes
	Open        *Period
	Periods     []Period // ended, oldest first
	Changes     []Change // oldest first
	LastPause   *Period  // the newest ended period (a failover, a restart)
}

// Record is one broker's record; its methods are safe for concurrent use.
type Record struct {
	clock clock.Clock
	since time.Time

	mu          sync.Mutex
	server      string
	serverSince time.Time
	readOnly    bool
	unavailable bool
	open        *Period
	periods     []Period
	changes     []Change
}

// New starts a record now.
func New(c clock.Clock) *Record {
	if c == nil {
		c = clock.Real{}
	}
	return &Record{clock: c, since: c.Now()}
}

// Connected notes a new pool connection to server (host:port).
func (r *Record) Connected(server string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if server == r.server {
		return
	}
	now := r.clock.Now()
	if r.server != "" {
		r.changes = keep(append(r.changes, Change{At: now, From: r.server, To: server, DuringPause: r.open != nil}))
	}
	r.server, r.serverSince = server, now
}

// ReadOnly notes whether the server refuses writes (it flipped).
func (r *Record) ReadOnly(ro bool) { r.set(&r.readOnly, ro, "read-only") }

// Reachable notes whether the spool's drain finds a database taking
// writes (it flipped).
func (r *Record) Reachable(ok bool) { r.set(&r.unavailable, !ok, "unavailable") }

// set moves one flag; a period opens when the first flag rises and ends
// when the last falls.
func (r *Record) set(flag *bool, on bool, kind string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if *flag == on {
		return
	}
	*flag = on
	now := r.clock.Now()
	switch {
	case on && r.open == nil:
		r.open = &Period{Kinds: []string{kind}, From: now, ServerBefore: r.server}
	case on && !has(r.open.Kinds, kind):
		r.open.Kinds = append(r.open.Kinds, kind)
	case !on && r.open != nil && !r.readOnly && !r.unavailable:
		p := *r.open
		p.To, p.ServerAfter = now, r.server
		r.periods, r.open = keep(append(r.periods, p)), nil
	}
}

// View copies the record.
func (r *Record) View() View {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := View{Since: r.since, Server: r.server, ServerSince: r.serverSince, ReadOnly: r.readOnly, Unavailable: r.unavailable,
		Periods: append([]Period(nil), r.periods...), Changes: append([]Change(nil), r.changes...)}
	if r.open != nil {
		p := *r.open
		p.Kinds = append([]string(nil), p.Kinds...)
		v.Open = &p
	}
	if n := len(v.Periods); n > 0 {
		v.LastPause = &v.Periods[n-1]
	}
	return v
}

func has(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// keep drops the oldest entries past Keep.
func keep[T any](s []T) []T {
	if len(s) > Keep {
		return append(s[:0:0], s[len(s)-Keep:]...)
	}
	return s
}
