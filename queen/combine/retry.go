package combine

import (
	"context"
	"time"

	"github.com/queen-go/queen/queen/admission"
)

// contentionRetries is how often a statement that lost a lock race
// (deadlock, serialization failure) runs again at once, before its error
// reaches the caller.
const contentionRetries = 3

// Retry is the contention retry a combiner's statements run under: a
// statement that lost a lock race runs again after a short jittered pause,
// because contention is not an outage. Its fields bind it to a driver: the
// broker's composition root (package queen) fills them from queen/store's
// error classification and statement bound, the ids' jitter and the clock,
// and hands the one value to queen/pushpath and queen/consume. The zero
// Retry runs a statement once, with no bound beyond its context: a path
// built without a broker's wiring retries nothing.
type Retry struct {
	// Bound applies the client-side statement bound.
	Bound func(context.Context) (context.Context, context.CancelFunc)
	// Jitter answers a number in [0, n).
	Jitter func(n int) int
	// Wait waits d or until ctx ends.
	Wait func(ctx context.Context, d time.Duration)
	// Contention reports a lost lock race; LockTimedOut a lock wait that
	// ran out (one kind of contention).
	Contention, LockTimedOut func(error) bool
}

// Run runs statement, again after a short jittered pause when it lost a
// lock race. A lock wait that ran out returns at once in a slot (!alone:
// the combiner splits the batch); alone, it is tried again, the pause
// growing to a second, for as long as the call's bound allows (Bound and
// its context), so a call on a locked row holds a connection only while it
// tries. Any other lock race is tried contentionRetries times more.
func (r Retry) Run(ctx context.Context, alone bool, statement func(ctx context.Context) error) error {
	if r.Bound == nil {
		return statement(ctx)
	}
	if alone {
		var cancel context.CancelFunc
		ctx, cancel = r.Bound(ctx)
		defer cancel()
	}
	for attempt, races := 0, 0; ; attempt++ {
		bctx, cancel := r.Bound(ctx)
		err := statement(bctx)
		cancel()
		switch {
		case err == nil || !r.Contention(err):
			return err
		case r.LockTimedOut(err) && !alone:
			return err
		case !r.LockTimedOut(err):
			if races++; races > contentionRetries {
				return err
			}
		}
		pause := time.Duration(5+r.Jitter(20)) * time.Millisecond * time.Duration(races)
		if r.LockTimedOut(err) {
			pause = min(20*time.Millisecond<<min(attempt, 6), time.Second) + time.Duration(r.Jitter(20))*time.Millisecond
		}
		if r.pause(ctx, pause, alone) != nil {
			return err
		}
	}
}

// pause waits d or until ctx ends (its error); alone, away from the
// caller's admission slot: the pause holds no connection, nor does it hold
// an admission slot.
func (r Retry) pause(ctx context.Context, d time.Duration, alone bool) error {
	wait := func() { r.Wait(ctx, d) }
	if !alone {
		wait()
		return ctx.Err()
	}
	return admission.Away(ctx, wait)
}
