package store

import (
	"context"
	"errors"
	"net"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what a caller should do about a database error.
type Class int

const (
	// Permanent: the same statement will fail again (constraint, bad data,
	// a RAISE). Retrying is pointless.
	Permanent Class = iota
	// Transient: the database or the path to it is unavailable or
	// overloaded; the same statement may succeed later.
	Transient
)

// Classify decides by SQLSTATE, never by message text. An error without a
// SQLSTATE is the connection itself and so transient; so are serialization
// failures, deadlocks, a read-only server (25006) and classes 08 (connection), 53 (resources), 57
// (operator intervention, which includes statement timeout cancels) and 58
// (system error).
func Classify(err error) Class {
	var refused *RefusedError
	if errors.As(err, &refused) {
		return Permanent
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return Transient
	}
	if Contention(err) || Moved(err) {
		// Moved is never permanent (invariant 6): the queue is on another
		// shard, or frozen for a move, and the same write succeeds routed
		// again.
		return Transient
	}
	if pgErr.Code == pgerrcode.ReadOnlySQLTransaction && readOnlyTransient() {
		// Class 25 is otherwise permanent (the seed's rule). A read-only
		// server is a standby the address points at during a failover:
		// the same write succeeds once the primary is back or promoted.
		return Transient
	}
	switch {
	case pgerrcode.IsConnectionException(pgErr.Code),
		pgerrcode.IsInsufficientResources(pgErr.Code),
		pgerrcode.IsOperatorIntervention(pgErr.Code),
		pgerrcode.IsSystemError(pgErr.Code):
		return Transient
	}
	return Permanent
}

// RefusedError is a write the broker itself refuses for what it holds, as
// PostgreSQL refuses bad data: the same write fails the same way every time.
// Classify calls it Permanent, so the spool's drain quarantines the record
// with this reason instead of retrying it forever.
type RefusedError struct {
	Reason string
	Err    error
}

func (e *RefusedError) Error() string {
	if e.Err == nil {
		return e.Reason
	}
	return e.Reason + ": " + e.Err.Error()
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Unavailable reports whether err means "the database cannot be reached or
// cannot serve right now" — the 503 class — as opposed to a bug or bad data.
// A caller's own context cancellation is not unavailability.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := IsRollback(err); ok {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return Classify(err) == Transient
}

// Contention reports whether err is a lock conflict on a healthy database:
// a serialization failure, a deadlock or a lock timeout. The same statement
// usually succeeds when run again at once.
func Contention(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.LockNotAvailable:
		return true
	}
	return false
}
