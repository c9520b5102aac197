package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
)

// QueueStats is the queue-statistics leader (advisory lock 737003): every
// STATS_INTERVAL_MS it recounts every queue into queen.queue_stats, the
// snapshot that status, the namespace and task lists and the Prometheus
// scrape read, so their cost follows the queues, not the partitions and
// backlog. One broker of a cluster counts at a time.
type QueueStats struct {
	Store *store.Store
	Clock clock.Clock
	Log   *slog.Logger
	Every background.Every

	leading bool
}

// Name implements background.Service.
func (s *QueueStats) Name() string { return "queue-stats" }

// NextDue implements background.Service.
func (s *QueueStats) NextDue(now time.Time) time.Time { return s.Every.Next(now) }

// RunOnce runs one refresh if this broker wins the lock.
func (s *QueueStats) RunOnce(ctx context.Context) error {
	defer func() { s.Every.Mark(s.Clock.Now()) }()
	lead, err := takeLead(ctx, s.Store, store.QueueStatsLock, "queue-stats", &s.leading, s.Log)
	if err != nil || lead == nil {
		return err
	}
	defer lead.Release()
	start := s.Clock.Now()
	n, err := lead.RefreshQueueStats(ctx)
	if took := s.Clock.Now().Sub(start); took > s.Every.Interval/2 {
		// An operator should know the snapshot costs half its interval.
		s.Log.Warn("queue statistics refresh is slow", "queues", n, "took", took, "interval", s.Every.Interval)
	}
	return err
}
