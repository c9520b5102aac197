package mover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/mover"
	"github.com/queen-go/queen/queen/store"
)

// traffic is one queue's writers: a pusher and a popper that acks, each
// routing by the catalogue's placement and, when a shard answers moved,
// reading it again, as a broker's router does.
type traffic struct {
	w *world
	q queue

	mu        sync.Mutex
	pushed    []string       // transaction ids whose push was answered
	delivered map[string]int // transaction id → acks that succeeded
	popped    map[string]int // transaction id → pops that returned it
	lastSeq   map[string]int64
	fifo      []string // FIFO violations
	moved     int      // moved answers seen
	shardsHit map[string]bool
}

func newTraffic(w *world, q queue) *traffic {
	return &traffic{w: w, q: q, delivered: map[string]int{}, popped: map[string]int{}, lastSeq: map[string]int64{}, shardsHit: map[string]bool{}}
}

// route is the queue's placement: its shard and epoch.
func (tr *traffic) route(ctx context.Context) (mover.Shard, string, int64, error) {
	p, err := tr.w.cat.Lookup(ctx, tenant, tr.q.name)
	if err != nil {
		return mover.Shard{}, "", 0, err
	}
	return tr.w.shards[p.Shard], p.Shard, p.Epoch, nil
}

// retry notes a moved (or gone) answer and pauses a little before the
// caller routes again.
func (tr *traffic) retry(ctx context.Context, tries *int, err error) error {
	*tries++
	if *tries > 5000 {
		return fmt.Errorf("%s: still refused after %d tries: %w", tr.q.name, *tries, err)
	}
	tr.mu.Lock()
	tr.moved++
	tr.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Millisecond):
		return nil
	}
}

// push pushes transaction id txid to partition i until a shard answers it.
func (tr *traffic) push(ctx context.Context, i int, txid string) error {
	item := store.PushItem{Queue: tr.q.name, Partition: fmt.Sprintf("p%d", i%4), TransactionID: txid,
		Payload: crypt.Plain(json.RawMessage(`{"n":1}`))}
	for tries := 0; ; {
		sh, name, epoch, err := tr.route(ctx)
		if err != nil {
			return err
		}
		rows := sh.Store.NewRows([]store.PushItem{item}, []string{tr.q.pids[i%4]}, "")
		out, err := sh.Store.AppendRows(ctx, sh.Pool, store.AppendRowsParams{Rows: rows, Epochs: []int64{epoch}})
		if err == nil && len(store.GoneIDs(rows, out)) > 0 {
			err = errors.New("partition gone")
		} else if err == nil {
			tr.mu.Lock()
			tr.pushed = append(tr.pushed, txid)
			tr.shardsHit["push "+name] = true
			tr.mu.Unlock()
			return nil
		}
		if !store.Moved(err) && err.Error() != "partition gone" {
			return fmt.Errorf("push %s on %s: %w", txid, name, err)
		}
		if err := tr.retry(ctx, &tries, err); err != nil {
			return err
		}
	}
}

// pushAll pushes until stop closes.
func (tr *traffic) pushAll(ctx context.Context, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if err := tr.push(ctx, i, fmt.Sprintf("%s-%06d", tr.q.name, i)); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// popOnce pops up to five messages of one partition and acks them,
// routing again on moved (the ack too: the lease moves with its cursor
// row). It answers how many it popped.
func (tr *traffic) popOnce(ctx context.Context) (int, error) {
	var rows store.PopRows
	for tries := 0; ; {
		sh, name, epoch, err := tr.route(ctx)
		if err != nil {
			return 0, err
		}
		rows, err = sh.Store.RunPop(ctx, store.PopParams{QueueID: tr.q.id, Group: store.QueueModeGroup, Partitions: 1, Batch: 5,
			LeaseSeconds: 300, Epoch: &epoch})
		if err == nil {
			tr.mu.Lock()
			tr.shardsHit["pop "+name] = true
			tr.mu.Unlock()
			break
		}
		if !store.Moved(err) {
			return 0, fmt.Errorf("pop on %s: %w", name, err)
		}
		if err := tr.retry(ctx, &tries, err); err != nil {
			return 0, err
		}
	}
	tr.record(rows)
	return len(rows.Rows), tr.ack(ctx, rows)
}

// record notes what a pop returned, and FIFO violations: a partition's
// seqs must rise from pop to pop.
func (tr *traffic) record(rows store.PopRows) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, r := range rows.Rows {
		tr.popped[r.TransactionID]++
		if r.Seq <= tr.lastSeq[r.PartitionID] {
			tr.fifo = append(tr.fifo, fmt.Sprintf("%s: seq %d after %d", r.Partition, r.Seq, tr.lastSeq[r.PartitionID]))
		}
		tr.lastSeq[r.PartitionID] = r.Seq
	}
}

// ack acknowledges the popped rows where the queue now is.
func (tr *traffic) ack(ctx context.Context, rows store.PopRows) error {
	if len(rows.Rows) == 0 {
		return nil
	}
	for tries := 0; ; {
		sh, name, epoch, err := tr.route(ctx)
		if err != nil {
			return err
		}
		acks := make([]store.AckRow, len(rows.Rows))
		for i, r := range rows.Rows {
			acks[i] = store.AckRow{AckItem: store.AckItem{TransactionID: r.TransactionID, PartitionID: r.PartitionID, LeaseID: rows.LeaseID,
				Epoch: epoch}, Tenant: tenant, Group: store.QueueModeGroup}
		}
		res, err := sh.Store.AckCompletions(ctx, acks)
		if err == nil {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			for i, r := range res {
				if !r.Success {
					return fmt.Errorf("ack %s on %s: %s", acks[i].TransactionID, name, r.Error)
				}
				tr.delivered[acks[i].TransactionID]++
			}
			return nil
		}
		if !store.Moved(err) {
			return fmt.Errorf("ack on %s: %w", name, err)
		}
		if err := tr.retry(ctx, &tries, err); err != nil {
			return err
		}
	}
}

// popAll pops and acks until stop closes (the pusher returned) and then
// until every answered push was delivered.
func (tr *traffic) popAll(ctx context.Context, stop <-chan struct{}) error {
	stopped := false
	for {
		n, err := tr.popOnce(ctx)
		if err != nil {
			return err
		}
		if !stopped {
			select {
			case <-stop:
				stopped = true
			default:
			}
		}
		if stopped && n == 0 && tr.drained() {
			return nil
		}
		if n == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// drained tells whether every answered push was delivered.
func (tr *traffic) drained() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.delivered) >= len(tr.pushed)
}

// run starts the pusher and the popper; the returned func stops the
// pushes, waits until the popper delivered every answered push (or
// failed) and answers their first error.
func (tr *traffic) run(ctx context.Context) func() error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	// The popper drains once the pusher returned, not once it was told to
	// stop: a push answered after that would go unpopped.
	pushed := make(chan struct{})
	wg.Go(func() {
		defer close(pushed)
		errs[0] = tr.pushAll(ctx, stop)
	})
	wg.Go(func() { errs[1] = tr.popAll(ctx, pushed) })
	return func() error {
		close(stop)
		wg.Wait()
		return errors.Join(errs...)
	}
}

// check fails t unless every answered push was popped once and acked
// once, in FIFO order per partition, and nothing else was.
func (tr *traffic) check(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.pushed) == 0 {
		t.Errorf("%s: no push answered", tr.q.name)
	}
	for _, txid := range tr.pushed {
		if tr.delivered[txid] != 1 || tr.popped[txid] != 1 {
			t.Errorf("%s: %s popped %d times, acked %d times, want once", tr.q.name, txid, tr.popped[txid], tr.delivered[txid])
		}
	}
	if len(tr.popped) != len(tr.pushed) {
		t.Errorf("%s: %d messages popped, %d pushes answered", tr.q.name, len(tr.popped), len(tr.pushed))
	}
	for _, f := range tr.fifo {
		t.Errorf("%s: FIFO broken: %s", tr.q.name, f)
	}
}
