package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/canary"
)

// ErrReadOnly is a database that answers but refuses writes: a standby
// (pg_is_in_recovery), or a server whose sessions are read-only. During a
// failover the broker's address may point at one for a while. It is an
// outage, not bad data: writes wait (pushes are spooled), nothing is
// quarantined for it.
var ErrReadOnly = errors.New("database read-only")

// ReadOnly reports whether err is PostgreSQL refusing a write because the
// server or session is read-only (SQLSTATE 25006), or ErrReadOnly.
func ReadOnly(err error) bool {
	if errors.Is(err, ErrReadOnly) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ReadOnlySQLTransaction
}

// readOnlyTransient is whether 25006 is an outage (Classify): the
// read-only-permanent canary calls it bad data again, as before failover
// was handled, which quarantined spooled pushes.
func readOnlyTransient() bool { return !canary.On("read-only-permanent") }

// ReadOnlyWatch follows whether the database was last seen read-only. Its
// OnPgError is the pool's pgconn error hook: a connection that met a
// read-only server is closed (the pool then dials again, and with several
// hosts and target_session_attrs=read-write finds the writable one), and
// a Ping that finds the server writable clears it.
type ReadOnlyWatch struct {
	seen    atomic.Bool
	refused atomic.Int64
	// OnChange, when set, is called with the new state each time it
	// flips (the broker logs it).
	OnChange func(readOnly bool)
}

// OnPgError implements pgconn.PgErrorHandler: it closes the connection on
// a FATAL error (pgx's default) and on a read-only refusal.
func (w *ReadOnlyWatch) OnPgError(_ *pgconn.PgConn, pgErr *pgconn.PgError) bool {
	if pgErr.Code == pgerrcode.ReadOnlySQLTransaction {
		w.refused.Add(1)
		w.set(true)
		return false
	}
	return !strings.EqualFold(pgErr.Severity, "FATAL")
}

// ReadOnly is whether the database was last seen read-only.
func (w *ReadOnlyWatch) ReadOnly() bool { return w != nil && w.seen.Load() }

// Refused counts the statements a read-only server refused.
func (w *ReadOnlyWatch) Refused() int64 {
	if w == nil {
		return 0
	}
	return w.refused.Load()
}

func (w *ReadOnlyWatch) set(ro bool) {
	if w != nil && w.seen.Swap(ro) != ro && w.OnChange != nil {
		w.OnChange(ro)
	}
}

// Ping checks that a connection can be had and that its server takes
// writes: a read-only one answers ErrReadOnly.
func (s *Store) Ping(ctx context.Context) error {
	// A pooled session the network or a failover cut answers nothing
	// and the pool drops it; every idle one may be such. Trying past
	// them (they fail at once) says what the database does now.
	tries := 1 + min(int(s.pool.Stat().IdleConns()), 10)
	for i := 0; ; i++ {
		err := s.ping(ctx)
		if errors.Is(err, ErrReadOnly) && i == 0 {
			// The session may be one opened while the address
			// pointed at a standby, pooled since, while the server
			// now takes writes: ask a fresh one.
			s.pool.Reset()
			continue
		}
		var pgErr *pgconn.PgError
		// A session the server ended answers a FATAL (57P01
		// terminated, 57P02 crash shutdown) or nothing at all.
		ended := !errors.As(err, &pgErr) || strings.EqualFold(pgErr.Severity, "FATAL") || strings.HasPrefix(pgErr.Code, "57P0")
		if err == nil || errors.Is(err, ErrReadOnly) || !ended || ctx.Err() != nil || i+1 >= tries {
			return err
		}
	}
}

// readOnlySQL reads whether the session's transactions are read-only.
const readOnlySQL = `SELECT current_setting('transaction_read_only')`

func (s *Store) ping(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	defer conn.Release()
	var ro string
	if err := conn.QueryRow(ctx, readOnlySQL).Scan(&ro); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	if was := s.readOnly.ReadOnly(); was != (ro == "on") {
		// The server turned (read-only) or the primary is back: every
		// pooled session may have been opened on the other side; the
		// ones opened on a read-only server stay read-only. Start over
		// rather than meet them one write at a time.
		defer s.pool.Reset()
	}
	s.readOnly.set(ro == "on")
	if ro == "on" {
		// A read-only session stays one: close it rather than pool it,
		// so the first write after the primary is back does not meet it.
		_ = conn.Conn().Close(ctx)
		return ErrReadOnly
	}
	return nil
}

// ReadOnlyWatch is the store's read-only state (nil when none was given).
func (s *Store) ReadOnlyWatch() *ReadOnlyWatch { return s.readOnly }
