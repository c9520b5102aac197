// Package streams owns the streams cycle (POST /streams/v1/cycle), the
// server side of Queen's streaming SDKs (contract-streams.md), composed of
// queen/store's statements and queen/writes' append in one PostgreSQL
// transaction.
//
// The contract: a cycle commits the query's state changes for one source
// partition, its sink pushes and its source ack together, or nothing.
//
//   - The tenant's query and the tenant's partition must exist ("query not
//     found", "partition not found"); cycles of one (query, partition) run
//     one at a time from that check until commit.
//   - State ops apply in order: the last op on a key wins.
//   - Sink pushes are appended by one statement; a transactionId already
//     stored answers duplicate.
//   - The source ack needs the acked message ("Message not found") and the
//     group's lease held, live in database time and covering it ("Invalid
//     or expired lease"), so a cycle that lost its lease leaves nothing
//     behind and the next pop replays the same messages onto the same
//     state. A nack gives the lease back and keeps the cursor.
//   - A business failure is an error for which store.IsRollback is true,
//     with the text the SDKs show; anything else is the database's.
//   - A sink push into a partition whose cached id went stale (deleted
//     through another broker) rolls back and runs once more, resolved
//     afresh (names.Retry).
package streams

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// StateOp is one state change: an upsert of Value (JSON) or a delete.
type StateOp struct {
	Delete bool
	Key    string
	Value  json.RawMessage
}

// CycleAck is a cycle's source ack: the message (by transactionId, in the
// cycle's partition) the group's cursor moves to, under LeaseID.
type CycleAck struct {
	TransactionID, LeaseID string
	Completed              bool // false: a nack (lease given back, cursor kept)
	Count                  int
}

// CycleParams is one cycle.
type CycleParams struct {
	Tenant, QueryID, PartitionID, Group string
	State                               []StateOp
	Push                                []store.PushItem
	Ack                                 *CycleAck
	ReleaseLease                        bool
	ProducerSub                         string
}

// CycleAckResult is what the ack did.
type CycleAckResult struct {
	Count         int
	LeaseReleased bool
}

// CycleResult is a committed cycle.
type CycleResult struct {
	QueueName       string
	StateOpsApplied int
	Pushed          []store.PushResult
	Ack             *CycleAckResult
}

// Cycle commits one cycle through n's store, resolving the sinks' names
// through n and appending through the broker's write policy w, or nothing
// (the package doc states the contract).
func Cycle(ctx context.Context, n *names.Names, w *writes.Policy, p CycleParams) (CycleResult, error) {
	return names.Retry(n, func() (CycleResult, error) { return cycleOnce(ctx, n, w, p) })
}

// cycleOnce is one attempt of Cycle.
func cycleOnce(ctx context.Context, n *names.Names, w *writes.Policy, p CycleParams) (CycleResult, error) {
	s := n.Store()
	var res CycleResult
	// Sink names resolve (queues and partitions are created) before the
	// transaction: creating them is harmless if it rolls back.
	pids, err := n.PushPartitions(ctx, p.Tenant, p.Push)
	if err != nil {
		return res, err
	}
	rows, err := w.BuildRows(ctx, p.Tenant, p.Push, pids, p.ProducerSub)
	if err != nil {
		return res, err
	}
	ctx, cancel := s.Bound(ctx)
	defer cancel()
	var pushed []store.AppendOut
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var err error
		if res.QueueName, err = check(ctx, s, tx, p); err != nil {
			return err
		}
		if err := applyState(ctx, s, tx, p); err != nil {
			return err
		}
		if pushed, err = w.AppendInTx(ctx, tx, rows); err != nil {
			return err
		}
		if p.Ack != nil {
			res.Ack, err = ack(ctx, s, tx, p)
		}
		return err
	})
	if err != nil {
		return CycleResult{}, err
	}
	res.StateOpsApplied = len(p.State)
	res.Pushed = pushResults(p.Push, rows, pushed)
	return res, nil
}

// check refuses a cycle of an unknown query or partition, and answers the
// partition's queue name.
func check(ctx context.Context, s *store.Store, tx pgx.Tx, p CycleParams) (string, error) {
	queue, queryOK, err := s.CycleCheck(ctx, tx, store.CycleCheckParams{PartitionID: p.PartitionID, Tenant: p.Tenant, QueryID: p.QueryID})
	switch {
	case err != nil:
		return "", err
	case !queryOK:
		return "", store.Rollback("query not found")
	case queue == nil:
		return "", store.Rollback("partition not found")
	}
	return *queue, nil
}

// applyState writes the net effect of the cycle's state ops: one upsert,
// one delete, each only when it has keys.
func applyState(ctx context.Context, s *store.Store, tx pgx.Tx, p CycleParams) error {
	upKeys, upValues, delKeys := collapseState(p.State)
	if len(upKeys) > 0 {
		if err := s.UpsertState(ctx, tx, store.StateUpsertParams{QueryID: p.QueryID, PartitionID: p.PartitionID,
			Keys: upKeys, Values: upValues}); err != nil {
			return err
		}
	}
	if len(delKeys) > 0 {
		return s.DeleteState(ctx, tx, store.StateDeleteParams{QueryID: p.QueryID, PartitionID: p.PartitionID, Keys: delKeys})
	}
	return nil
}

// ack applies the source ack inside the cycle's transaction.
func ack(ctx context.Context, s *store.Store, tx pgx.Tx, p CycleParams) (*CycleAckResult, error) {
	a := p.Ack
	seq, held, err := s.CycleAckCheck(ctx, tx, store.CycleAckCheckParams{PartitionID: p.PartitionID,
		TransactionID: a.TransactionID, Group: p.Group, LeaseID: a.LeaseID})
	if err != nil {
		return nil, err
	}
	if seq == nil {
		return nil, store.Rollback("Message not found")
	}
	if !held && !canary.On("cycle-ignores-lease") {
		return nil, store.Rollback("Invalid or expired lease")
	}
	release := p.ReleaseLease || !a.Completed
	if err := s.CycleAckMove(ctx, tx, store.CycleAckParams{PartitionID: p.PartitionID, TransactionID: a.TransactionID,
		Group: p.Group, Count: a.Count, Release: release, Completed: a.Completed}); err != nil {
		return nil, err
	}
	out := &CycleAckResult{LeaseReleased: release}
	if a.Completed {
		out.Count = a.Count
	}
	return out, nil
}

// pushResults answers each sink push, in order.
func pushResults(items []store.PushItem, rows []store.AppendRow, pushed []store.AppendOut) []store.PushResult {
	var out []store.PushResult
	for i, r := range rows {
		o := pushed[i]
		pr := store.PushResult{Index: i, Status: "duplicate", MessageID: o.MessageID(), TransactionID: r.TransactionID(),
			PartitionID: r.PartitionID(), QueueName: items[i].Queue, TraceID: items[i].TraceID}
		if o.Queued() {
			pr.Status = "queued"
		}
		out = append(out, pr)
	}
	return out
}

// collapseState reduces ops applied in order to their net effect per key:
// the last op on a key wins (an upsert writes its value, a delete
// removes the row).
func collapseState(ops []StateOp) (upKeys, upValues, delKeys []string) {
	last := map[string]int{}
	for i, op := range ops {
		last[op.Key] = i
	}
	for i, op := range ops {
		if last[op.Key] != i {
			continue
		}
		if op.Delete {
			delKeys = append(delKeys, op.Key)
			continue
		}
		v := op.Value
		if len(v) == 0 {
			v = json.RawMessage(`{}`)
		}
		upKeys, upValues = append(upKeys, op.Key), append(upValues, string(v))
	}
	return upKeys, upValues, delKeys
}
