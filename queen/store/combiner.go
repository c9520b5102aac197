package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
)

// rowLockWait is how long a combined statement (and each try of a call run
// alone) waits for a row lock before PostgreSQL gives up with 55P03 (a
// lock_timeout value): far above a combined statement's own hold of a
// partition (milliseconds), far below what stalls the broker. Not a knob.
// The statement sets it itself (set_config(..., true) in the CTE that
// locks, before its first row lock), so it costs no round trip and ends with
// the statement.
const rowLockWait = "200ms"

// lockWait is rowLockWait; under the lock-stalls-all canary "0" (no bound),
// as before issue 28 item 8: a combined statement waits for a row lock as
// long as it takes, with every request behind it.
func lockWait() string {
	if canary.On("lock-stalls-all") {
		return "0"
	}
	return rowLockWait
}

// appendCombined is the push combiner's joint statement: the rows of one
// or more calls in one appendSQL, waiting at most lockWait for a partition.
func (s *Store) appendCombined(ctx context.Context, rows []appendRow) ([]appendOut, error) {
	var out []appendOut
	err := s.retryContention(ctx, false, func(ctx context.Context) (err error) {
		out, err = s.appendDistinctWaiting(ctx, s.pool, rows, lockWait())
		return err
	})
	return out, err
}

// appendAlone is the push combiner's alone: one call's rows, tried again
// while a lock keeps them out, until the call's bound.
func (s *Store) appendAlone(ctx context.Context, rows []appendRow) ([]appendOut, error) {
	var out []appendOut
	err := s.retryContention(ctx, true, func(ctx context.Context) (err error) {
		out, err = s.appendDistinctWaiting(ctx, s.pool, rows, lockWait())
		return err
	})
	return out, err
}

// pause waits d or until ctx ends (its error), away from the caller's
// admission slot when away is admission.Away.
func (s *Store) pause(ctx context.Context, d time.Duration, away func(context.Context, func()) error) error {
	wait := func() {
		t := s.cache.clock.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C():
		}
	}
	if away == nil {
		wait()
		return ctx.Err()
	}
	return away(ctx, wait)
}

// contentionRetries is how often a push statement that lost a lock race
// (deadlock, serialization failure) runs again at once, before its error
// reaches the caller.
const contentionRetries = 3

// lockTimedOut reports whether err is a lock wait that ran out (55P03):
// the statement rolled back whole, so running its rows again is safe.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// permanent reports an error the same statement would meet again: a
// combined statement's calls then run one by one.
func permanent(err error) bool { return Classify(err) == Permanent }

// retryContention runs statement, again after a short jittered pause when
// it lost a lock race: contention is not an outage. A lock wait that ran out
// (rowLockWait) returns at once in a slot (!alone: the combiner splits the
// batch); alone, it is tried again, the pause growing to a second, for as
// long as the call's bound allows (TxTimeout and its context), so a call on
// a locked row holds a connection only while it tries. Any other lock race
// is tried contentionRetries times more.
func (s *Store) retryContention(ctx context.Context, alone bool, statement func(ctx context.Context) error) error {
	if alone {
		var cancel context.CancelFunc
		ctx, cancel = s.bound(ctx)
		defer cancel()
	}
	for attempt, races := 0, 0; ; attempt++ {
		bctx, cancel := s.bound(ctx)
		err := statement(bctx)
		cancel()
		switch {
		case err == nil || !Contention(err):
			return err
		case lockTimedOut(err) && !alone:
			return err
		case !lockTimedOut(err):
			if races++; races > contentionRetries {
				return err
			}
		}
		pause := time.Duration(5+s.ids.Jitter(20)) * time.Millisecond * time.Duration(races)
		if lockTimedOut(err) {
			pause = min(20*time.Millisecond<<min(attempt, 6), time.Second) + time.Duration(s.ids.Jitter(20))*time.Millisecond
		}
		if alone {
			// The pause holds no connection: nor does it hold an
			// admission slot.
			if s.pause(ctx, pause, admission.Away) != nil {
				return err
			}
		} else if s.pause(ctx, pause, nil) != nil {
			return err
		}
	}
}
