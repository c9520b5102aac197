package httpapi

import (
	"context"
	"testing"

	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
)

// TestNoShardsRoutingCostsNothing: without shards, picking the plane of a
// push, a pop, an ack and a transaction is the Server's own plane, with no
// allocation (and, by construction, no lookup or lock: the router is nil).
func TestNoShardsRoutingCostsNothing(t *testing.T) {
	s := &Server{}
	ctx := context.Background()
	items := []store.PushItem{{Queue: "q"}}
	acks := []store.AckItem{{PartitionID: "p"}}
	ops := []txn.Op{{Type: "push", Items: items}}
	allocs := testing.AllocsPerRun(100, func() {
		for _, pl := range []func() (*plane, error){
			func() (*plane, error) { return s.planeFor(ctx, "t", "", "q", true) },
			func() (*plane, error) { return s.pushPlane(ctx, "t", items) },
			func() (*plane, error) { return s.ackPlane(ctx, "t", acks) },
			func() (*plane, error) { return s.txnPlane(ctx, "t", ops, txn.Extras{}) },
		} {
			if p, err := pl(); p != &s.plane || err != nil {
				t.Fatalf("plane %p, %v: want the Server's own", p, err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request's routing without shards, want 0", allocs)
	}
}
