package txn

import (
	"context"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// plan is what a transaction's operations ask for: the items pushed, the
// indexes of the acks of each consumer group, the groups in order, and the
// cursor rows to lock first.
type plan struct {
	items   []store.PushItem
	byGroup map[string][]int
	groups  []string
	lock    store.TxnLockParams
}

// planOps sorts a transaction's operations into pushed items and acks by
// group (groups in name order), refusing an unknown operation type.
func planOps(tenant string, ops []Op, requiredLeases []string) (plan, error) {
	p := plan{byGroup: map[string][]int{}, lock: store.TxnLockParams{Leases: append([]string{}, requiredLeases...), Tenant: tenant}}
	for i, op := range ops {
		switch op.Type {
		case "push":
			p.items = append(p.items, op.Items...)
		case "ack":
			g := op.Group
			if g == "" {
				g = store.QueueModeGroup
			}
			if _, ok := p.byGroup[g]; !ok {
				p.groups = append(p.groups, g)
			}
			p.byGroup[g] = append(p.byGroup[g], i)
			p.lock.PartitionIDs = append(p.lock.PartitionIDs, op.Ack.PartitionID)
			p.lock.Groups = append(p.lock.Groups, g)
		default:
			return p, store.Rejected("bad_request", "operations[%d]: unknown type %q", i, op.Type)
		}
	}
	sort.Strings(p.groups)
	return p, nil
}

// lockCursors locks the cursor rows the transaction relies on (nothing to
// lock, no statement) and checks every required lease is held.
func lockCursors(ctx context.Context, s *store.Store, tx pgx.Tx, p store.TxnLockParams, required []string) error {
	if len(p.Leases) == 0 && len(p.PartitionIDs) == 0 {
		return nil
	}
	held, err := s.LockTxnCursors(ctx, tx, p)
	if err != nil {
		return err
	}
	for _, lease := range required {
		if !held[lease] {
			return store.Rejected("ack_rejected", "lease %s is invalid or expired", lease)
		}
	}
	return nil
}

// ackGroups applies a transaction's acks in tx, one strict batch per
// consumer group, and records each ack's outcome at its operation's index
// in acked. An ack without a lease id takes the transaction's one required
// lease.
func ackGroups(ctx context.Context, s *store.Store, tx pgx.Tx, req Request, p plan, acked []store.AckResult) error {
	for _, g := range p.groups {
		idx := p.byGroup[g]
		acks := make([]store.AckItem, len(idx))
		for j, i := range idx {
			acks[j] = req.Ops[i].Ack
			if acks[j].LeaseID == "" && len(req.RequiredLeases) == 1 {
				acks[j].LeaseID = req.RequiredLeases[0]
			}
		}
		res, err := consume.AckStrictInTx(ctx, s, tx, req.Tenant, g, acks)
		if err != nil {
			return err
		}
		for j, i := range idx {
			acked[i] = res[j]
		}
	}
	return nil
}

// applyExtras applies a transaction's timers, then its KV operations, in
// tx, their results into more (the timers' kept if the KV fail).
func applyExtras(ctx context.Context, s *store.Store, w *writes.Policy, tx pgx.Tx, req Request, more *ExtrasResult) error {
	x := req.Extras
	var err error
	if len(x.Timers) > 0 {
		if more.Timers, err = w.ApplyTimers(ctx, tx, req.Tenant, req.ProducerSub, x.Timers); err != nil {
			return err
		}
	}
	if len(x.KV) > 0 {
		if more.KV, err = s.ApplyKVInTx(ctx, tx, req.Tenant, x.KV, x.MaxKVRead); err != nil {
			return err
		}
	}
	return nil
}

// results gives each ack its result and each pushed item its own, in the
// order of the operations and their items.
func results(ops []Op, rows []store.AppendRow, pushed []store.AppendOut, acked []store.AckResult) []Result {
	var out []Result
	next := 0
	for i, op := range ops {
		if op.Type == "ack" {
			out = append(out, Result{Index: i, Type: "ack", Success: true, TransactionID: op.Ack.TransactionID,
				PartitionID: op.Ack.PartitionID, QueueName: acked[i].QueueName, DLQ: acked[i].DLQ})
			continue
		}
		for _, it := range op.Items {
			r, o := rows[next], pushed[next]
			next++
			out = append(out, Result{Index: i, Type: "push", Success: true, TransactionID: r.TransactionID(),
				MessageID: o.MessageID(), PartitionID: r.PartitionID(), QueueName: it.Queue, Duplicate: !o.Queued()})
		}
	}
	return out
}
