package names_test

import (
	"context"
	"testing"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pathtest"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
)

const tenant = config.DefaultTenant

// Issue 28 item 12: two brokers on one database, without the mesh that
// would tell one of the other's deletes. Broker a's cache names a queue (or
// a group's subscription) that broker b deleted and that exists again
// under its name; every path of a that resolves the name must work at once,
// not after the cache's 60 s ttl or a timer claim's 30 s lease.

// push puts items in through a push path of n, as the broker pushes.
func push(ctx context.Context, n *names.Names, items ...store.PushItem) ([]store.PushResult, error) {
	out, err := pushpath.New(pushpath.Options{Store: n.Store(), Names: n, IDs: ids.NewSource(clock.Real{}, nil)}).Push(ctx, tenant, "", items)
	return out.Results, err
}

// claimers are the brokers' Claimers: one per broker, as its throttles are.
type claimers map[*names.Names]*consume.Claimer

func (c claimers) claim(ctx context.Context, n *names.Names, req consume.PopRequest) (consume.PopResult, error) {
	if c[n] == nil {
		c[n] = consume.NewClaimer(n.Store(), consume.ClaimerOptions{Names: n})
	}
	return c[n].Claim(ctx, req)
}

// popAll pops every message of q's queue-mode group through n.
func (c claimers) popAll(t *testing.T, n *names.Names, q string) []consume.Message {
	t.Helper()
	res, err := c.claim(context.Background(), n, consume.PopRequest{Tenant: tenant, Queue: q, Batch: 100, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.Messages
}

func TestDLQRetryIntoAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	pathtest.RecreatedElsewhere(t, a, b, "stale-dlq")
	p, err := claimers{}.claim(ctx, b, consume.PopRequest{Tenant: tenant, Queue: "stale-dlq", Batch: 1})
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("pop through b: %+v %v", p, err)
	}
	m := p.Messages[0]
	actx, cancel := b.Store().Bound(ctx)
	r, err := consume.AckInTx(actx, b.Store(), tenant, store.AckGroup(""), []store.AckItem{{TransactionID: m.TransactionID,
		PartitionID: m.PartitionID, Status: "dlq", LeaseID: m.LeaseID}})
	cancel()
	if err != nil || !r[0].Success {
		t.Fatalf("dead-letter through b: %+v %v", r, err)
	}
	retried, err := pushpath.New(pushpath.Options{Store: a.Store(), Names: a}).RetryMessage(ctx, tenant, m.PartitionID, m.TransactionID, 0)
	if err != nil || retried.MessageID == "" || retried.PartitionID != m.PartitionID {
		t.Fatalf("DLQ retry through the broker that did not delete: %+v %v", retried, err)
	}
}

// A plain push already forgot and retried; it now does so through the same
// helper as every other path.
func TestPushIntoAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	pathtest.RecreatedElsewhere(t, a, b, "stale-push")
	res, err := push(context.Background(), a, store.PushItem{Queue: "stale-push", TransactionID: "pushed"})
	if err != nil || len(res) != 1 || res[0].Status != "queued" {
		t.Fatalf("push: %+v %v", res, err)
	}
}

// A group whose cursors another broker deleted pops what its queue holds
// at once: before, this broker trusted its cached subscription and popped
// nothing until the entry expired.
func TestGroupDeletedElsewherePopsAtOnce(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	for _, txn := range []string{"m1", "m2"} {
		if _, err := push(ctx, a, store.PushItem{Queue: "stale-group", TransactionID: txn}); err != nil {
			t.Fatal(err)
		}
	}
	c := claimers{}
	req := consume.PopRequest{Tenant: tenant, Queue: "stale-group", Group: "g", Batch: 1, AutoAck: true}
	if p, err := c.claim(ctx, a, req); err != nil || len(p.Messages) != 1 {
		t.Fatalf("first pop: %+v %v", p, err)
	}
	if n, _, err := b.DeleteGroup(ctx, tenant, "g", nil, true); err != nil || n == 0 {
		t.Fatalf("group delete through b: %d %v", n, err)
	}
	req.Batch = 10
	p, err := c.claim(ctx, a, req)
	if err != nil || len(p.Messages) != 2 || p.Messages[0].TransactionID != "m1" {
		t.Fatalf("pop of the group deleted through b (subscribed afresh, from the start): %+v %v", p, err)
	}
}

// Likewise a queue another broker deleted and created again: the cached
// subscription names the old queue's id.
func TestPopOfAQueueRecreatedElsewhere(t *testing.T) {
	t.Parallel()
	a, b := pathtest.TwoBrokers(t)
	ctx := context.Background()
	if _, err := push(ctx, a, store.PushItem{Queue: "stale-popq", TransactionID: "old"}); err != nil {
		t.Fatal(err)
	}
	c := claimers{}
	if got := c.popAll(t, a, "stale-popq"); len(got) != 1 {
		t.Fatalf("first pop: %+v", got)
	}
	pathtest.RecreatedElsewhere(t, a, b, "stale-popq")
	if got := c.popAll(t, a, "stale-popq"); len(got) != 1 || string(got[0].Data) != `"again"` {
		t.Fatalf("pop of the queue recreated through b: %+v", got)
	}
}
