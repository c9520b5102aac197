package streams_test

import (
	"context"
	"encoding/json"
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
	"github.com/queen-go/queen/queen/streams"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const tenant = config.DefaultTenant

// push puts items in through a push path of s, as the broker pushes, and
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

// A cycle through a broker whose cached partition id names a sink queue
// deleted and created again through another broker forgets the id and
// runs again, at once, not after the cache's ttl.
func TestStreamsCycleIntoAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	src := push(t, a, store.PushItem{Queue: "stale-src", Payload: crypt.Plain(json.RawMessage(`1`))})
	q, err := a.Store().RegisterQuery(ctx, store.RegisterParams{Tenant: tenant, Name: "stale-query", SourceQueue: "stale-src",
		SinkQueue: "stale-sink", ConfigHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	recreatedElsewhere(t, a, b, "stale-sink")
	res, err := streams.Cycle(ctx, a, streams.CycleParams{Tenant: tenant, QueryID: q.ID, PartitionID: src[0].PartitionID,
		State: []streams.StateOp{{Key: "k", Value: json.RawMessage(`{"n":1}`)}},
		Push:  []store.PushItem{{Queue: "stale-sink", TransactionID: "from-cycle", Payload: crypt.Plain(json.RawMessage(`2`))}}})
	if err != nil || len(res.Pushed) != 1 || res.Pushed[0].Status != "queued" || res.StateOpsApplied != 1 {
		t.Fatalf("cycle through the broker that did not delete: %+v %v", res, err)
	}
	if got := popAll(t, b, "stale-sink"); len(got) != 2 || got[1].TransactionID != "from-cycle" {
		t.Fatalf("stored: %+v", got)
	}
}
