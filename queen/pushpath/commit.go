package pushpath

import (
	"context"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// The retry layers of a push, outermost first, all here:
//
//   - the stale-name retry (names.Retry, in queen/names): a cached
//     partition id that names a partition deleted through another broker
//     is forgotten and only the items whose partition was gone are pushed
//     again, once (rows in partitions that exist commit whatever others do);
//   - the combiner (queen/combine): concurrent pushes share one append
//     statement; a permanent error re-runs each push by itself, a lock wait
//     that ran out (store.LockWait) sends each push to run alone, outside
//     the combiner's slots;
//   - the contention retry (combine.Retry, Options.Retry): a
//     statement that lost a lock race runs again after a short pause; in a
//     slot a lock wait that ran out returns at once, alone it is tried again
//     for as long as the push's bound allows;
//   - the needs-seal re-run (queen/writes' Append): an append that found a row the
//     encryption hint let through unsealed wrote nothing; the rows are
//     sealed and the append runs again (refused without a key).
//
// Anything that still fails is the push's error: Push decides whether the
// spool keeps it.

// newCombiner builds the push combiner over o's store.
func newCombiner(o Options) *combine.Combiner[store.AppendRow, store.AppendOut] {
	if o.PushStatements <= 0 {
		o.PushStatements = 4
	}
	if o.PushBatchRows <= 0 {
		o.PushBatchRows = 1000
	}
	st, w := o.Store, o.Writes
	statement := func(alone bool) combine.Statement[store.AppendRow, store.AppendOut] {
		return func(ctx context.Context, rows []store.AppendRow) ([]store.AppendOut, error) {
			var out []store.AppendOut
			err := o.Retry.Run(ctx, alone, func(ctx context.Context) (err error) {
				out, err = appendRows(ctx, st, w, rows)
				return err
			})
			return out, err
		}
	}
	return combine.New(combine.Options[store.AppendRow, store.AppendOut]{
		Joint: statement(false), Alone: statement(true), Key: store.AppendRow.PartitionID,
		MaxInFlight: o.PushStatements, MaxRows: o.PushBatchRows, SwapCanary: "combiner-swaps", AloneByKey: true,
		Permanent: store.IsPermanent, LockTimedOut: store.LockTimedOut, Split: store.Moved})
}

// appendRows is one append over rows through the write policy (sealing,
// in-batch dedup; queen/writes), waiting at most store.LockWait for a
// partition's lock. The stranded canary commits it the reference broker's
// way instead (appendStranded).
func appendRows(ctx context.Context, st *store.Store, w *writes.Policy, rows []store.AppendRow) ([]store.AppendOut, error) {
	if canary.On("stranded") {
		return appendStranded(ctx, st, w, rows)
	}
	return w.Append(ctx, st.Pool(), rows, store.LockWait())
}

// appendStranded is the append as the stranded canary runs it: through the
// write policy in an explicit transaction of its own (the append statement
// that canary rewrites), then the partitions' order moved only after COMMIT
// (store.AdvanceStranded).
func appendStranded(ctx context.Context, st *store.Store, w *writes.Policy, rows []store.AppendRow) ([]store.AppendOut, error) {
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	out, err := w.Append(ctx, tx, rows, "")
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return out, st.AdvanceStranded(ctx, rows)
}

// commit appends items and returns one result per item, in input order. It
// returns only after COMMIT: a "queued" answer is durable. Queues and
// partitions are created on first use. Concurrent pushes are combined into
// one statement.
func (p *Path) commit(ctx context.Context, tenant string, items []store.PushItem, producerSub string) ([]store.PushResult, error) {
	out := make([]store.PushResult, len(items))
	if len(items) == 0 {
		return out, nil
	}
	todo := make([]int, len(items))
	for i := range todo {
		todo[i] = i
	}
	// Rows in partitions that exist commit whatever others do, so a retry
	// (a cached partition was deleted through another broker) pushes only
	// the items whose partition was gone.
	_, err := names.Retry(p.o.Names, func() (struct{}, error) {
		var err error
		todo, err = p.pushSome(ctx, tenant, items, todo, producerSub, out)
		return struct{}{}, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pushSome pushes items[todo] and answers each stored one in out. The items
// whose partition was gone come back, with an error naming it.
func (p *Path) pushSome(ctx context.Context, tenant string, items []store.PushItem, todo []int, producerSub string,
	out []store.PushResult) ([]int, error) {
	sub := make([]store.PushItem, len(todo))
	for j, i := range todo {
		sub[j] = items[i]
	}
	rows, err := pushRows(ctx, p.o.Names, p.o.Writes, tenant, sub, producerSub)
	if err != nil {
		return todo, err
	}
	res, err := p.pushes.Do(ctx, rows)
	if err != nil {
		return todo, err
	}
	return store.PushAnswers(items, todo, rows, res, out)
}

// pushRows resolves the items' partitions (queen/names) and makes their
// rows (queen/writes: ids minted, payloads sealed).
func pushRows(ctx context.Context, n *names.Names, w *writes.Policy, tenant string, items []store.PushItem, producerSub string) ([]store.AppendRow, error) {
	pids, err := n.PushPartitions(ctx, tenant, items)
	if err != nil {
		return nil, err
	}
	return w.BuildRows(ctx, tenant, items, pids, producerSub)
}
