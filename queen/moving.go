package queen

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/mover"
)

// moverInterval is how often every broker with shards looks for
// unfinished moves to run (the one holding the mover's catalogue lock
// runs them): a move a stopped broker left resumes within it. A planned
// move wakes this broker's runner at once.
const moverInterval = 5 * time.Second

// moves is the HTTP API's httpapi.Moves: the mover, its runner and the
// catalogue.
type moves struct {
	m   *mover.Mover
	run *mover.Service
	cat *catalog.Catalog
}

// Plan plans the move and wakes the runner.
func (mv *moves) Plan(ctx context.Context, tenant, queue, to string) (string, error) {
	id, err := mv.m.Plan(ctx, tenant, queue, to)
	if err == nil {
		mv.run.Wake()
	}
	return id, err
}

// Move reads a move.
func (mv *moves) Move(ctx context.Context, id string) (mover.Status, error) { return mv.m.Get(ctx, id) }

// Placements pages through the tenant's placements.
func (mv *moves) Placements(ctx context.Context, tenant, after string, limit int) ([]catalog.QueuePlacement, error) {
	return mv.cat.Placements(ctx, tenant, after, limit)
}

// Loads are the shards with their queue counts.
func (mv *moves) Loads(ctx context.Context) ([]catalog.ShardLoad, error) { return mv.cat.Loads(ctx) }

// newMoves builds the mover over the catalogue (its pool, for the mover's
// session lock) and every shard: a destination's subscription reaches the
// source by the source's QUEEN_SHARDS URL.
func (b *Broker) newMoves(catPool *pgxpool.Pool) *moves {
	byName := make(map[string]mover.Shard, len(b.shards))
	for i, p := range b.shards {
		byName[p.name] = mover.Shard{Pool: p.pool, Store: p.store, ConnInfo: b.cfg.Shards.Shards[i].URL}
	}
	m := mover.New(mover.Config{Catalog: b.placement.cat, CatalogPool: catPool, Shards: byName,
		Log: b.log.With("service", "mover"), Clock: b.opts.Clock})
	return &moves{m: m, run: mover.NewService(m, moverInterval), cat: b.placement.cat}
}
