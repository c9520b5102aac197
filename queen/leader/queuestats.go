package leader

import (
	"context"

	"github.com/queen-go/queen/queen/store"
)

// fullStatsEvery is how many passes make one full recount: the others
// count only the queues changed since the last complete pass (a few pages
// per thousand partitions read, against a dozen buffer hits per partition
// counted), and a full one now and then bounds what any write path that
// forgot to leave a trace could leave stale (5 minutes at the default
// 10 s interval).
const fullStatsEvery = 30

// QueueStats is the queue-statistics leader (advisory lock 737003): every
// STATS_INTERVAL_MS it recounts the queues into queen.queue_stats, the
// snapshot that status, the namespace and task lists and the Prometheus
// scrape read, so their cost follows the queues, not the partitions and
// backlog. One broker of a cluster counts at a time. A pass counts only
// the queues changed since this broker's last complete pass, every
// fullStatsEvery-th pass (and the first) all of them; a horizon kept from
// before another broker led is older, so it counts more, never less.
type QueueStats struct {
	Lead

	horizon store.StatsHorizon // the last complete pass's; zero: none
	passes  int                // passes since the last full one
}

// Name implements background.Service.
func (s *QueueStats) Name() string { return "queue-stats" }

// RunOnce runs one refresh if this broker wins the lock.
func (s *QueueStats) RunOnce(ctx context.Context) error {
	return s.pass(ctx, store.QueueStatsLock, "queue-stats", func(lead *store.Leader) error {
		since := s.horizon
		if s.passes%fullStatsEvery == 0 {
			since = store.StatsHorizon{}
		}
		start := s.Clock.Now()
		n, next, err := lead.RefreshChangedQueueStats(ctx, since)
		if took := s.Clock.Now().Sub(start); took > s.Every.Interval/2 {
			// An operator should know the snapshot costs half its interval.
			s.Log.Warn("queue statistics refresh is slow", "queues", n, "took", took, "interval", s.Every.Interval)
		}
		if err == nil {
			s.horizon, s.passes = next, s.passes+1
		}
		return err
	})
}
