// Package leader holds the jobs that run on one replica per cycle, elected
// by a PostgreSQL advisory lock on a dedicated connection, and run on that
// connection: a leader whose lock session died (a failover) stops with it,
// and holds no lead until it takes the lock again. Every job is idempotent,
// so a brief double leader does no harm.
package leader

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
)

// Retention deletes expired, consumed-and-expired and evicted messages,
// then empty partitions idle for PARTITION_CLEANUP_DAYS (advisory lock
// 737001).
type Retention struct {
	Store *store.Store
	Clock clock.Clock
	Batch int
	// CleanupDays: empty partitions idle this long are removed (0: never).
	CleanupDays int
	Log         *slog.Logger
	Every       background.Every
	// Observe, when set, is told when each pass this broker led began
	// and ended (while it held the lock), error or not: a test across a
	// failover checks that no two brokers' passes overlap.
	Observe func(start, end time.Time)

	leading bool // whether the last pass held the lock, to log changes
}

// Name implements background.Service.
func (r *Retention) Name() string { return "retention" }

// NextDue implements background.Service.
func (r *Retention) NextDue(now time.Time) time.Time { return r.Every.Next(now) }

// RunOnce runs one pass if this broker wins the lock.
func (r *Retention) RunOnce(ctx context.Context) error {
	defer func() { r.Every.Mark(r.Clock.Now()) }()
	lead, err := takeLead(ctx, r.Store, store.RetentionLock, "retention", &r.leading, r.Log)
	if err != nil || lead == nil {
		return err
	}
	defer lead.Release()
	if r.Observe != nil {
		start := r.Clock.Now()
		defer func() { r.Observe(start, r.Clock.Now()) }()
	}
	// Every statement of the pass runs on the session that holds the
	// lock: if it dies (a failover), the pass stops with it.
	// A rule that fails does not hold back the others, nor partition
	// cleanup: each is reported, and the rest runs.
	res, rulesErr := lead.RetentionPass(ctx, r.Batch)
	var cleanErr error
	if ctx.Err() == nil {
		res.Partitions, cleanErr = lead.CleanupPartitions(ctx, r.Batch, r.CleanupDays)
	}
	if res.Expired+res.Completed+res.Evicted+res.Partitions > 0 {
		r.Log.Info("retention pass", "expired", res.Expired, "completed", res.Completed, "evicted", res.Evicted,
			"emptyPartitions", res.Partitions)
	}
	return errors.Join(rulesErr, cleanErr)
}

// takeLead tries lock for one pass. It returns nil, and no error, when
// another broker holds it. A change of leadership is logged at debug: the
// lock is released after every pass, so brokers take turns, and a
// three-broker cluster would log one every few seconds.
func takeLead(ctx context.Context, st *store.Store, lock int64, name string, leading *bool, log *slog.Logger) (*store.Leader, error) {
	lead, ok, err := st.TryLeader(ctx, lock)
	if err == nil && ok != *leading {
		*leading = ok
		log.Debug(name+" leadership changed", "leader", ok, "lock", lock)
	}
	if err != nil || !ok {
		return nil, err
	}
	return lead, nil
}
