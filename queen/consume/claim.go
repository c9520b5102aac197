package consume

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
)

// Claimer runs one claim of a pop over the store's statements, in this
// order: subscribe the group on its first pop of the queue (on this
// broker), run the pop statement, and after a wildcard pop that found
// nothing, mark the group fully consumed (a pop mark) and note the empty
// scan (the consumer watermark). Each of those two is spaced by its own
// throttle, and so is the check that a cached subscription still holds;
// their state is this Claimer's, one per broker (the Consumer's). It is
// safe for concurrent use.
type Claimer struct {
	st     *store.Store
	names  *names.Names
	cipher *crypt.Cipher
	log    *slog.Logger
	// popMarks spaces the pop marks per (queue id, group).
	popMarks *popMarkThrottle
	// subChecks spaces the checks of cached subscriptions per (queue id,
	// group), at the pop marks' interval.
	subChecks *popMarkThrottle
	// marks spaces the watermark checks per (tenant, queue, group).
	marks *watermarkThrottle
	// pops combines the one-partition wildcard pops (popcombine.go).
	pops *combine.Combiner[popCall, popOut]
	// retry runs a subscription again after a row-lock wait that ran out.
	retry combine.Retry
}

// ClaimerOptions configure a Claimer.
type ClaimerOptions struct {
	// Names caches the groups' subscriptions (the broker's one
	// queen/names over the store); nil: a cache of this Claimer's own.
	Names *names.Names
	// Clock paces the throttles; nil means the wall clock.
	Clock clock.Clock
	// PopMarkEvery is how seldom one (queue, group) is marked fully
	// consumed after an empty wildcard pop (store.MarkPopEmpty): a queue
	// whose pushes clear its mark at once is not marked again on every
	// empty pop. It also spaces the checks of cached subscriptions. Zero
	// means 250 ms; negative means every time.
	PopMarkEvery time.Duration
	// Cipher opens the popped payloads sealed at rest
	// (QUEEN_ENCRYPTION_KEY); nil: they are answered as stored.
	Cipher *crypt.Cipher
	// PopStatements is how many combined pop statements may be in flight
	// at once (QUEEN_POP_STATEMENTS); one-partition wildcard pops
	// arriving while they run wait and go together in the next one.
	// Zero means 1.
	PopStatements int
	// PopBatch caps the pops of one combined statement. Zero means 64.
	PopBatch int
	// Log receives the bookkeeping that failed beside a pop that did not
	// (a mark or a watermark not written); nil discards it.
	Log *slog.Logger
	// Retry runs a group's subscription again when a row lock held
	// elsewhere outlasted store.LockWait, away from its connection, for as
	// long as its bound allows; the zero Retry subscribes once, waiting as
	// the session's lock_timeout lets it.
	Retry combine.Retry
}

// NewClaimer returns a Claimer over st.
func NewClaimer(st *store.Store, o ClaimerOptions) *Claimer {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Names == nil {
		o.Names = names.New(st, names.Options{})
	}
	return &Claimer{st: st, names: o.Names, cipher: o.Cipher, log: o.Log, popMarks: newPopMarkThrottle(o.Clock, o.PopMarkEvery),
		subChecks: newPopMarkThrottle(o.Clock, o.PopMarkEvery), marks: newWatermarkThrottle(o.Clock),
		pops: newPopCombiner(st, max(o.PopStatements, 1), cmp.Or(o.PopBatch, 64)), retry: o.Retry}
}

// Claim claims up to req.Partitions partitions for the group and returns up
// to req.Batch messages after the group's cursor, in seq order. It runs
// under names.Retry: an empty pop whose subscription came from the
// name cache checks that it still holds, at most once per PopMarkEvery per
// (queue, group), so a queue or a group deleted through another broker is
// subscribed again and popped at once, not after the cache's ttl.
func (c *Claimer) Claim(ctx context.Context, req PopRequest) (PopResult, error) {
	if req.Group == "" {
		req.Group = store.QueueModeGroup
	}
	return names.Retry(c.names, func() (PopResult, error) { return c.claimFresh(ctx, req) })
}

// claimFresh is one attempt of Claim: claimOnce, then, when it found
// nothing through a cached subscription, the check that the subscription
// still holds (a stale one is answered names.StaleSubscription).
func (c *Claimer) claimFresh(ctx context.Context, req PopRequest) (PopResult, error) {
	qid, cached := c.names.Subscription(req.Tenant, req.Queue, req.Group)
	res, err := c.claimOnce(ctx, req)
	if err != nil || len(res.Messages) > 0 || !cached || ctx.Err() != nil || !c.subChecks.due(qid, req.Group) {
		return res, err
	}
	if canary.On("delete-keeps-cache") {
		// That canary's stale subscription must show in pops, as
		// before this check: the simulator's recreate probe is
		// proven against it.
		return res, nil
	}
	live, err := c.st.SubscriptionLive(ctx, store.SubscriptionLiveParams{QueueID: qid, Group: req.Group})
	if err != nil || live {
		// A failed check is no failed pop: the entry's ttl bounds it.
		return res, nil
	}
	return res, names.StaleSubscription(req.Tenant, req.Queue, req.Group)
}

// claimOnce subscribes the group if this broker has not yet, runs the pop
// statement, and after an empty wildcard pop does its bookkeeping
// (noteEmpty). A queue that does not exist pops nothing.
func (c *Claimer) claimOnce(ctx context.Context, req PopRequest) (PopResult, error) {
	if req.Batch < 1 {
		req.Batch = 1
	}
	if req.Partitions < 1 || req.Partition != "" {
		req.Partitions = 1
	}
	res := PopResult{Queue: req.Queue, Group: req.Group}
	if err := ctx.Err(); err != nil {
		// The client is gone: claim nothing.
		return res, err
	}
	qid, err := c.subscribed(ctx, req)
	if errors.Is(err, store.ErrNotFound) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	now := c.st.DBNow()
	rows, err := c.runPop(ctx, store.PopParams{QueueID: qid, Group: req.Group, Partition: req.Partition,
		Partitions: req.Partitions, Batch: req.Batch, LeaseSeconds: req.LeaseSeconds, AutoAck: req.AutoAck,
		MaxBytes: req.MaxBytes, Now: now, Epoch: epochOf(req.Epoch)})
	if err != nil {
		return res, err
	}
	if res = popResult(req, rows, c.cipher); len(res.Messages) > 0 || req.Partition != "" {
		return res, nil
	}
	c.noteEmpty(ctx, req, qid, now)
	return res, nil
}

// epochOf is a routed epoch as the pop statements take it: nil for 0 (no
// shards: no check, no allocation).
func epochOf(epoch int64) *int64 {
	if epoch == 0 {
		return nil
	}
	return &epoch
}

// subscribed returns the queue's id once the group is known to be
// subscribed to it, subscribing it on first use. store.ErrNotFound: no
// such queue. Queue mode always subscribes from the start; a named group
// from its SubscriptionFrom when given, else by its SubscriptionMode (all
// when empty).
func (c *Claimer) subscribed(ctx context.Context, req PopRequest) (string, error) {
	if id, ok := c.names.Subscription(req.Tenant, req.Queue, req.Group); ok {
		return id, nil
	}
	p := store.SubscribeParams{Tenant: req.Tenant, Queue: req.Queue, Group: req.Group, Mode: req.SubscriptionMode,
		From: req.SubscriptionFrom, Now: c.st.DBNow()}
	switch {
	case req.Group == store.QueueModeGroup:
		p.Mode, p.From = "all", nil
	case p.From != nil:
		p.Mode = "from"
	case p.Mode == "":
		p.Mode = "all"
	}
	if c.retry.LockTimedOut != nil {
		p.LockWait = store.LockWait()
	}
	var qid string
	err := c.retry.Run(ctx, true, func(ctx context.Context) (err error) {
		qid, err = c.names.Subscribe(ctx, p)
		return err
	})
	return qid, err
}

// noteEmpty is the bookkeeping after a wildcard pop at now claimed
// nothing: the pop mark, then the watermark, each when its throttle lets
// it. Neither changes the pop's answer, so a failure is logged, not
// returned (and a client that left is no database problem worth a
// warning).
func (c *Claimer) noteEmpty(ctx context.Context, req PopRequest, queueID string, now *time.Time) {
	if c.popMarks.due(queueID, req.Group) {
		err := c.st.MarkPopEmpty(ctx, store.PopMarkParams{QueueID: queueID, Group: req.Group, Now: now})
		if err != nil && ctx.Err() == nil {
			c.log.Warn("pop mark not written", "queue", req.Queue, "group", req.Group, "err", err)
		}
	}
	if err := c.noteEmptyScan(ctx, req); err != nil && ctx.Err() == nil {
		c.log.Warn("consumer watermark not written", "queue", req.Queue, "group", req.Group, "err", err)
	}
}

// noteEmptyScan writes the watermark when its throttle lets it, and arms
// the throttle only when the row is there afterwards (watermarkThrottle).
func (c *Claimer) noteEmptyScan(ctx context.Context, req PopRequest) error {
	if !c.marks.due(req.Tenant, req.Queue, req.Group) {
		return nil
	}
	row, err := c.st.WriteWatermark(ctx, store.WatermarkParams{Queue: req.Queue, Group: req.Group, Tenant: req.Tenant,
		Now: c.st.DBNow()})
	if err != nil {
		return err
	}
	if row {
		c.marks.arm(req.Tenant, req.Queue, req.Group)
	}
	return nil
}

// ForgetWatermarks lets the next empty pop of tenant's (queue, group)
// write its watermark at once, after the statement that deleted its row:
// a seek to a timestamp, a group delete, a subscription change or a queue
// delete. "" for queue or group matches any.
func (c *Claimer) ForgetWatermarks(tenant, queue, group string) { c.marks.forget(tenant, queue, group) }
