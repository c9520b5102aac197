// Package dbprobe tells whether PostgreSQL answers, on a connection of its
// own, and how long connecting takes right now.
//
// The broker asks it while it believes the database is down (the spool is
// unhealthy) instead of sending real work through the pool: one connection
// probes, with exponential backoff and jitter between failed attempts, so a
// fleet of brokers does not storm a database that is coming back.
//
// Connecting to a loaded server can take longer than DB_CONNECTION_TIMEOUT.
// A fixed timeout then fails every attempt forever, each one wasting a
// backend start on the server. The probe doubles its own connect timeout
// after each attempt that timed out (up to MaxTimeout); once connected, it
// learns twice what the connect took (never below the configured timeout).
// The pool reads the learned timeout before each new connection, so it
// climbs out too, while a database that does not answer at all (where the
// probe's timeout grows) costs pool connects no more than before.
package dbprobe

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/clock"
)

// Backoff bounds: the pause after the first failure, and the longest. A
// probe is one connection per broker, so a second between probes (0.5-1.5 s
// with jitter) costs a recovering database little, and a promoted standby
// takes writes within about that of accepting them.
const (
	FirstBackoff = 100 * time.Millisecond
	MaxBackoff   = time.Second
)

// ErrBackoff is returned, wrapping the last failure, by a probe asked for
// during the pause after a failure: it did not touch the database.
var ErrBackoff = errors.New("dbprobe: backing off after a failed probe")

// ErrReadOnly is a probe that reached a server refusing writes: down, for
// the writes that wait on the probe.
var ErrReadOnly = errors.New("dbprobe: database read-only")

// Options configure a Prober.
type Options struct {
	// ConnConfig is the database to probe; it is copied.
	ConnConfig *pgx.ConnConfig
	// Timeout is the configured connect timeout (DB_CONNECTION_TIMEOUT),
	// the floor of the adaptive one; MaxTimeout its ceiling (default 4×).
	Timeout, MaxTimeout time.Duration
	Clock               clock.Clock
	// Jitter returns a number in [0, 1); nil uses crypto/rand. The
	// simulator passes a seeded source so runs replay.
	Jitter func() float64
}

// Prober owns one connection used only for health probes.
type Prober struct {
	o       Options
	learned atomic.Int64 // connect timeout for the pool, ns: from the last successful connect

	mu        sync.Mutex
	attempt   time.Duration // the probe's own connect timeout
	conn      *pgx.Conn
	failures  int
	notBefore time.Time
	last      error
}

// New returns a prober; it connects on the first Probe.
func New(o Options) *Prober {
	if o.MaxTimeout < o.Timeout {
		o.MaxTimeout = 4 * o.Timeout
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Jitter == nil {
		o.Jitter = randomFraction
	}
	o.ConnConfig = o.ConnConfig.Copy()
	p := &Prober{o: o, attempt: o.Timeout}
	p.learned.Store(int64(o.Timeout))
	return p
}

// ConnectTimeout is the connect timeout to use now: the configured one, or
// twice what the last successful connect took when that is more.
func (p *Prober) ConnectTimeout() time.Duration { return time.Duration(p.learned.Load()) }

// Probe reports whether the database answers and takes writes (a
// read-only server is ErrReadOnly). During the
// backoff after a failure it returns ErrBackoff at once.
func (p *Prober) Probe(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.o.Clock.Now()
	if now.Before(p.notBefore) {
		return fmt.Errorf("%w: %w", ErrBackoff, p.last)
	}
	err := p.ping(ctx)
	if err == nil && p.conn == nil {
		err = errors.New("dbprobe: no connection")
	}
	if err != nil {
		if ctx.Err() != nil {
			return err // our caller gave up; that says nothing of the database
		}
		p.failures++
		p.last = err
		p.notBefore = now.Add(p.backoff())
		return err
	}
	p.failures, p.notBefore, p.last = 0, time.Time{}, nil
	return nil
}

// ping queries on the open connection, reconnecting once if it is gone.
func (p *Prober) ping(ctx context.Context) error {
	if p.conn != nil {
		if err := p.query(ctx); err == nil {
			return nil
		}
		p.closeLocked()
	}
	if err := p.connect(ctx); err != nil {
		return err
	}
	return p.query(ctx)
}

func (p *Prober) query(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.attempt)
	defer cancel()
	var ro string
	if err := p.conn.QueryRow(ctx, "SELECT current_setting('transaction_read_only')").Scan(&ro); err != nil {
		return fmt.Errorf("dbprobe: query: %w", err)
	}
	if ro == "on" {
		// A standby, or a server whose sessions are read-only: it
		// answers, but writes would fail. Reconnect next time, so that
		// with several hosts the probe finds the one that was promoted.
		p.closeLocked()
		return ErrReadOnly
	}
	return nil
}

func (p *Prober) connect(ctx context.Context) error {
	cfg := p.o.ConnConfig.Copy()
	cfg.ConnectTimeout = p.attempt
	// Real time on purpose, even in the simulator: this measures the
	// server and the machine, which virtual time does not slow down.
	start := clock.Real{}.Now()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	took := clock.Real{}.Now().Sub(start)
	if err != nil {
		if took >= cfg.ConnectTimeout && ctx.Err() == nil {
			p.attempt = min(2*cfg.ConnectTimeout, p.o.MaxTimeout)
		}
		return fmt.Errorf("dbprobe: connect (timeout %v): %w", cfg.ConnectTimeout, err)
	}
	p.conn = conn
	p.attempt = min(max(2*took, p.o.Timeout), p.o.MaxTimeout)
	p.learned.Store(int64(p.attempt))
	return nil
}

// backoff is FirstBackoff doubled per consecutive failure, capped at
// MaxBackoff, times a jitter factor in [0.5, 1.5).
func (p *Prober) backoff() time.Duration {
	d := FirstBackoff << min(p.failures-1, 16)
	d = min(d, MaxBackoff)
	return time.Duration(float64(d) * (0.5 + p.o.Jitter()))
}

func (p *Prober) closeLocked() {
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.conn.Close(ctx)
		p.conn = nil
	}
}

// Close closes the probe connection.
func (p *Prober) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}

func randomFraction() float64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}
