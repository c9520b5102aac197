package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
)

// combiner sends concurrent calls of one kind (pushes, acks) to PostgreSQL
// together. Up to maxInFlight statements run at once; a call that arrives
// while they are all busy waits, and when one finishes, every waiting call
// (up to maxRows rows) goes in the next statement: one commit, and one
// lock per row locked, for all of them. Each call still answers only after
// the COMMIT of the statement that carried it.
//
// There is no goroutine of its own: the caller whose call finds a free slot
// runs the statement, and a finishing statement hands its slot, with the
// waiting calls, to the first of them. A single caller (the lockstep
// simulator) therefore always runs its own call alone, at once.
//
// A row lock held elsewhere (a session holding a partition or cursor row, a
// queue being deleted) must delay that row's writers only, never the slots:
// a statement in a slot waits at most rowLockWait for a row lock. When it
// waited longer it rolled back whole (SQLSTATE 55P03: nothing was written),
// its slot goes on to the waiting calls, and each of its calls runs alone,
// outside the slots, in its own caller's goroutine, waiting for its locks as
// long as its own call allows (alone). While a call runs alone, the rows it
// names (key) are held: a new call naming one of them goes alone at once,
// so a locked row's writers never take a slot again while it stays locked.
type combiner[In, Out any] struct {
	run func(ctx context.Context, batch []*combined[In, Out])
	// alone runs one call outside the slots, after its combined statement
	// met a row lock held past rowLockWait.
	alone func(ctx context.Context, rows []In) ([]Out, error)
	// key names the row lock a row waits for: its partition (a push), its
	// cursor (an ack).
	key         func(In) string
	maxInFlight int
	maxRows     int

	mu       sync.Mutex
	inFlight int
	waiting  []*combined[In, Out]
	// held is, per key, the calls running alone on it.
	held map[string]*turn
}

// combined is one call waiting in or running through a combiner: its rows
// in, one outcome per row out.
type combined[In, Out any] struct {
	ctx  context.Context
	rows []In
	out  []Out
	err  error
	// locked: the statement that carried this call waited past
	// rowLockWait for a row lock and rolled back; the call runs alone.
	locked bool
	done   chan struct{}
	// lead receives the batch this call must run, when a finishing
	// statement hands it the slot.
	lead chan []*combined[In, Out]
}

// pushCall is one Push in the push combiner.
type pushCall = combined[appendRow, appendOut]

// do runs rows and returns one outcome per row.
func (c *combiner[In, Out]) do(ctx context.Context, rows []In) ([]Out, error) {
	call := &combined[In, Out]{ctx: ctx, rows: rows, done: make(chan struct{}), lead: make(chan []*combined[In, Out], 1)}
	c.mu.Lock()
	if c.namesHeld(rows) {
		// A row it names is locked elsewhere: it would only block a slot.
		c.mu.Unlock()
		return c.runAlone(ctx, rows)
	}
	if c.inFlight < c.maxInFlight {
		// A free slot means nobody is waiting: run alone, now.
		c.inFlight++
		c.mu.Unlock()
		c.runLead([]*combined[In, Out]{call})
		return c.answer(ctx, call)
	}
	c.waiting = append(c.waiting, call)
	c.mu.Unlock()
	select {
	case <-call.done:
		return c.answer(ctx, call)
	case batch := <-call.lead:
		c.runLead(batch)
		return c.answer(ctx, call)
	case <-ctx.Done():
	}
	c.mu.Lock()
	for i, w := range c.waiting {
		if w == call {
			// Still waiting: nothing was sent for it.
			c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
			c.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	c.mu.Unlock()
	// Already taken into a statement: its outcome is the answer.
	select {
	case <-call.done:
	case batch := <-call.lead:
		c.runLead(batch)
	}
	return c.answer(ctx, call)
}

// answer is a finished call's outcome; a call whose statement met a lock
// held past rowLockWait (nothing was written for it) runs alone first.
func (c *combiner[In, Out]) answer(ctx context.Context, call *combined[In, Out]) ([]Out, error) {
	if call.locked {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return c.runAlone(ctx, call.rows)
	}
	return call.out, call.err
}

// runAlone runs rows outside the slots, their keys held meanwhile. Calls
// on one key run alone one at a time (their turn, keys taken in order): a
// locked row costs one connection trying it, not one per writer waiting.
// A call waiting for its turn gives its admission slot back meanwhile
// (admission.Away), so the writers of a locked row never hold the budget
// everyone else needs.
func (c *combiner[In, Out]) runAlone(ctx context.Context, rows []In) ([]Out, error) {
	keys := make([]string, 0, len(rows))
	for _, r := range rows {
		keys = append(keys, c.key(r))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	c.mu.Lock()
	if c.held == nil {
		c.held = map[string]*turn{}
	}
	turns := make([]*turn, len(keys))
	for i, k := range keys {
		if c.held[k] == nil {
			c.held[k] = &turn{ch: make(chan struct{}, 1)}
		}
		turns[i] = c.held[k]
		turns[i].n++
	}
	c.mu.Unlock()
	taken := 0
	defer func() {
		for _, t := range turns[:taken] {
			<-t.ch
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, k := range keys {
			if turns[i].n--; turns[i].n == 0 {
				delete(c.held, k)
			}
		}
	}()
	for _, t := range turns {
		if err := t.take(ctx); err != nil {
			return nil, err
		}
		taken++
	}
	return c.alone(ctx, rows)
}

// turn orders the calls running alone on one key.
type turn struct {
	n  int           // calls running alone on the key, waiting or not; under mu
	ch chan struct{} // holds a token while one of them runs
}

// take waits for the key's turn, away from its admission slot if it must
// wait at all.
func (t *turn) take(ctx context.Context) error {
	select {
	case t.ch <- struct{}{}:
		return nil
	default:
	}
	got := false
	err := admission.Away(ctx, func() {
		select {
		case t.ch <- struct{}{}:
			got = true
		case <-ctx.Done():
		}
	})
	if err != nil && got {
		<-t.ch // the turn came, the slot did not: pass the turn on
	}
	if err == nil && !got {
		err = ctx.Err()
	}
	return err
}

// namesHeld reports whether a row of rows names a key a call running alone
// holds. Called with mu held; free while nothing runs alone.
func (c *combiner[In, Out]) namesHeld(rows []In) bool {
	if len(c.held) == 0 {
		return false
	}
	for _, r := range rows {
		if c.held[c.key(r)] != nil {
			return true
		}
	}
	return false
}

// runLead runs batch, then hands the slot, with the next batch, to the
// first waiting call, or frees it.
func (c *combiner[In, Out]) runLead(batch []*combined[In, Out]) {
	c.run(context.WithoutCancel(batch[0].ctx), batch)
	for _, b := range batch {
		close(b.done)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		c.inFlight--
		return
	}
	next := c.take()
	next[0].lead <- next
}

// take removes the next batch from the waiting list: whole calls, oldest
// first, up to maxRows rows (at least one call). Called with mu held.
func (c *combiner[In, Out]) take() []*combined[In, Out] {
	n, rows := 0, 0
	for n < len(c.waiting) && (n == 0 || rows+len(c.waiting[n].rows) <= c.maxRows) {
		rows += len(c.waiting[n].rows)
		n++
	}
	batch := append([]*combined[In, Out](nil), c.waiting[:n]...)
	c.waiting = c.waiting[n:]
	return batch
}

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

// appendCombined is the combiner's statement: every call's rows in one
// appendSQL. A permanent error (a row PostgreSQL refuses) re-runs the calls
// one by one, so one bad push never fails another's.
func (s *Store) appendCombined(ctx context.Context, batch []*pushCall) {
	runJoint(batch, func(rows []appendRow) ([]appendOut, error) {
		var out []appendOut
		err := s.retryContention(ctx, false, func(ctx context.Context) (err error) {
			out, err = s.appendDistinctWaiting(ctx, s.pool, rows, lockWait())
			return err
		})
		return out, err
	}, "combiner-swaps")
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

// runJoint runs every call's rows of batch as one statement and hands each
// call its own outcomes. After a permanent error (a row PostgreSQL
// refuses) each call runs alone, so one bad call never fails another's;
// after a lock held past rowLockWait every call is marked locked (the
// combiner runs it alone, outside the slots); any other error is every
// call's. swapCanary names the canary that hands the outcomes back
// reversed.
func runJoint[In, Out any](batch []*combined[In, Out], statement func([]In) ([]Out, error), swapCanary string) {
	if len(batch) == 1 {
		runCall(batch[0], statement)
		return
	}
	var rows []In
	for _, b := range batch {
		rows = append(rows, b.rows...)
	}
	out, err := statement(rows)
	switch {
	case err == nil:
		for _, b := range batch {
			b.out, out = out[:len(b.rows)], out[len(b.rows):]
		}
		if canary.On(swapCanary) {
			swapAnswers(batch)
		}
	case lockTimedOut(err):
		for _, b := range batch {
			b.locked = true
		}
	case Classify(err) == Permanent:
		for _, b := range batch {
			runCall(b, statement)
		}
	default:
		for _, b := range batch {
			b.err = err
		}
	}
}

// runCall runs one call's rows as its own statement.
func runCall[In, Out any](b *combined[In, Out], statement func([]In) ([]Out, error)) {
	b.out, b.err = statement(b.rows)
	b.locked = lockTimedOut(b.err)
}

// swapAnswers is the combiner-swaps and ack-combiner-swaps canary: the
// combined batch's answers go back in reverse order, to calls of the same
// size.
func swapAnswers[In, Out any](batch []*combined[In, Out]) {
	for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
		if len(batch[i].out) == len(batch[j].out) {
			batch[i].out, batch[j].out = batch[j].out, batch[i].out
		}
	}
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
