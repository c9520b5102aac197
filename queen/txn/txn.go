// Package txn owns the transaction route (POST /api/v1/transaction): pushes,
// acks, timers and KV operations applied all-or-nothing in one PostgreSQL
// transaction, composed of queen/store's statements, queen/writes' append
// and timers (sealing, in-batch dedup) and queen/consume's strict ack
// (consume.AckStrictInTx, the general ack's state machine).
//
// The contract:
//
//   - Every lease in RequiredLeases must be live, in database time, and the
//     tenant's, or nothing is written (ack_rejected). The lock that checks
//     them runs first and also locks the cursor rows the acks will move, in
//     (partition, group) order; cursor rows before partition rows is the one
//     global lock order, so concurrent transactions cannot deadlock.
//   - Every pushed item is appended by one statement; a transactionId
//     already stored answers duplicate and does not abort, so a retried
//     transaction is safe.
//   - Acks run one strict batch per consumer group (groups in name order):
//     a failed or dlq ack goes straight to the DLQ, any per-item failure
//     rolls everything back. An ack without a lease id takes the
//     transaction's one required lease.
//   - Timers, then KV operations, run after, in the same transaction; a
//     Required KV op that loses its precondition rolls everything back.
//   - A business failure is an error for which store.IsRollback is true
//     (the route answers success:false); anything else is the database's.
//   - A push into a partition whose cached id went stale (deleted through
//     another broker) rolls back and runs once more with the names resolved
//     afresh (names.Retry).
//
// Statements: one lock, one append for every pushed item, one read and one
// write per consumer group acked, however many operations, then one per
// timer or KV operation.
package txn

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// Op is one operation of a transaction: a push of Items, or one Ack for
// Group.
type Op struct {
	Type  string // push or ack
	Items []store.PushItem
	Ack   store.AckItem
	Group string
	// Queue is an ack's queue as a router with shards found it (what a
	// moved answer invalidates; Ack.Epoch its epoch); "" without shards.
	// Never on the wire.
	Queue string
}

// Result is the outcome of one pushed item or one ack.
type Result struct {
	Index         int
	Type          string
	Success       bool
	TransactionID string
	MessageID     string
	PartitionID   string
	QueueName     string
	Duplicate     bool
	Error         string
	DLQ           bool
}

// Extras are the timers and KV operations a transaction applies too, after
// its pushes and acks, in the same PostgreSQL transaction: a consumer can
// ack a message and schedule its follow-up, or record its progress,
// atomically.
type Extras struct {
	Timers    []store.TimerOp
	KV        []store.KVOp
	MaxKVRead int // QUEEN_KV_MAX_READ_BYTES (0: no bound)
}

// ExtrasResult are their outcomes, in order.
type ExtrasResult struct {
	Timers []store.TimerResult
	KV     []store.KVResult
}

// Request is one transaction: its operations, the leases it relies on and
// its extras, for Tenant, pushed as ProducerSub.
type Request struct {
	Tenant         string
	Ops            []Op
	RequiredLeases []string
	ProducerSub    string
	Extras         Extras
}

// Run applies req all-or-nothing through n's store, resolving names
// through n and writing (rows, appends, timers) through the broker's write
// policy w (the package doc states the contract), and answers one Result
// per ack and per pushed item, in the order of the operations and their
// items.
func Run(ctx context.Context, n *names.Names, w *writes.Policy, req Request) ([]Result, ExtrasResult, error) {
	type answer struct {
		res  []Result
		more ExtrasResult
	}
	once := func() (answer, error) {
		res, more, err := runOnce(ctx, n, w, req)
		return answer{res, more}, err
	}
	if canary.On("stale-cache-no-retry") {
		// As before issue 28 item 12: the stale id stays cached, and
		// the transaction fails until the entry's ttl.
		a, err := once()
		return a.res, a.more, err
	}
	a, err := names.Retry(n, once)
	return a.res, a.more, err
}

// runOnce is one attempt of Run.
func runOnce(ctx context.Context, n *names.Names, w *writes.Policy, req Request) ([]Result, ExtrasResult, error) {
	s := n.Store()
	var more ExtrasResult
	pushTenant := req.Tenant
	if canary.On("tenant-dropped") {
		pushTenant = store.DefaultTenant
	}
	p, err := planOps(req.Tenant, req.Ops, req.RequiredLeases)
	if err != nil {
		return nil, more, err
	}
	// Names resolve (and queues and partitions are created) before the
	// transaction: creating them is harmless if it rolls back.
	pids, err := n.PushPartitions(ctx, pushTenant, p.items)
	if err != nil {
		return nil, more, err
	}
	rows, err := w.BuildRows(ctx, pushTenant, p.items, pids, req.ProducerSub)
	if err != nil {
		return nil, more, err
	}
	ctx, cancel := s.Bound(ctx)
	defer cancel()
	var pushed []store.AppendOut
	acked := make([]store.AckResult, len(req.Ops))
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if err := lockCursors(ctx, s, tx, p.lock, req.RequiredLeases); err != nil {
			return err
		}
		var err error
		if pushed, err = w.AppendInTx(ctx, tx, rows); err != nil {
			return err
		}
		if err := ackGroups(ctx, s, tx, req, p, acked); err != nil {
			return err
		}
		return applyExtras(ctx, s, w, tx, req, &more)
	})
	if err != nil {
		return nil, more, err
	}
	return results(req.Ops, rows, pushed, acked), more, nil
}
