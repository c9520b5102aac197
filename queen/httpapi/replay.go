package httpapi

import (
	"context"
	"fmt"

	"github.com/queen-go/queen/queen/store"
)

// Replay stores one batch of spooled items (a spool drain's: one tenant,
// queue and partition) on the shard its queue is placed on when it drains,
// at that placement's epoch, not where it was when it was spooled: the
// queue may have moved since (design-shards.md, invariant 6). A "moved"
// answer routes it again once, as a live push; one still moved is returned
// as is, which the drain takes as transient (the queue is frozen for a
// move) and retries. Without shards it is the Server's own push path's
// replay. A placement that cannot be told is transient to the drain too
// (replayRoute), whatever the catalogue answered: the records are not at
// fault, and are never quarantined for it.
func (s *Server) Replay(ctx context.Context, tenant string, items []store.PushItem) error {
	pl, err := s.replayRoute(ctx, tenant, items)
	if err != nil {
		return err
	}
	err = pl.pushes.Replay(ctx, tenant, items)
	if !s.movedOnce(err, tenant, func() []string { return pushQueues(items) }) {
		return err
	}
	if pl, err = s.replayRoute(ctx, tenant, items); err != nil {
		return err
	}
	return pl.pushes.Replay(ctx, tenant, items)
}

// replayRoute is pushPlane for a replay, its error flattened to text: a
// database error of the catalogue's inside it must not read as the
// records' (the drain quarantines records PostgreSQL refuses).
func (s *Server) replayRoute(ctx context.Context, tenant string, items []store.PushItem) (*plane, error) {
	pl, err := s.pushPlane(ctx, tenant, items)
	if err != nil {
		return nil, fmt.Errorf("spool replay: %v", err)
	}
	return pl, nil
}
