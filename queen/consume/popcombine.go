package consume

import (
	"context"
	"sync"
	"time"

	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/store"
)

// Combined pops: wildcard pops of one partition each (every client's pop
// that does not ask for more) that arrive while the pop statements in
// flight run go together in the next one, one statement per (queue,
// group, batch, lease, autoAck, byte budget) among them (store.RunPopMany):
// one scan of the group's cursors, one round trip and one commit for all,
// each pop still claiming its own partition under its own lease. A pop
// that finds a free slot runs alone at once, as before (store.RunPop), so
// a lone consumer waits for nobody.

// runPop runs one pop statement: a one-partition wildcard pop through the
// pop combiner, any other pop by itself.
func (c *Claimer) runPop(ctx context.Context, p store.PopParams) (store.PopRows, error) {
	if p.Partition != "" || p.Partitions != 1 {
		return c.st.RunPop(ctx, p)
	}
	k := popKey{QueueID: p.QueueID, Group: p.Group, Batch: p.Batch, LeaseSeconds: p.LeaseSeconds, AutoAck: p.AutoAck,
		MaxBytes: p.MaxBytes}
	if p.Epoch != nil {
		k.Epoch = *p.Epoch
	}
	out, err := c.pops.Do(ctx, []popCall{{key: k, now: p.Now}})
	if err != nil {
		return store.PopRows{}, err
	}
	return out[0].rows, out[0].err
}

// popKey is what the pops of one combined statement share, the routed
// epoch included: a pop routed by a stale placement fails as moved alone.
type popKey struct {
	QueueID, Group      string
	Batch, LeaseSeconds int
	AutoAck             bool
	MaxBytes, Epoch     int64
}

// popCall is one pop in the pop combiner: its statement's key, and the
// database instant it was asked at (the simulator's; nil in production).
type popCall struct {
	key popKey
	now *time.Time
}

// popOut is one pop's outcome: its rows, or its statement's error.
type popOut struct {
	rows store.PopRows
	err  error
}

// newPopCombiner combines st's one-partition wildcard pops, up to
// statements in flight and maxCalls pops a statement.
func newPopCombiner(st *store.Store, statements, maxCalls int) *combine.Combiner[popCall, popOut] {
	never := func(error) bool { return false }
	return combine.New(combine.Options[popCall, popOut]{
		Joint: func(ctx context.Context, calls []popCall) ([]popOut, error) { return jointPops(ctx, st, calls), nil },
		Alone: func(ctx context.Context, calls []popCall) ([]popOut, error) { return jointPops(ctx, st, calls), nil },
		Key:   func(c popCall) string { return c.key.QueueID + "\x00" + c.key.Group },
		// A pop's rows are its own: no error is another's, and a pop
		// waits for no row lock (SKIP LOCKED), so none runs alone.
		Permanent: never, LockTimedOut: never,
		MaxInFlight: statements, MaxRows: maxCalls, SwapCanary: "pop-combiner-swaps",
	})
}

// jointPops runs calls, one statement per key, the keys' statements at
// once, and answers each call its own partition's rows (or none).
func jointPops(ctx context.Context, st *store.Store, calls []popCall) []popOut {
	out := make([]popOut, len(calls))
	byKey := map[popKey][]int{}
	var keys []popKey
	for i, c := range calls {
		if byKey[c.key] == nil {
			keys = append(keys, c.key)
		}
		byKey[c.key] = append(byKey[c.key], i)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func(idx []int) {
			defer wg.Done()
			popKeyCalls(ctx, st, calls, idx, out)
		}(byKey[k])
	}
	wg.Wait()
	return out
}

// popKeyCalls runs the calls idx of one key as one statement and writes
// their outcomes into out: alone, the one-partition pop; together, the
// combined one.
func popKeyCalls(ctx context.Context, st *store.Store, calls []popCall, idx []int, out []popOut) {
	k := calls[idx[0]].key
	p := store.PopParams{QueueID: k.QueueID, Group: k.Group, Partitions: 1, Batch: k.Batch, LeaseSeconds: k.LeaseSeconds,
		AutoAck: k.AutoAck, MaxBytes: k.MaxBytes, Now: calls[idx[0]].now, Epoch: epochOf(k.Epoch)}
	if len(idx) == 1 {
		rows, err := st.RunPop(ctx, p)
		out[idx[0]] = popOut{rows: rows, err: err}
		return
	}
	many, err := st.RunPopMany(ctx, p, len(idx))
	for j, i := range idx {
		if err != nil {
			out[i] = popOut{err: err}
			continue
		}
		out[i] = popOut{rows: many[j]}
	}
}
