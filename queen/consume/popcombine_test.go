package consume_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// One-partition wildcard pops that arrive while the pop statement runs
// wait and go together in the next one: one statement (the partitions it
// leases share its instant), each pop its own partition under its own
// lease, no message twice. The first pop's statement is held on a lock
// on queen.pop_marks, which every pop statement reads.
func TestPopsWaitingForTheStatementGoTogether(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	st := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	ctx := context.Background()
	var items []store.PushItem
	for p := range 6 {
		for m := range 3 {
			items = append(items, store.PushItem{Queue: "together", Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("p%d-%d", p, m)})
		}
	}
	if err := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st)}).Replay(ctx, tenant, items); err != nil {
		t.Fatal(err)
	}
	c := consume.NewClaimer(st, consume.ClaimerOptions{})
	pop := consume.PopRequest{Tenant: tenant, Queue: "together", Batch: 10, Partitions: 1, LeaseSeconds: 300}
	first, err := c.Claim(ctx, pop) // subscribes queue mode, claims one partition
	if err != nil || len(first.Messages) != 3 {
		t.Fatalf("first pop: %+v %v", first, err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE queen.pop_marks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	results := make(chan consume.PopResult, 5)
	claim := func() {
		res, err := c.Claim(ctx, pop)
		if err != nil {
			t.Error(err)
		}
		results <- res
	}
	go claim() // runs its statement, which waits for the lock
	storetest.AwaitLockWaiters(t, pool, 1)
	for range 4 {
		go claim()
	}
	for deadline := time.Now().Add(storetest.LockWaitBound); c.PopsWaiting() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pops wait for the slot, want 4", c.PopsWaiting())
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	leases := map[string]string{} // partition id -> lease
	for _, m := range first.Messages {
		seen[m.TransactionID] = true
	}
	for range 5 {
		res := <-results
		if len(res.Messages) != 3 {
			t.Fatalf("a pop got %d messages, want one whole partition of 3: %+v", len(res.Messages), res)
		}
		for _, m := range res.Messages {
			if seen[m.TransactionID] || m.PartitionID != res.PartitionID {
				t.Fatalf("message %s twice, or outside its pop's partition %s", m.TransactionID, res.PartitionID)
			}
			seen[m.TransactionID] = true
		}
		if _, dup := leases[res.PartitionID]; dup {
			t.Fatalf("partition %s claimed twice", res.PartitionID)
		}
		leases[res.PartitionID] = res.LeaseID
	}
	var together int
	if err := pool.QueryRow(ctx, `SELECT max(n) FROM (SELECT count(*) AS n FROM queen.partition_consumers
		WHERE worker_id IS NOT NULL GROUP BY lease_acquired_at) x`).Scan(&together); err != nil {
		t.Fatal(err)
	}
	if together != 4 {
		t.Fatalf("the 4 waiting pops were leased by %d statement(s) sharing an instant, want one for all 4", 5-together)
	}
	for pid, lease := range leases {
		var holder string
		if err := pool.QueryRow(ctx, `SELECT worker_id FROM queen.partition_consumers WHERE partition_id = $1`, pid).Scan(&holder); err != nil || holder != lease {
			t.Fatalf("partition %s is held by %q, its pop answered lease %q (%v)", pid, holder, lease, err)
		}
	}
}
