package consume

import (
	"context"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/store"
)

// Ack applies acknowledgements for one consumer group ("" is queue mode).
// Per-item failures are results, not errors. A batch of completions, each
// item once (the common case), goes through the ack combiner: one
// ackCompletedSQL shared with whatever other requests' completions are
// waiting. Anything else (failures, retries, DLQ moves, an item twice) is
// the general path (AckInTx, ackstate.go): two statements in one short
// transaction. Neither count grows with the batch.
//
// The retry layers of an ack, all here: the combiner (queen/combine) runs
// a call that would repeat another's item, and every call after a
// permanent error, by itself; after a cursor lock held past
// store.LockWait it runs each call alone, outside its slots; under both,
// the contention retry (Options.Retry) runs a statement
// that lost a lock race again.
func (c *Consumer) Ack(ctx context.Context, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
	if canary.On("ack-ignores-tenant") && len(items) > 0 {
		tenant = c.ownerOf(ctx, items[0].PartitionID, tenant)
	}
	group = store.AckGroup(group)
	ctx, cancel := c.o.Store.Bound(ctx)
	defer cancel()
	if store.AllCompletedAndDistinct(items) {
		return c.ackCompleted(ctx, tenant, group, items)
	}
	return AckInTx(ctx, c.o.Store, tenant, group, items)
}

// ownerOf is the tenant owning partition pid, or asked when it cannot be
// read: the ack-ignores-tenant canary acks as the owner, whoever asked.
func (c *Consumer) ownerOf(ctx context.Context, pid, asked string) string {
	owner, err := c.o.Store.PartitionOwner(ctx, pid)
	if err != nil {
		return asked
	}
	return owner
}

// newAckCombiner builds the ack combiner over o's store.
func newAckCombiner(o Options) *combine.Combiner[store.AckRow, store.AckResult] {
	if o.AckStatements <= 0 {
		o.AckStatements = 4
	}
	if o.AckBatchRows <= 0 {
		o.AckBatchRows = 1000
	}
	st := o.Store
	statement := func(alone bool) combine.Statement[store.AckRow, store.AckResult] {
		return func(ctx context.Context, rows []store.AckRow) ([]store.AckResult, error) {
			var out []store.AckResult
			err := o.Retry.Run(ctx, alone, func(ctx context.Context) (err error) {
				out, err = st.AckCompletions(ctx, rows)
				return err
			})
			return out, err
		}
	}
	return combine.New(combine.Options[store.AckRow, store.AckResult]{
		Joint: statement(false), Alone: statement(true), Key: ackKey, Apart: ackRepeats,
		MaxInFlight: o.AckStatements, MaxRows: o.AckBatchRows, SwapCanary: "ack-combiner-swaps",
		Permanent: store.IsPermanent, LockTimedOut: store.LockTimedOut, Split: store.Moved})
}

// ackCompleted completes items of one request through the ack combiner,
// with the completions of whatever other requests are waiting.
func (c *Consumer) ackCompleted(ctx context.Context, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
	rows := make([]store.AckRow, len(items))
	for i, it := range items {
		rows[i] = store.AckRow{AckItem: it, Tenant: tenant, Group: group}
	}
	out, err := c.acks.Do(ctx, rows)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Index = i
	}
	return out, nil
}

// ackRepeats keeps apart from the joint statement the calls that would
// repeat an item of an earlier call (a client's retried ack): no
// (partition, transactionId, group) may appear twice in ackCompletedSQL.
func ackRepeats(calls [][]store.AckRow) []bool {
	type key struct{ pid, txid, group string }
	seen := map[key]bool{}
	apart := make([]bool, len(calls))
	for i, rows := range calls {
		for _, r := range rows {
			apart[i] = apart[i] || seen[key{r.PartitionID, r.TransactionID, r.Group}]
		}
		if apart[i] {
			continue
		}
		for _, r := range rows {
			seen[key{r.PartitionID, r.TransactionID, r.Group}] = true
		}
	}
	return apart
}

// ackKey is the cursor row an ack row locks.
func ackKey(r store.AckRow) string { return r.PartitionID + "/" + r.Group }
