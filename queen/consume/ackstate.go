package consume

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/store"
)

// The general ack: a batch with failures, retries, DLQ moves or an item
// twice, which the combined completions statement does not take. It is two
// statements however long the batch: one read (store.AckRead, which locks
// the cursor rows and judges each item by queen.ack_verdict), the state
// machine below in Go, one write (store.AckWrite). The lease rule is the
// verdict's; Go adds only what earlier items of the same request changed.

// AckInTx applies a general ack batch for one consumer group (resolved:
// store.QueueModeGroup for queue mode) in a short transaction of its own.
// Per-item failures are results, not errors.
func AckInTx(ctx context.Context, st *store.Store, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
	var out []store.AckResult
	err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
		var err error
		out, err = ackTx(ctx, st, tx, tenant, group, items, false)
		return err
	})
	return out, err
}

// AckStrictInTx applies one consumer group's acks inside tx, as a
// transaction (queen/txn) acks: a failed or dlq ack goes straight to the
// DLQ, and any per-item failure is a rollback (ack_rejected). group is
// resolved (store.QueueModeGroup for queue mode).
func AckStrictInTx(ctx context.Context, st *store.Store, tx pgx.Tx, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
	return ackTx(ctx, st, tx, tenant, group, items, true)
}

// ackMsg is an acked message as store.AckRead read it, with the lease
// rule's verdicts on its item.
type ackMsg struct {
	id, partition, queue string
	seq                  int64
	createdAt            time.Time
	retryLimit           int
	// verdict is queen.ack_verdict's on the item against the cursor row
	// as read; unleased, against that row once its lease is gone.
	verdict, unleased string
}

// cursorState is a locked cursor row being edited in Go; it is written back
// once per partition.
type cursorState struct {
	seq                int64
	id                 string
	createdAt          *time.Time
	worker             *string
	expires            *time.Time
	acked              int
	leaseMax           int64
	retries            int
	releasedBy         string // the lease this request gave back, if any
	leaseGone          bool   // an item of this request released or ended the lease
	completed, batches int
	dirty              bool
}

// ackBatch is a general ack batch being applied: the items, their answers,
// what the read found, and the writes it queues.
type ackBatch struct {
	items  []store.AckItem
	out    []store.AckResult
	msgs   []*ackMsg               // nil: not found or not owned
	states map[string]*cursorState // by partition id; nil: no cursor row
	strict bool
	w      store.AckWriteParams
}

// ackTx applies a general ack batch inside tx: one read, the state machine
// in Go, one write. Items are applied in (partition, seq) order so that a
// batch walks the cursor forward.
//
// strict (transactions): a failed or dlq ack goes straight to the DLQ, and
// any per-item failure aborts the transaction. group is already resolved
// (QueueModeGroup for queue mode) by both callers.
func ackTx(ctx context.Context, st *store.Store, tx pgx.Tx, tenant, group string, items []store.AckItem, strict bool) ([]store.AckResult, error) {
	b := &ackBatch{items: items, out: make([]store.AckResult, len(items)), msgs: make([]*ackMsg, len(items)),
		states: map[string]*cursorState{}, strict: strict}
	if err := b.read(ctx, st, tx, tenant, group); err != nil {
		return nil, err
	}
	b.w = store.AckWriteParams{AckCursorsParams: store.AckCursorsParams{Group: group}}
	for _, i := range b.order() {
		b.apply(i)
	}
	if err := b.write(ctx, st, tx); err != nil {
		return nil, err
	}
	if strict {
		for _, r := range b.out {
			if !r.Success {
				return nil, store.Rejected("ack_rejected", "ack %s: %s", r.TransactionID, r.Error)
			}
		}
	}
	return b.out, nil
}

// read runs store.AckRead for b's items and fills b's answers (not found,
// not owned, the names), messages and cursor rows.
func (b *ackBatch) read(ctx context.Context, st *store.Store, tx pgx.Tx, tenant, group string) error {
	p := store.AckReadParams{Group: group, Tenant: tenant, Epochs: store.AckEpochs(b.items)}
	for i, it := range b.items {
		p.PartitionIDs = append(p.PartitionIDs, it.PartitionID)
		p.TransactionIDs = append(p.TransactionIDs, it.TransactionID)
		p.LeaseIDs = append(p.LeaseIDs, it.LeaseID)
		b.out[i] = store.AckResult{Index: i, TransactionID: it.TransactionID}
	}
	rows, err := st.AckRead(ctx, tx, p)
	if err != nil {
		return err
	}
	for i, r := range rows {
		b.take(i, r)
	}
	return nil
}

// take records item i's row of the read in b.
func (b *ackBatch) take(i int, r store.AckReadRow) {
	switch {
	case !r.Found:
		b.out[i].Error = store.ErrMsgNotFound
		return
	case !r.Owned:
		b.out[i].Error = store.ErrNotOwned
		return
	}
	b.msgs[i] = &ackMsg{id: r.MessageID, partition: r.Partition, queue: r.Queue, seq: r.Seq, createdAt: r.CreatedAt,
		retryLimit: r.RetryLimit, verdict: r.Verdict, unleased: r.Unleased}
	b.out[i].QueueName, b.out[i].PartitionName = r.Queue, r.Partition
	pid := b.items[i].PartitionID
	if _, ok := b.states[pid]; ok {
		return
	}
	if !r.HasCursor {
		b.states[pid] = nil
		return
	}
	c := r.Cursor
	b.states[pid] = &cursorState{seq: c.Seq, id: c.ID, createdAt: c.CreatedAt, worker: c.Worker,
		expires: c.Expires, acked: c.Acked, retries: c.Retries, leaseMax: c.LeaseMax}
}

// order is the indexes of the items found, in (partition, seq) order.
func (b *ackBatch) order() []int {
	order := make([]int, 0, len(b.items))
	for i := range b.items {
		if b.msgs[i] != nil {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(x, y int) bool {
		ix, iy := order[x], order[y]
		if b.items[ix].PartitionID != b.items[iy].PartitionID {
			return b.items[ix].PartitionID < b.items[iy].PartitionID
		}
		return b.msgs[ix].seq < b.msgs[iy].seq
	})
	return order
}

// judge is item i's verdict. The lease rule is queen.ack_verdict's, read
// with the cursor row; what Go adds are the consequences of earlier items
// of this request, which changed the row since: a message this request
// already completed (or one below it) is committed, and once this request
// released or ended the lease the verdict is the one without a lease.
func (b *ackBatch) judge(i int, st *cursorState) string {
	m := b.msgs[i]
	switch {
	case st.completed > 0 && m.seq <= st.seq:
		return "committed"
	case st.leaseGone:
		return m.unleased
	}
	return m.verdict
}

// apply is the per-item state machine of a general ack: it edits the item's
// cursor state and answer, and queues a DLQ row.
func (b *ackBatch) apply(i int) {
	it, m, res := b.items[i], b.msgs[i], &b.out[i]
	st := b.states[it.PartitionID]
	if st == nil {
		res.Error = store.ErrInvalidLease
		return
	}
	status := store.NormalizeAckStatus(it.Status)
	if st.releasedBy != "" && status != "completed" && (it.LeaseID == "" || it.LeaseID == st.releasedBy) {
		// An earlier item of this request already gave the lease back for
		// a retry; the rest of that batch is redelivered with it.
		res.Success, res.LeaseReleased = true, true
		return
	}
	if verdict := b.judge(i, st); verdict != "ok" {
		res.Error = store.AckVerdictError(verdict)
		return
	}
	toDLQ := status == "dlq" || (status == "failed" && (b.strict || st.retries >= m.retryLimit))
	switch {
	case status == "completed" || toDLQ || (status == "failed" && canary.On("failed-ack-completes")):
		if toDLQ {
			b.deadLetter(it, m, st, status)
			res.DLQ = true
		}
		st.seq, st.id, st.createdAt = m.seq, m.id, &m.createdAt
		st.acked++
		st.completed++
		if st.seq >= st.leaseMax {
			st.endLease()
			st.retries = 0
			st.batches++
			res.LeaseReleased = true
		}
	case status == "failed":
		st.retries++
		st.releasedBy = deref(st.worker)
		st.endLease()
		res.LeaseReleased = true
	case status == "retry":
		st.releasedBy = deref(st.worker)
		st.endLease()
		res.LeaseReleased = true
	}
	st.dirty = true
	res.Success = true
}

// endLease ends the cursor's lease: later items of the request are judged
// without it.
func (st *cursorState) endLease() {
	st.worker, st.expires = nil, nil
	st.leaseGone = true
}

// deadLetter queues the DLQ row of item it.
func (b *ackBatch) deadLetter(it store.AckItem, m *ackMsg, st *cursorState, status string) {
	msg := it.Error
	if msg == "" {
		msg = "Retries exhausted"
		if status == "dlq" {
			msg = "Moved to DLQ"
		}
	}
	w := &b.w
	w.DLQMessageIDs = append(w.DLQMessageIDs, m.id)
	w.DLQPartitionIDs = append(w.DLQPartitionIDs, it.PartitionID)
	w.DLQMessages = append(w.DLQMessages, msg)
	w.DLQRetries = append(w.DLQRetries, st.retries)
	w.DLQCreatedAts = append(w.DLQCreatedAts, m.createdAt)
}

// write writes back the edited cursor rows and the queued DLQ rows in one
// statement (none when nothing changed).
func (b *ackBatch) write(ctx context.Context, st *store.Store, tx pgx.Tx) error {
	w := &b.w
	for pid, cs := range b.states {
		if cs == nil || !cs.dirty {
			continue
		}
		w.PartitionIDs = append(w.PartitionIDs, pid)
		w.Seqs = append(w.Seqs, cs.seq)
		w.IDs = append(w.IDs, cs.id)
		w.CreatedAts = append(w.CreatedAts, cs.createdAt)
		w.Workers = append(w.Workers, cs.worker)
		w.Expires = append(w.Expires, cs.expires)
		w.Acked = append(w.Acked, cs.acked)
		w.Retries = append(w.Retries, cs.retries)
		w.Completed = append(w.Completed, cs.completed)
		w.Batches = append(w.Batches, cs.batches)
	}
	if len(w.PartitionIDs) == 0 && len(w.DLQMessageIDs) == 0 {
		return nil
	}
	return st.AckWrite(ctx, tx, *w)
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
