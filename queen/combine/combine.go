// Package combine sends concurrent calls of one kind (pushes, acks) to
// PostgreSQL together. It knows no SQL: its caller hands it the statements.
//
// A Combiner lets up to MaxInFlight statements run at once; a call that
// arrives while they are all busy waits, and when one finishes, every
// waiting call (up to MaxRows rows) goes in the next statement: one commit,
// and one lock per row locked, for all of them. Each call still answers
// only after the COMMIT of the statement that carried it, and only with its
// own rows' outcomes.
//
// There is no goroutine of its own: the caller whose call finds a free slot
// runs the statement, and a finishing statement hands its slot, with the
// waiting calls, to the first of them. A single caller (the lockstep
// simulator) therefore always runs its own call alone, at once.
//
// A permanent error (a row PostgreSQL refuses) re-runs each call of the
// statement by itself, so one bad call never fails another's; any other
// error is every call's.
//
// A row lock held elsewhere (a session holding a partition or cursor row, a
// queue being deleted) must delay that row's writers only, never the slots:
// the joint statement waits only a short while for a row lock (its caller
// bounds it). When it waited longer it rolled back whole (LockTimedOut:
// nothing was written), its slot goes on to the waiting calls, and each of
// its calls runs alone, outside the slots, in its own caller's goroutine,
// waiting for its locks as long as its own call allows (Options.Alone).
// While a call runs alone, the rows it names (Options.Key) are held: a new
// call naming one of them goes alone at once, so a locked row's writers
// never take a slot again while it stays locked.
package combine

import (
	"context"
	"sync"
)

// Statement runs rows and answers one outcome per row, in order.
type Statement[In, Out any] func(ctx context.Context, rows []In) ([]Out, error)

// Options are a Combiner's statements and bounds.
type Options[In, Out any] struct {
	// Joint runs the rows of one or more calls as one statement, in a
	// slot. Its context is the leading call's, without its cancellation:
	// a statement carrying other calls must not end with one caller.
	Joint Statement[In, Out]
	// Alone runs one call outside the slots, after its joint statement
	// met a row lock held too long; it may wait as long as ctx allows.
	Alone Statement[In, Out]
	// Key names the row lock a row waits for: its partition (a push), its
	// cursor (an ack).
	Key func(In) string
	// Apart, if set, reports for each call of a batch (its rows, in
	// order) whether it must not share the joint statement (it repeats a
	// row of an earlier call); such calls run by themselves after it,
	// still in the slot.
	Apart func(calls [][]In) []bool
	// MaxInFlight bounds the statements in flight at once; MaxRows the
	// rows of one joint statement (a single call may exceed it).
	MaxInFlight, MaxRows int
	// AloneByKey runs a call that must run alone one key at a time: its
	// rows of each key (in order) as a statement of their own, taking that
	// key's turn only. Without it a call spanning a locked row's key and
	// others held the others' turns for as long as the lock lasted, and
	// their writers waited behind it (pushes: a replayed spool batch or a
	// push of several partitions). Only for calls whose rows are
	// independent across keys: a failure after a key committed fails the
	// call with the earlier keys' rows written.
	AloneByKey bool
	// SwapCanary names the canary under which a joint statement's
	// outcomes go back to its calls reversed.
	SwapCanary string
	// Permanent reports an error the same statement would meet again (a
	// row PostgreSQL refuses).
	Permanent func(error) bool
	// LockTimedOut reports a lock wait that ran out: the statement rolled
	// back whole, so running its rows again is safe.
	LockTimedOut func(error) bool
	// Split, when set, reports an error the rows of some calls alone may
	// cause, the joint statement having written nothing (a shard's fence:
	// one call's queue moved): each call then runs by itself, as after a
	// permanent error, so the others still succeed.
	Split func(error) bool
}

// Combiner combines concurrent calls; see the package doc. Safe for
// concurrent use.
type Combiner[In, Out any] struct {
	o Options[In, Out]

	mu       sync.Mutex
	inFlight int
	waiting  []*call[In, Out]
	// held is, per key, the calls running alone on it.
	held map[string]*turn
}

// New returns a Combiner over o. Joint, Alone, Key, Permanent and
// LockTimedOut are required; MaxInFlight below 1 means 1.
func New[In, Out any](o Options[In, Out]) *Combiner[In, Out] {
	if o.Joint == nil || o.Alone == nil || o.Key == nil || o.Permanent == nil || o.LockTimedOut == nil {
		panic("combine: Options lacks a statement, a key or an error predicate")
	}
	o.MaxInFlight = max(o.MaxInFlight, 1)
	return &Combiner[In, Out]{o: o}
}

// Waiting reports how many calls wait for a slot: they go in the next
// statement (for tests and gauges).
func (c *Combiner[In, Out]) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// call is one call waiting in or running through a combiner: its rows in,
// one outcome per row out.
type call[In, Out any] struct {
	ctx  context.Context
	rows []In
	out  []Out
	err  error
	// locked: the statement that carried this call waited too long for a
	// row lock and rolled back; the call runs alone.
	locked bool
	done   chan struct{}
	// lead receives the batch this call must run, when a finishing
	// statement hands it the slot.
	lead chan []*call[In, Out]
}

// Do runs rows and returns one outcome per row.
func (c *Combiner[In, Out]) Do(ctx context.Context, rows []In) ([]Out, error) {
	cl := &call[In, Out]{ctx: ctx, rows: rows, done: make(chan struct{}), lead: make(chan []*call[In, Out], 1)}
	c.mu.Lock()
	if c.namesHeld(rows) {
		// A row it names is locked elsewhere: it would only block a slot.
		c.mu.Unlock()
		return c.runAlone(ctx, rows)
	}
	if c.inFlight < c.o.MaxInFlight {
		// A free slot means nobody is waiting: run alone, now.
		c.inFlight++
		c.mu.Unlock()
		c.runLead([]*call[In, Out]{cl})
		return c.answer(ctx, cl)
	}
	c.waiting = append(c.waiting, cl)
	c.mu.Unlock()
	select {
	case <-cl.done:
		return c.answer(ctx, cl)
	case batch := <-cl.lead:
		c.runLead(batch)
		return c.answer(ctx, cl)
	case <-ctx.Done():
	}
	c.mu.Lock()
	for i, w := range c.waiting {
		if w == cl {
			// Still waiting: nothing was sent for it.
			c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
			c.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	c.mu.Unlock()
	// Already taken into a statement: its outcome is the answer.
	select {
	case <-cl.done:
	case batch := <-cl.lead:
		c.runLead(batch)
	}
	return c.answer(ctx, cl)
}

// answer is a finished call's outcome; a call whose statement met a lock
// held too long (nothing was written for it) runs alone first.
func (c *Combiner[In, Out]) answer(ctx context.Context, cl *call[In, Out]) ([]Out, error) {
	if cl.locked {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return c.runAlone(ctx, cl.rows)
	}
	return cl.out, cl.err
}

// namesHeld reports whether a row of rows names a key a call running alone
// holds. Called with mu held; free while nothing runs alone.
func (c *Combiner[In, Out]) namesHeld(rows []In) bool {
	if len(c.held) == 0 {
		return false
	}
	for _, r := range rows {
		if c.held[c.o.Key(r)] != nil {
			return true
		}
	}
	return false
}

// runLead runs batch, then hands the slot, with the next batch, to the
// first waiting call, or frees it.
func (c *Combiner[In, Out]) runLead(batch []*call[In, Out]) {
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
// first, up to MaxRows rows (at least one call). Called with mu held.
func (c *Combiner[In, Out]) take() []*call[In, Out] {
	n, rows := 0, 0
	for n < len(c.waiting) && (n == 0 || rows+len(c.waiting[n].rows) <= c.o.MaxRows) {
		rows += len(c.waiting[n].rows)
		n++
	}
	batch := append([]*call[In, Out](nil), c.waiting[:n]...)
	c.waiting = c.waiting[n:]
	return batch
}
