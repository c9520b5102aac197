package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/combine"
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

// Retry is the contention retry over this store's connections: its
// statement bound (TxTimeout), jitter and clock. The retry loop itself is
// queen/combine's; only its binding to this store lives here. It cannot
// move up to queen/pushpath, as queen/consume's ack (a layer below
// pushpath) runs it too, nor down to combine, which may import neither the
// store's bound nor its ids or clock (TestSeamsKeepImportArrowsOneWay).
func (s *Store) Retry() combine.Retry { return s.retry }

// newRetry builds the store's Retry once, in New.
func (s *Store) newRetry() combine.Retry {
	return combine.Retry{Bound: s.bound, Jitter: s.ids.Jitter, Wait: s.wait, Contention: Contention, LockTimedOut: LockTimedOut}
}

// wait waits d on the store's clock, or until ctx ends.
func (s *Store) wait(ctx context.Context, d time.Duration) {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}
