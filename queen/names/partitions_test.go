package names_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/pathtest"
	"github.com/queen-go/queen/queen/store"
)

// A push that creates a partition gives it a cursor row for every group
// already subscribed to its queue (store.CreateConsumers, in the
// transaction names' resolution creates the partition in): the group
// pops its message. b creates the partition, so no cache of a's has it.
func TestNewPartitionReachesASubscribedGroup(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	item := func(part, txid string) store.PushItem {
		return store.PushItem{Queue: "later", Partition: part, TransactionID: txid, Payload: crypt.Plain(json.RawMessage(`1`))}
	}
	pop := consume.PopRequest{Tenant: tenant, Queue: "later", Group: "g", Batch: 10, AutoAck: true}
	c := claimers{}
	pathtest.Push(t, a, item("first", "f-1"))
	if got, err := c.claim(ctx, a, pop); err != nil || len(got.Messages) != 1 {
		t.Fatalf("first pop: %+v %v", got, err)
	}
	pathtest.Push(t, b, item("second", "s-1"))
	got, err := c.claim(ctx, a, pop)
	if err != nil || len(got.Messages) != 1 || got.Messages[0].TransactionID != "s-1" {
		t.Fatalf("pop after a new partition: %+v %v", got, err)
	}
}

// Configure creates the queue's Default partition and answers its id; a
// configure of an existing queue answers the same one, and a push to the
// queue through another broker (no cache of a's) lands in it.
func TestConfigureAnswersTheDefaultPartition(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	first, err := a.Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "conf"})
	if err != nil || first.Queue.ID == "" || first.DefaultPartitionID == "" {
		t.Fatalf("configure: %+v %v", first, err)
	}
	again, err := b.Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "conf"})
	if err != nil || again.Queue.ID != first.Queue.ID || again.DefaultPartitionID != first.DefaultPartitionID {
		t.Fatalf("configure again: %+v %v, first %+v", again, err, first)
	}
	r := pathtest.Push(t, b, store.PushItem{Queue: "conf", Payload: crypt.Plain(json.RawMessage(`1`))})
	if r[0].PartitionID != first.DefaultPartitionID {
		t.Fatalf("push to the Default partition went to %s, configure answered %s", r[0].PartitionID, first.DefaultPartitionID)
	}
}
