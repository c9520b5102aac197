package store

import (
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// rowLockWait is how long a combined statement (and each try of a call run
// alone) waits for a row lock before PostgreSQL gives up with 55P03 (a
// lock_timeout value): far above a combined statement's own hold of a
// partition (milliseconds), far below what stalls the broker. Not a knob.
// The statement sets it itself (set_config(..., true) in the CTE that
// locks, before its first row lock), so it costs no round trip and ends with
// the statement.
const rowLockWait = "200ms"

// LockWait is rowLockWait, the lock wait a combined statement's caller
// passes. The lock-stalls-all canary is a rewrite of the statements that
// set it (canaries.go), not another value here.
func LockWait() string { return rowLockWait }

// LockTimedOut reports whether err is a lock wait that ran out (55P03):
// the statement rolled back whole, so running its rows again is safe.
func LockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// IsPermanent reports an error the same statement would meet again
// (Classify says Permanent): a combined statement's calls then run one by
// one.
func IsPermanent(err error) bool { return Classify(err) == Permanent }
