// Package leader holds the jobs that run on one replica per cycle, elected
// by a PostgreSQL advisory lock on a dedicated connection, and run on that
// connection: a leader whose lock session died (a failover) stops with it,
// and holds no lead until it takes the lock again. Every job is idempotent,
// so a brief double leader does no harm.
package leader

import (
	"context"
	"errors"
	"time"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/store"
)

// Retention deletes expired, consumed-and-expired and evicted messages,
// then empty partitions idle for PARTITION_CLEANUP_DAYS (advisory lock
// 737001).
type Retention struct {
	Lead
	Batch int
	// CleanupDays: empty partitions idle this long are removed (0: never).
	CleanupDays int
	// Observe, when set, is told when each pass this broker led began
	// and ended (while it held the lock), error or not: a test across a
	// failover checks that no two brokers' passes overlap.
	Observe func(start, end time.Time)
}

// Name implements background.Service.
func (r *Retention) Name() string { return "retention" }

// RunOnce runs one pass if this broker wins the lock.
func (r *Retention) RunOnce(ctx context.Context) error {
	return r.pass(ctx, store.RetentionLock, "retention", func(lead *store.Leader) error { return r.passLed(ctx, lead) })
}

// passLed is one retention pass on the lock's session.
func (r *Retention) passLed(ctx context.Context, lead *store.Leader) error {
	if r.Observe != nil {
		start := r.Clock.Now()
		defer func() { r.Observe(start, r.Clock.Now()) }()
	}
	// Every statement of the pass runs on the session that holds the
	// lock: if it dies (a failover), the pass stops with it.
	// A rule that fails does not hold back the others, nor partition
	// cleanup: each is reported, and the rest runs.
	on := r.on(lead)
	res, rulesErr := on.RetentionPass(ctx, r.Batch)
	var cleanErr error
	if ctx.Err() == nil {
		res.Partitions, cleanErr = on.CleanupPartitions(ctx, r.Batch, r.CleanupDays)
	}
	if res.Expired+res.Completed+res.Evicted+res.Partitions > 0 {
		r.Log.Info("retention pass", "expired", res.Expired, "completed", res.Completed, "evicted", res.Evicted,
			"emptyPartitions", res.Partitions)
	}
	return errors.Join(rulesErr, cleanErr)
}

// retentionRunner runs a retention pass's statements: a store.Leader on the
// lock's session, or the store itself on its pool.
type retentionRunner interface {
	RetentionPass(ctx context.Context, batch int) (store.RetentionResult, error)
	CleanupPartitions(ctx context.Context, batch, days int) (int64, error)
}

// on is where a pass's statements run: the lock's session, so a pass stops
// with it. The retention-on-pool canary runs them on the pool instead: a
// leader whose lock session died keeps deleting.
func (r *Retention) on(lead *store.Leader) retentionRunner {
	if canary.On("retention-on-pool") {
		return r.Store // a deposed leader keeps acting
	}
	return lead
}
