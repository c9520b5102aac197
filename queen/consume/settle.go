package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// Complete completes an autoAck pop's claim under its lease, as the
// client's own ack would (through the ack combiner). Call it only once the
// answer was written and flushed, and before the answer ends, so the
// client's next pop finds the partition free. It reports whether the
// messages were completed; should it fail, the lease expires and they are
// delivered again: at least once, as a broker crash between the answer
// and this ack also gives. The completions carry the pop's routed epoch
// (res.Epoch): on a queue frozen since the claim they fail as moved.
func (c *Consumer) Complete(tenant string, res PopResult) bool {
	return c.CompleteWith(tenant, res, c.Ack)
}

// AckFunc acknowledges items for tenant's group: Consumer.Ack, or a
// broker's routed ack (with shards, a moved completion is routed again).
type AckFunc func(ctx context.Context, tenant, group string, items []store.AckItem) ([]store.AckResult, error)

// CompleteWith is Complete acking through ack.
func (c *Consumer) CompleteWith(tenant string, res PopResult, ack AckFunc) bool {
	items := make([]store.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = store.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID,
			Status: "completed", Epoch: res.Epoch}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := ack(ctx, tenant, res.Group, items)
	if err == nil {
		for _, r := range out {
			if !r.Success {
				err = fmt.Errorf("%s: %s", r.TransactionID, r.Error)
				break
			}
		}
	}
	if err != nil {
		c.o.Log.Warn("autoAck completion failed; the messages are redelivered when the lease ends",
			"queue", res.Queue, "lease", res.LeaseID, "err", err)
		return false
	}
	return true
}

// Release gives back a claim nobody received (its client left, or its
// answer could not be written): the next pop gets its messages at once
// rather than after the lease. A failed release is logged; the lease then
// expires instead (so does a lease of a queue frozen since: the fence
// refuses the release, store.Release).
func (c *Consumer) Release(leaseID string) {
	if leaseID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.o.Store.Release(ctx, leaseID); err != nil {
		c.o.Log.Warn("release of abandoned pop failed; its lease will expire instead", "lease", leaseID, "err", err)
	}
}

// One is the try of a pop of one queue (or one partition of it).
func (c *Consumer) One(req PopRequest) Try {
	return func(ctx context.Context) (PopResult, error) { return c.claims.Claim(ctx, req) }
}

// Discover is the try of a pop by namespace and/or task: the tenant's
// matching queues, highest priority first, and the first that has
// messages answers.
func (c *Consumer) Discover(req PopRequest, namespace, task string) Try {
	return func(ctx context.Context) (PopResult, error) {
		queues, err := c.o.Store.QueuesFor(ctx, req.Tenant, namespace, task)
		if err != nil {
			return PopResult{}, err
		}
		for _, name := range queues {
			one := req
			one.Queue = name
			res, err := c.claims.Claim(ctx, one)
			if err != nil || len(res.Messages) > 0 {
				return res, err
			}
		}
		return PopResult{}, nil
	}
}

// ForgetWatermarks lets the next empty pop of tenant's (queue, group)
// write its watermark at once (Claimer.ForgetWatermarks): call it after a
// statement that deleted watermark rows. "" for queue or group matches
// any.
func (c *Consumer) ForgetWatermarks(tenant, queue, group string) {
	c.claims.ForgetWatermarks(tenant, queue, group)
}
