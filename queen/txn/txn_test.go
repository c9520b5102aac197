package txn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pathtest"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/txn"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const tenant = pathtest.Tenant

// A transaction through a broker whose cached partition id names a queue
// deleted and created again through another broker forgets the id and runs
// again, at once, not after the cache's ttl.
func TestTransactionIntoAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	pathtest.RecreatedElsewhere(t, a, b, "stale-txn")
	res, _, err := txn.Run(context.Background(), a, storetest.Writes(a.Store(), nil), txn.Request{Tenant: tenant, Ops: []txn.Op{{Type: "push",
		Items: []store.PushItem{{Queue: "stale-txn", TransactionID: "in-txn", Payload: crypt.Plain(json.RawMessage(`1`))}}}}})
	if err != nil || len(res) != 1 || !res[0].Success || res[0].Duplicate {
		t.Fatalf("transaction through the broker that did not delete: %+v %v", res, err)
	}
	if got := pathtest.PopAll(t, b, "stale-txn"); len(got) != 2 || got[1].TransactionID != "in-txn" {
		t.Fatalf("stored: %+v", got)
	}
}

// Transactions that push into the same partitions in opposite orders lock
// them in one global order, so none of them deadlocks.
func TestConcurrentTransactionsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	s := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { v := now; return &v }})
	ns := names.New(s, names.Options{})
	policy := storetest.Writes(s, nil)
	ctx := context.Background()
	for _, p := range []string{"a", "b"} { // create both partitions first
		if res := pathtest.Push(t, ns, store.PushItem{Queue: "tx", Partition: p, TransactionID: "seed-" + p}); res[0].Status != "queued" {
			t.Fatalf("push tx/%s: %+v", p, res)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, second := "a", "b"
			if w%2 == 1 {
				first, second = "b", "a"
			}
			for i := 0; i < 25; i++ {
				ops := []txn.Op{
					{Type: "push", Items: []store.PushItem{{Queue: "tx", Partition: first, TransactionID: fmt.Sprintf("w%d-%d-1", w, i)}}},
					{Type: "push", Items: []store.PushItem{{Queue: "tx", Partition: second, TransactionID: fmt.Sprintf("w%d-%d-2", w, i)}}},
				}
				if _, _, err := txn.Run(ctx, ns, policy, txn.Request{Tenant: tenant, Ops: ops}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("transaction failed (a deadlock?): %v", err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.messages`).Scan(&n); err != nil || n != 2+4*25*2 {
		t.Fatalf("stored %d messages: %v", n, err)
	}
}
