package txn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/txn"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const tenant = config.DefaultTenant

// push puts items in through a push path of n, as the broker pushes, and
// answers their results.
func push(t *testing.T, n *names.Names, items ...store.PushItem) []store.PushResult {
	t.Helper()
	out, err := pushpath.New(pushpath.Options{Store: n.Store(), Names: n, IDs: ids.NewSource(clock.Real{}, nil)}).Push(context.Background(), tenant, "", items)
	if err != nil || len(out.Results) != len(items) {
		t.Fatalf("push %+v: %+v %v", items, out, err)
	}
	return out.Results
}

// twoBrokers are two stores, each with its own name cache, on one database.
func twoBrokers(t *testing.T) (a, b *names.Names) {
	t.Helper()
	pool := storetest.Pool(t)
	o := store.Options{IDs: ids.NewSource(clock.Real{}, nil), CacheTTL: time.Hour}
	n := names.Options{TTL: time.Hour}
	return names.New(store.New(pool, o), n), names.New(store.New(pool, o), n)
}

// recreatedElsewhere warms a's cache with queue q, then deletes it through
// b and creates it again there with a push (b's own cache forgets at its
// delete, as a local delete does). Issue 28 item 12: without the mesh, a
// learns nothing of b's delete.
func recreatedElsewhere(t *testing.T, a, b *names.Names, q string) {
	t.Helper()
	push(t, a, store.PushItem{Queue: q, Payload: crypt.Plain(json.RawMessage(`"warm"`))})
	if ok, err := b.DeleteQueue(context.Background(), tenant, q); err != nil || !ok {
		t.Fatalf("delete through b: %v %v", ok, err)
	}
	push(t, b, store.PushItem{Queue: q, Payload: crypt.Plain(json.RawMessage(`"again"`))})
}

// popAll pops every message of q's queue-mode group through s.
func popAll(t *testing.T, n *names.Names, q string) []store.Message {
	t.Helper()
	res, err := consume.NewClaimer(n.Store(), consume.ClaimerOptions{Names: n}).Claim(context.Background(), store.PopRequest{Tenant: tenant, Queue: q, Batch: 100, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.Messages
}

// A transaction through a broker whose cached partition id names a queue
// deleted and created again through another broker forgets the id and runs
// again, at once, not after the cache's ttl.
func TestTransactionIntoAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	recreatedElsewhere(t, a, b, "stale-txn")
	res, _, err := txn.Run(context.Background(), a, txn.Request{Tenant: tenant, Ops: []txn.Op{{Type: "push",
		Items: []store.PushItem{{Queue: "stale-txn", TransactionID: "in-txn", Payload: crypt.Plain(json.RawMessage(`1`))}}}}})
	if err != nil || len(res) != 1 || !res[0].Success || res[0].Duplicate {
		t.Fatalf("transaction through the broker that did not delete: %+v %v", res, err)
	}
	if got := popAll(t, b, "stale-txn"); len(got) != 2 || got[1].TransactionID != "in-txn" {
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
	ctx := context.Background()
	for _, p := range []string{"a", "b"} { // create both partitions first
		if res := push(t, ns, store.PushItem{Queue: "tx", Partition: p, TransactionID: "seed-" + p}); res[0].Status != "queued" {
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
				if _, _, err := txn.Run(ctx, ns, txn.Request{Tenant: tenant, Ops: ops}); err != nil {
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
