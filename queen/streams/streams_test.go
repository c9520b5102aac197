package streams_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/pathtest"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/streams"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const tenant = pathtest.Tenant

// A cycle through a broker whose cached partition id names a sink queue
// deleted and created again through another broker forgets the id and
// runs again, at once, not after the cache's ttl.
func TestStreamsCycleIntoAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	src := pathtest.Push(t, a, store.PushItem{Queue: "stale-src", Payload: crypt.Plain(json.RawMessage(`1`))})
	q, err := a.Store().RegisterQuery(ctx, store.RegisterParams{Tenant: tenant, Name: "stale-query", SourceQueue: "stale-src",
		SinkQueue: "stale-sink", ConfigHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	pathtest.RecreatedElsewhere(t, a, b, "stale-sink")
	res, err := streams.Cycle(ctx, a, storetest.Writes(a.Store(), nil), streams.CycleParams{Tenant: tenant, QueryID: q.ID, PartitionID: src[0].PartitionID,
		State: []streams.StateOp{{Key: "k", Value: json.RawMessage(`{"n":1}`)}},
		Push:  []store.PushItem{{Queue: "stale-sink", TransactionID: "from-cycle", Payload: crypt.Plain(json.RawMessage(`2`))}}})
	if err != nil || len(res.Pushed) != 1 || res.Pushed[0].Status != "queued" || res.StateOpsApplied != 1 {
		t.Fatalf("cycle through the broker that did not delete: %+v %v", res, err)
	}
	if got := pathtest.PopAll(t, b, "stale-sink"); len(got) != 2 || got[1].TransactionID != "from-cycle" {
		t.Fatalf("stored: %+v", got)
	}
}
