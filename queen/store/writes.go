package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// WritePolicy is the policy around the append statement, queen/pushpath's
// (pushpath.WritesFor): whether a queue encrypts (a cached hint, forgotten
// when the queue is configured or deleted), sealing what is written, the
// append run again when appendSQL found a row the hint let through
// unsealed, and the in-batch dedup (a repeated (partition, transactionId)
// answers duplicate). The store holds none of it. The wiring hands it to New
// (Options.Writes) because the composite writes that still begin their own
// transaction here (BuildRows, AppendInTx, AppendFiredInTx, RetryDeadLetter,
// the timers' schedule) and queen/names, below pushpath, run through it.
type WritePolicy interface {
	// SealRows makes each row's payload what its queue stores (rows[i] is
	// items[i]'s).
	SealRows(ctx context.Context, tenant string, items []PushItem, rows []AppendRow) error
	// SealTimer seals a timer's payload at schedule time when its queue
	// encrypts, reading the setting on q; it reports whether it sealed.
	SealTimer(ctx context.Context, q Executor, tenant, queue string, payload json.RawMessage) (json.RawMessage, bool, error)
	// Append appends rows on q (AppendRows), which may repeat a
	// (partition, transactionId) pair, waiting at most lockWait for a
	// partition's lock ("": the session's lock_timeout).
	Append(ctx context.Context, q Executor, rows []AppendRow, lockWait string) ([]AppendOut, error)
	// ForgetSealHint drops what the policy caches of a queue's encryption:
	// it was configured or deleted, here or through another broker.
	ForgetSealHint(tenant, queue string)
}

// Writes is the store's write policy, for the policy packages that run the
// append themselves (queen/pushpath) and for queen/names' forgetting.
func (s *Store) Writes() WritePolicy { return s.writes }

// statementsOnly is the write policy of a store wired without one (a test's
// or a tool's): nothing is sealed or cached, and what the policy would
// decide is refused instead of guessed: a row to seal, as by a broker
// without a key, and a repeated (partition, transactionId) in one append.
type statementsOnly struct{ s *Store }

func (statementsOnly) SealRows(context.Context, string, []PushItem, []AppendRow) error { return nil }

func (statementsOnly) SealTimer(_ context.Context, _ Executor, _, _ string, payload json.RawMessage) (json.RawMessage, bool, error) {
	return payload, false, nil
}

func (statementsOnly) ForgetSealHint(string, string) {}

func (w statementsOnly) Append(ctx context.Context, q Executor, rows []AppendRow, lockWait string) ([]AppendOut, error) {
	type key struct{ pid, txid string }
	seen := make(map[key]bool, len(rows))
	for _, r := range rows {
		if seen[key{r.pid, r.txid}] {
			return nil, fmt.Errorf("store: partition %s (transactionId %s) repeats in one append and no write policy drops the repeat (Options.Writes)", r.pid, r.txid)
		}
		seen[key{r.pid, r.txid}] = true
	}
	out, err := w.s.AppendRows(ctx, q, AppendRowsParams{Rows: rows, LockWait: lockWait})
	if err != nil {
		return nil, err
	}
	for i, o := range out {
		if o.needsSeal {
			return nil, UnsealedRefused(rows[i])
		}
	}
	return out, nil
}

// UnsealedRefused is the refusal of a row appendSQL found unsealed for a
// queue that encrypts, by a broker that holds no key: it is never stored in
// the clear.
func UnsealedRefused(r AppendRow) error {
	return &RefusedError{Reason: fmt.Sprintf("partition %s (transactionId %s): the queue has encryptionEnabled and this broker has no QUEEN_ENCRYPTION_KEY", r.pid, r.txid)}
}
