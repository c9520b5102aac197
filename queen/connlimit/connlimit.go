// Package connlimit bounds the open connections of an HTTP server
// (QUEEN_MAX_CONNECTIONS), so idle clients cannot take every file
// descriptor the broker needs for PostgreSQL, the spool and the mesh.
//
// A connection serving a request (a long poll included) is never closed
// here. At the bound a new connection takes the place of the connection
// that has waited longest between requests (keep-alive idle), else of the
// oldest one that has not yet sent its first request; only when every open
// connection is serving a request is the new one closed unread.
package connlimit

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Stats are the limiter's figures for the metrics.
type Stats struct {
	Max, Open int64
	// Evicted: idle (or not yet active) connections closed to make room.
	Evicted int64
	// Refused: new connections closed unread, every open one being busy.
	Refused int64
}

// Limiter counts connections and tracks which are idle. Safe for
// concurrent use.
type Limiter struct {
	max int
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	open  int
	idle  map[*conn]time.Time // between requests (http.StateIdle), since when
	fresh map[*conn]time.Time // accepted, no request yet (http.StateNew)

	evicted, refused atomic.Int64
	lastLog          atomic.Int64 // unix nanoseconds of the last warning
}

// New returns a Limiter of max connections; now is the clock of the
// rate-limited warning (nil: time.Now).
func New(max int, log *slog.Logger, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Limiter{max: max, log: log, now: now, idle: map[*conn]time.Time{}, fresh: map[*conn]time.Time{}}
}

// Stats reports the limiter's figures.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Max: int64(l.max), Open: int64(open), Evicted: l.evicted.Load(), Refused: l.refused.Load()}
}

// Listen wraps ln: every connection it accepts is counted until closed.
func (l *Limiter) Listen(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

// ConnState is the http.Server's ConnState hook: it tells the limiter which
// connections may be closed to make room.
func (l *Limiter) ConnState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.released {
		return
	}
	delete(l.idle, c)
	delete(l.fresh, c)
	switch st {
	case http.StateNew:
		l.fresh[c] = l.now()
	case http.StateIdle:
		l.idle[c] = l.now()
	}
}

type listener struct {
	net.Listener
	l *Limiter
}

// Accept returns the next connection the bound admits; a refused one is
// closed here and Accept waits for the next, so the server never sees an
// error (which would make it back off).
func (ln *listener) Accept() (net.Conn, error) {
	for {
		nc, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := ln.l.admit(nc); c != nil {
			return c, nil
		}
		_ = nc.Close()
	}
}

// admit counts nc in, closing an idle connection to make room at the
// bound; nil: refused.
func (l *Limiter) admit(nc net.Conn) *conn {
	l.mu.Lock()
	var victim *conn
	if l.open >= l.max {
		if victim = oldest(l.idle); victim == nil {
			victim = oldest(l.fresh)
		}
		if victim == nil {
			l.mu.Unlock()
			l.refused.Add(1)
			l.warn()
			return nil
		}
		l.releaseLocked(victim)
	}
	l.open++
	c := &conn{Conn: nc, l: l}
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
		l.evicted.Add(1)
		l.warn()
	}
	return c
}

func oldest(m map[*conn]time.Time) *conn {
	var best *conn
	var at time.Time
	for c, t := range m {
		if best == nil || t.Before(at) {
			best, at = c, t
		}
	}
	return best
}

// releaseLocked uncounts c once; l.mu is held.
func (l *Limiter) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	l.open--
	delete(l.idle, c)
	delete(l.fresh, c)
}

// warn logs the bound at most once a second: a flood of connections must
// not become a flood of log lines.
func (l *Limiter) warn() {
	now := l.now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	s := l.Stats()
	l.log.Warn("http connections at the bound (QUEEN_MAX_CONNECTIONS): idle ones closed to make room, new ones refused when none is idle",
		"max", s.Max, "open", s.Open, "evictedTotal", s.Evicted, "refusedTotal", s.Refused)
}

// conn is a counted connection.
type conn struct {
	net.Conn
	l        *Limiter
	released bool // guarded by l.mu
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
