package leader

import (
	"context"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// FoldAfter is how old a minute is before its per-broker queue rows are
// folded into one: past any broker's flush (each writes a closed minute
// within seconds, or keeps it pending while PostgreSQL is away; a minute
// flushed after its fold is counted apart, and summed all the same).
const FoldAfter = 10 * time.Minute

// Stats is the statistics leader (advisory lock 737002): once a minute it
// samples the partitions and backlog of each queue active in the last
// closed minute, folds per-broker queue rows older than FoldAfter, and
// deletes recorded analytics older than Retention.
type Stats struct {
	Lead
	Retention time.Duration
}

// Name implements background.Service.
func (s *Stats) Name() string { return "stats" }

// RunOnce runs one pass if this broker wins the lock.
func (s *Stats) RunOnce(ctx context.Context) error {
	return s.pass(ctx, store.StatsLock, "stats", func(lead *store.Leader) error {
		now := s.Clock.Now().UTC()
		minute := now.Truncate(time.Minute)
		res, err := lead.StatsPass(ctx, minute.Add(-time.Minute), minute.Add(-FoldAfter), now.Add(-s.Retention))
		if err == nil && res.Pruned > 0 {
			s.Log.Info("stats pass", "sampled", res.Sampled, "folded", res.Folded, "pruned", res.Pruned)
		}
		return err
	})
}
