package store

import (
	"context"
	"sync"
	"time"

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
type combiner[In, Out any] struct {
	run         func(ctx context.Context, batch []*combined[In, Out])
	maxInFlight int
	maxRows     int

	mu       sync.Mutex
	inFlight int
	waiting  []*combined[In, Out]
}

// combined is one call waiting in or running through a combiner: its rows
// in, one outcome per row out.
type combined[In, Out any] struct {
	ctx  context.Context
	rows []In
	out  []Out
	err  error
	done chan struct{}
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
	if c.inFlight < c.maxInFlight {
		// A free slot means nobody is waiting: run alone, now.
		c.inFlight++
		c.mu.Unlock()
		c.runLead([]*combined[In, Out]{call})
		return call.out, call.err
	}
	c.waiting = append(c.waiting, call)
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.out, call.err
	case batch := <-call.lead:
		c.runLead(batch)
		return call.out, call.err
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
	return call.out, call.err
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

// appendCombined is the combiner's statement: every call's rows in one
// appendSQL. A permanent error (a row PostgreSQL refuses) re-runs the calls
// one by one, so one bad push never fails another's.
func (s *Store) appendCombined(ctx context.Context, batch []*pushCall) {
	runJoint(batch, func(rows []appendRow) ([]appendOut, error) { return s.appendRetrying(ctx, rows) }, "combiner-swaps")
}

// runJoint runs every call's rows of batch as one statement and hands each
// call its own outcomes. After a permanent error (a row PostgreSQL
// refuses) each call runs alone, so one bad call never fails another's;
// any other error is every call's. swapCanary names the canary that hands
// the outcomes back reversed.
func runJoint[In, Out any](batch []*combined[In, Out], statement func([]In) ([]Out, error), swapCanary string) {
	runOne := func(b *combined[In, Out]) {
		b.out, b.err = statement(b.rows)
	}
	if len(batch) == 1 {
		runOne(batch[0])
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
	case Classify(err) == Permanent:
		for _, b := range batch {
			runOne(b)
		}
	default:
		for _, b := range batch {
			b.err = err
		}
	}
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

// contentionRetries is how often a push statement that lost a lock race
// (deadlock, serialization failure, lock timeout) runs again at once,
// before its error reaches the caller.
const contentionRetries = 3

// appendRetrying runs one append statement, again after a short jittered
// pause when it lost a lock race: contention is not an outage.
func (s *Store) appendRetrying(ctx context.Context, rows []appendRow) ([]appendOut, error) {
	for attempt := 0; ; attempt++ {
		bctx, cancel := s.bound(ctx)
		out, err := s.appendDistinct(bctx, s.pool, rows)
		cancel()
		if err == nil || !Contention(err) || attempt == contentionRetries {
			return out, err
		}
		pause := time.Duration(5+s.ids.Jitter(20)) * time.Millisecond * time.Duration(attempt+1)
		t := s.cache.clock.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C():
		}
	}
}
