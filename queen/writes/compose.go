package writes

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/store"
)

// The writes several paths compose inside a transaction their caller
// begins: the rows of a push (minted, then sealed), the append of a
// transaction, a streams cycle or a timer fire, and the timers' ops. Each
// runs the store's statements on the executor it is handed.

// BuildRows makes the rows the append stores for items whose partitions are
// resolved already (pids[i] is items[i]'s, queen/names resolves them):
// their message ids minted (store.NewRows), their payloads sealed
// (SealRows). It neither combines nor retries.
func (w *Policy) BuildRows(ctx context.Context, tenant string, items []store.PushItem, pids []string, producerSub string) ([]store.AppendRow, error) {
	rows := w.st.NewRows(items, pids, producerSub)
	if err := w.SealRows(ctx, tenant, items, rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// AppendInTx appends rows inside tx (a repeated (partition, transactionId)
// answers duplicate): queen/txn's and queen/streams'. A partition deleted
// meanwhile (its cached id is stale) fails the append with a
// *store.GoneError naming the gone ids, wrapping a rollback.
func (w *Policy) AppendInTx(ctx context.Context, tx pgx.Tx, rows []store.AppendRow) ([]store.AppendOut, error) {
	return w.appendInTx(ctx, tx, rows, func() error {
		return store.Rejected("push_rejected", "a partition was deleted during the transaction")
	})
}

// AppendFiredInTx is AppendInTx for a timer fire (queen/sweeper): the
// same append, but a gone partition's error, which the sweeper logs when
// the fresh retry meets it again, is no business rollback and names the
// timers.
func (w *Policy) AppendFiredInTx(ctx context.Context, tx pgx.Tx, rows []store.AppendRow) ([]store.AppendOut, error) {
	return w.appendInTx(ctx, tx, rows, func() error {
		return fmt.Errorf("a partition was deleted while timers fired into it")
	})
}

// appendInTx appends rows inside tx; gone makes the error a
// *store.GoneError carries when a row's partition no longer exists (made
// only then).
func (w *Policy) appendInTx(ctx context.Context, tx pgx.Tx, rows []store.AppendRow, gone func() error) ([]store.AppendOut, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	out, err := w.Append(ctx, tx, rows, "")
	if err != nil {
		return nil, err
	}
	if ids := store.GoneIDs(rows, out); len(ids) > 0 {
		return nil, &store.GoneError{Partitions: ids, Err: gone()}
	}
	return out, nil
}

// ApplyTimers runs ops on q (a transaction its caller began: the timers
// route's, store.InTx, or a transaction's), one statement each
// (store.ApplyTimer), and answers one result each, in order. A payload is
// sealed at schedule time when its queue encrypts (SealTimer), so it is
// never at rest in the clear; the fire stores it as it is. An op naming a
// timer already named earlier in the call is the caller's to refuse before
// this.
func (w *Policy) ApplyTimers(ctx context.Context, q store.Executor, tenant, producerSub string, ops []store.TimerOp) ([]store.TimerResult, error) {
	out := make([]store.TimerResult, len(ops))
	for i, op := range ops {
		var err error
		if out[i], err = w.applyTimer(ctx, q, tenant, producerSub, op); err != nil {
			return nil, fmt.Errorf("timer %d (%s %s/%s): %w", i, op.Op, op.Queue, op.TimerKey, err)
		}
	}
	return out, nil
}

// applyTimer is one op of ApplyTimers: the database instant read first,
// then a schedule's message id minted, then its payload sealed, in the
// order the store ran them when it sealed itself (a simulated run replays
// the same reads of time and ids).
func (w *Policy) applyTimer(ctx context.Context, q store.Executor, tenant, producerSub string, op store.TimerOp) (store.TimerResult, error) {
	p := store.TimerParams{Tenant: tenant, ProducerSub: producerSub, Op: op, Payload: op.Payload, Now: w.st.DBNow()}
	var err error
	switch op.Op {
	case "schedule":
		if p.Payload == nil {
			p.Payload = json.RawMessage("null")
		}
		p.MessageID = w.st.NewID()
		p.Payload, p.Sealed, err = w.SealTimer(ctx, q, tenant, op.Queue, p.Payload)
	case "reschedule":
		if p.Payload != nil {
			p.Payload, p.Sealed, err = w.SealTimer(ctx, q, tenant, op.Queue, p.Payload)
		}
	}
	if err != nil {
		return store.TimerResult{}, err
	}
	return w.st.ApplyTimer(ctx, q, p)
}
