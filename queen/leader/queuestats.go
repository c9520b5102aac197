package leader

import (
	"context"

	"github.com/queen-go/queen/queen/store"
)

// QueueStats is the queue-statistics leader (advisory lock 737003): every
// STATS_INTERVAL_MS it recounts every queue into queen.queue_stats, the
// snapshot that status, the namespace and task lists and the Prometheus
// scrape read, so their cost follows the queues, not the partitions and
// backlog. One broker of a cluster counts at a time.
type QueueStats struct {
	Lead
}

// Name implements background.Service.
func (s *QueueStats) Name() string { return "queue-stats" }

// RunOnce runs one refresh if this broker wins the lock.
func (s *QueueStats) RunOnce(ctx context.Context) error {
	return s.pass(ctx, store.QueueStatsLock, "queue-stats", func(lead *store.Leader) error {
		start := s.Clock.Now()
		n, err := lead.RefreshQueueStats(ctx)
		if took := s.Clock.Now().Sub(start); took > s.Every.Interval/2 {
			// An operator should know the snapshot costs half its interval.
			s.Log.Warn("queue statistics refresh is slow", "queues", n, "took", took, "interval", s.Every.Interval)
		}
		return err
	})
}
