package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

func TestPushPopAckRoundTrip(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	res, err := pushItems(ctx, s, tenant, []store.PushItem{
		{Queue: "q", Payload: crypt.Plain(json.RawMessage(`{"a":1}`)), TransactionID: "t1"},
		{Queue: "q", Payload: crypt.Plain(json.RawMessage(`{"a":2}`)), TransactionID: "t2"},
		{Queue: "q", TransactionID: "t1"},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != "queued" || res[1].Status != "queued" || res[2].Status != "duplicate" || res[2].MessageID != res[0].MessageID {
		t.Fatalf("push results: %+v", res)
	}
	pop, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "q", Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(pop.Messages) != 2 || pop.Messages[0].TransactionID != "t1" || pop.LeaseID == "" {
		t.Fatalf("pop: %+v", pop)
	}
	again, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "q", Batch: 10})
	if err != nil || len(again.Messages) != 0 {
		t.Fatalf("second pop while leased: %+v %v", again, err)
	}
	acks, err := s.Ack(ctx, tenant, "", []store.AckItem{
		{TransactionID: "t2", PartitionID: pop.PartitionID, LeaseID: pop.LeaseID},
		{TransactionID: "t1", PartitionID: pop.PartitionID, LeaseID: pop.LeaseID},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acks {
		if !a.Success {
			t.Fatalf("ack: %+v", acks)
		}
	}
	if !acks[0].LeaseReleased {
		t.Fatalf("acking the whole batch should release the lease: %+v", acks)
	}
	empty, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "q", Batch: 10})
	if err != nil || len(empty.Messages) != 0 {
		t.Fatalf("pop after ack: %+v %v", empty, err)
	}
}
