// Package leader holds the jobs that run on one replica per cycle, elected
// by a PostgreSQL advisory lock on a dedicated connection, and run on that
// connection: a leader whose lock session died (a failover) stops with it,
// and holds no lead until it takes the lock again. Every job is idempotent,
// so a brief double leader does no harm.
package leader

import (
	"context"
	"errors"
	"fmt"
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
	res, rulesErr := RetentionPass(ctx, r.Store, on, r.Batch)
	var cleanErr error
	if ctx.Err() == nil {
		res.Partitions, cleanErr = CleanupPartitions(ctx, r.Store, on, r.Batch, r.CleanupDays)
	}
	if res.Expired+res.Completed+res.Evicted+res.Partitions > 0 {
		r.Log.Info("retention pass", "expired", res.Expired, "completed", res.Completed, "evicted", res.Evicted,
			"emptyPartitions", res.Partitions)
	}
	return errors.Join(rulesErr, cleanErr)
}

// on is where a pass's statements run: the lock's session, so a pass stops
// with it. The retention-on-pool canary runs them on the pool instead: a
// leader whose lock session died keeps deleting.
func (r *Retention) on(lead *store.Leader) store.Executor {
	if canary.On("retention-on-pool") {
		return r.Store.Pool() // a deposed leader keeps acting
	}
	return lead.Executor()
}

// RetentionResult counts what one pass deleted.
type RetentionResult struct {
	Expired, Completed, Evicted int64
	// Partitions is how many empty, idle partitions were removed.
	Partitions int64
}

// maxRetentionRounds bounds one pass: a rule with more due rows than
// batch * maxRetentionRounds finishes in the next pass.
const maxRetentionRounds = 1000

// RetentionPass deletes messages older than retentionSeconds
// (retentionEnabled queues); consumed messages older than
// completedRetentionSeconds; and messages older than maxWaitTimeSeconds
// (eviction). Each rule deletes in statements of at most batch rows, each
// its own short transaction, until a statement finds fewer than batch rows
// due, so a backlog of N rows clears in one pass (N/batch statements). It is
// idempotent, so a brief double leader does no harm.
//
// Its statements run on on: the elected leader passes its lock's session
// (store.Leader.Executor); tests and the simulator's forced double leader
// pass the pool, whoever holds the lock.
func RetentionPass(ctx context.Context, s *store.Store, on store.Executor, batch int) (RetentionResult, error) {
	var r RetentionResult
	counts := map[string]*int64{"expired": &r.Expired, "completed": &r.Completed, "evicted": &r.Evicted}
	var errs []error
	for _, rule := range store.RetentionRules() {
		// Rules are isolated: one that fails (a statement timeout, say)
		// is reported, and the others still run.
		for round := 0; round < maxRetentionRounds; round++ {
			n, err := s.RetentionRound(ctx, on, rule, batch)
			if err != nil {
				errs = append(errs, fmt.Errorf("retention %s: %w", rule, err))
				if canary.On("retention-stops-at-failure") {
					return r, errors.Join(errs...)
				}
				break
			}
			*counts[rule] += n
			if n < int64(batch) {
				break
			}
		}
	}
	if err := s.PruneRetentionHistory(ctx, on); err != nil {
		errs = append(errs, fmt.Errorf("retention history prune: %w", err))
	}
	return r, errors.Join(errs...)
}

// CleanupPartitions removes empty partitions idle for days (0: never), in
// rounds of batch, on on (as RetentionPass). Idempotent, like every
// retention rule.
func CleanupPartitions(ctx context.Context, s *store.Store, on store.Executor, batch, days int) (int64, error) {
	if days <= 0 {
		return 0, nil
	}
	var total int64
	for round := 0; round < maxRetentionRounds; round++ {
		n, err := s.CleanupEmptyPartitions(ctx, on, batch, days)
		if err != nil {
			return total, fmt.Errorf("empty partition cleanup: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
	return total, nil
}
