package store

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
)

// TxnOp is one operation of an atomic transaction: a push of Items, or one
// Ack for Group.
type TxnOp struct {
	Type  string // push or ack
	Items []PushItem
	Ack   AckItem
	Group string
}

// TxnResult is the outcome of one pushed item or one ack.
type TxnResult struct {
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

// txnLockSQL locks, before anything else in a transaction, every cursor row
// it relies on: the rows holding its requiredLeases and the rows its acks
// will move, in (partition, group) order. Cursor rows first, partition rows
// (appendSQL) after, is the one global lock order, so concurrent
// transactions cannot deadlock; and a required lease cannot expire into
// someone else's hands, or be acked away, while the transaction runs.
const txnLockSQL = `
SELECT pc.worker_id, pc.worker_id = ANY($1::text[]) AND pc.lease_expires_at > coalesce($5::timestamptz, now())
	AND q.tenant_id = $4::uuid
FROM queen.partition_consumers pc
JOIN queen.queues q ON q.id = pc.queue_id
WHERE pc.worker_id = ANY($1::text[])
	OR (pc.partition_id, pc.consumer_group) IN (SELECT * FROM unnest($2::uuid[], $3::text[]))
ORDER BY pc.partition_id, pc.consumer_group
FOR UPDATE OF pc`

// txnLockParams are txnLockSQL's arguments, $1 to $5; lockForTxn sets Now.
type txnLockParams struct {
	Leases       []string
	PartitionIDs []string
	Groups       []string
	Tenant       string
	Now          *time.Time
}

// Transaction applies ops all-or-nothing. Every lease in requiredLeases must
// be live (and the tenant's) or nothing is written. A business failure comes
// back as an error for which IsRollback is true; the caller answers
// success:false. A push of an existing transactionId is reported duplicate
// and does not abort the transaction, so a retried transaction is safe.
//
// Statements: one lock, one append for every pushed item, and one read and
// one write per consumer group acked, however many operations.
func (s *Store) Transaction(ctx context.Context, tenant string, ops []TxnOp, requiredLeases []string, producerSub string) ([]TxnResult, error) {
	res, _, err := s.TransactionWith(ctx, tenant, ops, requiredLeases, producerSub, TxnExtras{})
	return res, err
}

// TxnExtras are the timers and KV operations a transaction applies too,
// after its pushes and acks, in the same PostgreSQL transaction: a consumer
// can ack a message and schedule its follow-up, or record its progress,
// atomically.
type TxnExtras struct {
	Timers    []TimerOp
	KV        []KVOp
	MaxKVRead int // QUEEN_KV_MAX_READ_BYTES (0: no bound)
}

// TxnExtrasResult are their outcomes, in order.
type TxnExtrasResult struct {
	Timers []TimerResult
	KV     []KVResult
}

// TransactionWith is Transaction with timers and KV operations. A KV op
// marked Required that loses its precondition rolls everything back, with a
// *KVPrecondition error. A push into a partition whose cached id went stale
// (deleted through another broker) rolls back and runs once more with the
// names resolved afresh (freshRetry).
func (s *Store) TransactionWith(ctx context.Context, tenant string, ops []TxnOp, requiredLeases []string, producerSub string,
	extras TxnExtras) ([]TxnResult, TxnExtrasResult, error) {
	type answer struct {
		res  []TxnResult
		more TxnExtrasResult
	}
	once := func() (answer, error) {
		res, more, err := s.transactionOnce(ctx, tenant, ops, requiredLeases, producerSub, extras)
		return answer{res, more}, err
	}
	if canary.On("stale-cache-no-retry") {
		// As before issue 28 item 12: the stale id stays cached, and
		// the transaction fails until the entry's ttl.
		a, err := once()
		return a.res, a.more, err
	}
	a, err := freshRetry(s, once)
	return a.res, a.more, err
}

// transactionOnce is one attempt of TransactionWith.
func (s *Store) transactionOnce(ctx context.Context, tenant string, ops []TxnOp, requiredLeases []string, producerSub string,
	extras TxnExtras) ([]TxnResult, TxnExtrasResult, error) {
	var more TxnExtrasResult
	pushTenant := tenant
	if canary.On("tenant-dropped") {
		pushTenant = DefaultTenant
	}
	plan, err := planTxn(tenant, ops, requiredLeases)
	if err != nil {
		return nil, more, err
	}
	// Names resolve (and queues and partitions are created) before the
	// transaction: creating them is harmless if it rolls back.
	rows, err := s.pushRows(ctx, pushTenant, plan.items, producerSub)
	if err != nil {
		return nil, more, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var pushed []AppendOut
	acked := make([]AckResult, len(ops))
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockForTxn(ctx, tx, plan.lp, requiredLeases); err != nil {
			return err
		}
		var err error
		if pushed, err = s.appendInTx(ctx, tx, rows); err != nil {
			return err
		}
		if err := s.ackTxnGroups(ctx, tx, tenant, ops, plan, requiredLeases, acked); err != nil {
			return err
		}
		return s.applyTxnExtras(ctx, tx, tenant, producerSub, extras, &more)
	})
	if err != nil {
		return nil, more, err
	}
	return txnResults(ops, rows, pushed, acked), more, nil
}

// txnPlan is what a transaction's operations ask for: the items pushed,
// the indexes of the acks of each consumer group, the groups in order, and
// the cursor rows to lock first.
type txnPlan struct {
	items   []PushItem
	byGroup map[string][]int
	groups  []string
	lp      txnLockParams
}

// planTxn sorts a transaction's operations into pushed items and acks by
// group (groups in name order), refusing an unknown operation type.
func planTxn(tenant string, ops []TxnOp, requiredLeases []string) (txnPlan, error) {
	p := txnPlan{byGroup: map[string][]int{}, lp: txnLockParams{Leases: append([]string{}, requiredLeases...), Tenant: tenant}}
	for i, op := range ops {
		switch op.Type {
		case "push":
			p.items = append(p.items, op.Items...)
		case "ack":
			g := op.Group
			if g == "" {
				g = QueueModeGroup
			}
			if _, ok := p.byGroup[g]; !ok {
				p.groups = append(p.groups, g)
			}
			p.byGroup[g] = append(p.byGroup[g], i)
			p.lp.PartitionIDs = append(p.lp.PartitionIDs, op.Ack.PartitionID)
			p.lp.Groups = append(p.lp.Groups, g)
		default:
			return p, rejected("bad_request", "operations[%d]: unknown type %q", i, op.Type)
		}
	}
	sort.Strings(p.groups)
	return p, nil
}

// ackTxnGroups applies a transaction's acks in tx, one ackTx per consumer
// group, and records each ack's outcome at its operation's index in acked.
// An ack without a lease id takes the transaction's one required lease.
func (s *Store) ackTxnGroups(ctx context.Context, tx pgx.Tx, tenant string, ops []TxnOp, p txnPlan, requiredLeases []string,
	acked []AckResult) error {
	for _, g := range p.groups {
		idx := p.byGroup[g]
		acks := make([]AckItem, len(idx))
		for j, i := range idx {
			acks[j] = ops[i].Ack
			if acks[j].LeaseID == "" && len(requiredLeases) == 1 {
				acks[j].LeaseID = requiredLeases[0]
			}
		}
		res, err := s.ackTx(ctx, tx, tenant, g, acks, true)
		if err != nil {
			return err
		}
		for j, i := range idx {
			acked[i] = res[j]
		}
	}
	return nil
}

// applyTxnExtras applies a transaction's timers, then its KV operations,
// in tx, their results into more (the timers' kept if the KV fail).
func (s *Store) applyTxnExtras(ctx context.Context, tx pgx.Tx, tenant, producerSub string, extras TxnExtras, more *TxnExtrasResult) error {
	var err error
	if len(extras.Timers) > 0 {
		if more.Timers, err = s.applyTimers(ctx, tx, tenant, producerSub, extras.Timers); err != nil {
			return err
		}
	}
	if len(extras.KV) > 0 {
		if more.KV, err = s.applyKV(ctx, tx, tenant, extras.KV, extras.MaxKVRead); err != nil {
			return err
		}
	}
	return nil
}

// txnResults gives each ack its result and each pushed item its own, in
// the order of the operations and their items.
func txnResults(ops []TxnOp, rows []AppendRow, pushed []AppendOut, acked []AckResult) []TxnResult {
	var out []TxnResult
	next := 0
	for i, op := range ops {
		if op.Type == "ack" {
			out = append(out, TxnResult{Index: i, Type: "ack", Success: true, TransactionID: op.Ack.TransactionID,
				PartitionID: op.Ack.PartitionID, QueueName: acked[i].QueueName, DLQ: acked[i].DLQ})
			continue
		}
		for _, it := range op.Items {
			r, o := rows[next], pushed[next]
			next++
			out = append(out, TxnResult{Index: i, Type: "push", Success: true, TransactionID: r.txid,
				MessageID: o.messageID, PartitionID: r.pid, QueueName: it.Queue, Duplicate: !o.queued})
		}
	}
	return out
}

// lockForTxn runs txnLockSQL and checks every required lease is held.
func (s *Store) lockForTxn(ctx context.Context, tx pgx.Tx, p txnLockParams, required []string) error {
	if len(p.Leases) == 0 && len(p.PartitionIDs) == 0 {
		return nil
	}
	p.Now = s.dbNow()
	rows, err := tx.Query(ctx, text("txn.lock"), argsOf(p)...)
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for rows.Next() {
		var worker *string
		var holds *bool
		if err := rows.Scan(&worker, &holds); err != nil {
			rows.Close()
			return err
		}
		if worker != nil && holds != nil && *holds {
			held[*worker] = true
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, lease := range required {
		if !held[lease] {
			return rejected("ack_rejected", "lease %s is invalid or expired", lease)
		}
	}
	return nil
}

// appendInTx appends rows inside tx; a partition deleted meanwhile (its
// cached id is stale) rolls the whole transaction back with a *staleIDs
// naming the gone ids, for freshRetry.
func (s *Store) appendInTx(ctx context.Context, tx pgx.Tx, rows []AppendRow) ([]AppendOut, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	out, err := s.appendDistinct(ctx, tx, rows)
	if err != nil {
		return nil, err
	}
	if gone := goneIDs(rows, out); len(gone) > 0 {
		return nil, &staleIDs{partitions: gone, err: rejected("push_rejected", "a partition was deleted during the transaction")}
	}
	return out, nil
}
