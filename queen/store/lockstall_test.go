package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// Issue 28, item 8: one row held locked by an outside session must delay
// that row's writers only. Each test holds a row, starts a call on it (it
// waits), then runs many calls on other queues and releases the row only
// after they all answered: a call still waiting after a generous bound
// fails the test, no timing is judged. One statement in flight (the
// default), so before the fix every other call queued behind the blocked
// statement until the row was released.

// stallBound is how long a call on an unrelated queue may take before the
// test calls it stalled: generous, a busy machine answers in milliseconds.
const stallBound = 30 * time.Second

// lockedStore is a store with one ack statement in flight. (The push
// side of item 8 is queen/pushpath's, tested there.)
func lockedStore(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool := storetest.Pool(t)
	return store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), AckStatements: 1}), pool
}

// holdRows runs sql (a SELECT ... FOR UPDATE) in a transaction it keeps
// open; the returned func releases the rows.
func holdRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (`+sql+`) x`, args...).Scan(&n); err != nil || n == 0 {
		_ = tx.Rollback(ctx)
		t.Fatalf("hold rows: %d rows, %v", n, err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	return release
}

// awaitLockWaiters returns once n sessions of the test's database wait for
// a lock at the same moment.
func awaitLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(stallBound)
	for {
		var waiting int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock, want %d", waiting, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func stillWaiting(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s answered while its row was held: %v", what, err)
	default:
	}
}

func answered(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(4 * stallBound):
		t.Fatalf("%s did not answer after its row was released", what)
	}
}

// A session holding one cursor row delays acks of that cursor only (before:
// acks of six unrelated queues waited 9.7 s in the attack).
func TestLockedCursorDelaysOnlyItsAcks(t *testing.T) {
	t.Parallel()
	s, pool := lockedStore(t)
	ctx := context.Background()
	const queues, each = 6, 8
	leased := map[string][]store.AckItem{}
	for _, q := range []string{"ack-held", "ack-0", "ack-1", "ack-2", "ack-3", "ack-4", "ack-5"}[:queues+1] {
		var items []store.PushItem
		for i := range each {
			items = append(items, store.PushItem{Queue: q, TransactionID: fmt.Sprint(q, "-", i)})
		}
		if _, err := s.Push(ctx, tenant, items, ""); err != nil {
			t.Fatal(err)
		}
		res := popOne(t, s, store.PopRequest{Queue: q, Batch: each})
		if len(res.Messages) != each {
			t.Fatalf("pop %s: %d messages", q, len(res.Messages))
		}
		for _, m := range res.Messages {
			leased[q] = append(leased[q], store.AckItem{PartitionID: m.PartitionID, TransactionID: m.TransactionID, LeaseID: m.LeaseID})
		}
	}
	release := holdRows(t, pool, `SELECT 1 FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.name = 'ack-held' FOR UPDATE OF pc`)
	blocked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 4*stallBound)
		defer cancel()
		res, err := s.Ack(ctx, tenant, "", leased["ack-held"])
		for _, r := range res {
			if err == nil && !r.Success {
				err = fmt.Errorf("ack %s: %s", r.TransactionID, r.Error)
			}
		}
		blocked <- err
	}()
	awaitLockWaiters(t, pool, 1)
	errs := make(chan error, queues*each)
	var wg sync.WaitGroup
	for q := range queues {
		for _, it := range leased[fmt.Sprint("ack-", q)] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(ctx, stallBound)
				defer cancel()
				res, err := s.Ack(ctx, tenant, "", []store.AckItem{it})
				if err == nil && !res[0].Success {
					err = fmt.Errorf("answered %+v", res[0])
				}
				if err != nil {
					errs <- fmt.Errorf("ack %s while another queue's cursor is locked: %w", it.TransactionID, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	stillWaiting(t, "the ack of the held cursor", blocked)
	release()
	answered(t, "the ack of the held cursor", blocked)
}
