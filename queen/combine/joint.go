package combine

import (
	"context"

	"github.com/queen-go/queen/queen/canary"
)

// run runs a batch in its slot: the calls that may share one statement
// together (runJoint), then each call kept apart (Options.Apart) by itself.
func (c *Combiner[In, Out]) run(ctx context.Context, batch []*call[In, Out]) {
	if c.o.Apart == nil {
		c.runJoint(ctx, batch)
		return
	}
	rows := make([][]In, len(batch))
	for i, b := range batch {
		rows[i] = b.rows
	}
	apart := c.o.Apart(rows)
	var joint, alone []*call[In, Out]
	for i, b := range batch {
		if apart[i] {
			alone = append(alone, b)
		} else {
			joint = append(joint, b)
		}
	}
	c.runJoint(ctx, joint)
	for _, b := range alone {
		c.runCall(ctx, b)
	}
}

// runJoint runs every call's rows of batch as one statement and hands each
// call its own outcomes. After a permanent error (or one Options.Split
// names) each call runs by itself, so one bad call never fails another's; after a lock held too long every
// call is marked locked (it runs alone, outside the slots); any other error
// is every call's.
func (c *Combiner[In, Out]) runJoint(ctx context.Context, batch []*call[In, Out]) {
	switch len(batch) {
	case 0:
		return
	case 1:
		c.runCall(ctx, batch[0])
		return
	}
	var rows []In
	for _, b := range batch {
		rows = append(rows, b.rows...)
	}
	out, err := c.o.Joint(ctx, rows)
	switch {
	case err == nil:
		for _, b := range batch {
			b.out, out = out[:len(b.rows)], out[len(b.rows):]
		}
		if canary.On(c.o.SwapCanary) {
			swapAnswers(batch)
		}
	case c.o.LockTimedOut(err):
		for _, b := range batch {
			b.locked = true
		}
	case c.o.Permanent(err) || c.o.Split != nil && c.o.Split(err):
		for _, b := range batch {
			c.runCall(ctx, b)
		}
	default:
		for _, b := range batch {
			b.err = err
		}
	}
}

// runCall runs one call's rows as its own statement, in the slot.
func (c *Combiner[In, Out]) runCall(ctx context.Context, b *call[In, Out]) {
	b.out, b.err = c.o.Joint(ctx, b.rows)
	b.locked = b.err != nil && c.o.LockTimedOut(b.err)
}

// swapAnswers is the combiner-swaps and ack-combiner-swaps canary: the
// joint statement's answers go back in reverse order, to calls of the same
// size.
func swapAnswers[In, Out any](batch []*call[In, Out]) {
	for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
		if len(batch[i].out) == len(batch[j].out) {
			batch[i].out, batch[j].out = batch[j].out, batch[i].out
		}
	}
}
