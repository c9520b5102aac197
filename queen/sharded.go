package queen

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/dbprobe"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/sweeper"
	"github.com/queen-go/queen/queen/writes"
)

// placementCacheSize is the queues a broker's placement cache holds.
const placementCacheSize = 1 << 16

// catalogPoolSize bounds a broker's connections to the catalogue: it is
// read on placement cache misses and written when a queue is placed.
const catalogPoolSize = 4

// shardPart is one shard's database as a broker holds it: its pool and
// what runs over it. The first shard's is the broker's own pool, store,
// writes and names (b.pool, b.store, ...), so everything built over those
// (the probe, the read-only watch, the maintenance switches) follows the
// default shard.
type shardPart struct {
	name   string
	pool   *pgxpool.Pool
	store  *store.Store
	writes *writes.Policy
	names  *names.Names
	retry  combine.Retry
	pushes *pushpath.Path
	// spool and drainer are the shard's spool lane, probe the shard's
	// probe its push path and drain ask: all nil without FILE_BUFFER_DIR
	// (lanes.go).
	spool   *spool.Spool
	drainer *spool.Drainer
	probe   *dbprobe.Prober
}

// shardConfig is cfg as the pool of shard sh sees it: the shard's URL as
// DATABASE_URL.
func shardConfig(cfg config.Config, sh shards.Shard) config.Config {
	cfg.DatabaseURL = sh.URL
	return cfg
}

// whatDB names the database a startup error is about: with shards, the
// shard and its host and database; without, the database as today.
func (b *Broker) whatDB() string {
	if b.cfg.Shards.Enabled() {
		return "shard " + b.cfg.Shards.Shards[0].Name + " (" + b.database() + ")"
	}
	return "database " + b.database()
}

// openShards opens every shard but the first (whose pool and store are the
// broker's own, open already) and the catalogue: each migrated when
// QUEEN_APPLY_SCHEMA, the configured shards registered in the catalogue.
func (b *Broker) openShards(ctx context.Context, cipher *crypt.Cipher) error {
	if !b.cfg.Shards.Enabled() {
		return nil
	}
	b.shards = []*shardPart{{name: b.cfg.Shards.Shards[0].Name, pool: b.pool, store: b.store, writes: b.writes, names: b.names}}
	for _, sh := range b.cfg.Shards.Shards[1:] {
		part, err := b.openShard(ctx, sh, cipher)
		if err != nil {
			return err
		}
		b.shards = append(b.shards, part)
	}
	return b.openCatalog(ctx)
}

// openShard opens, migrates (when QUEEN_APPLY_SCHEMA) and wraps one shard.
func (b *Broker) openShard(ctx context.Context, sh shards.Shard, cipher *crypt.Cipher) (*shardPart, error) {
	what := "shard " + sh.Name
	pool, err := b.openOther(ctx, shardConfig(b.cfg, sh), what, b.cfg.DBPoolSize)
	if err != nil {
		return nil, err
	}
	p := &shardPart{name: sh.Name, pool: pool}
	b.others = append(b.others, pool)
	if b.cfg.ApplySchema {
		if err := b.retryStartup(ctx, what+" ("+dbOf(pool)+")", func(ctx context.Context) error { return store.Migrate(ctx, pool) }); err != nil {
			return nil, err
		}
	}
	ro := &store.ReadOnlyWatch{OnChange: func(ro bool) {
		b.log.Warn("shard read-only changed", "shard", sh.Name, "readOnly", ro)
	}}
	p.store = store.New(pool, store.Options{DBNow: b.opts.DBNow, IDs: b.opts.IDs, TxTimeout: b.cfg.DBStatementTimeout,
		Clock: b.opts.Clock, ReadOnly: ro})
	p.writes = writes.New(p.store, writes.Options{Cipher: cipher, Clock: b.opts.Clock, TTL: b.cfg.CacheRefreshInterval})
	p.names = names.New(p.store, names.Options{Clock: b.opts.Clock, TTL: b.cfg.CacheRefreshInterval, SealHints: p.writes})
	return p, nil
}

// openOther opens a pool on cfg's database other than the broker's own
// (another shard, the catalogue), of size conns; what names it in errors.
func (b *Broker) openOther(ctx context.Context, cfg config.Config, what string, conns int) (*pgxpool.Pool, error) {
	pc, err := PoolConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	pc.MaxConns = int32(conns)
	if b.opts.ConfigurePool != nil {
		b.opts.ConfigurePool(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("%s: pool: %w", what, err)
	}
	return pool, nil
}

// dbOf names a pool's hosts and database, for errors.
func dbOf(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	return strings.Join(hostsOf(cc), ",") + "/" + cc.Database
}

// openCatalog opens the catalogue (QUEEN_CATALOG_URL), migrates it when
// QUEEN_APPLY_SCHEMA, registers the configured shards and builds the
// placement the HTTP API routes by.
func (b *Broker) openCatalog(ctx context.Context) error {
	cfg := b.cfg
	cfg.DatabaseURL = b.cfg.Shards.CatalogURL
	pool, err := b.openOther(ctx, cfg, "catalogue "+shards.CatalogVar, catalogPoolSize)
	if err != nil {
		return err
	}
	b.others = append(b.others, pool)
	cat := catalog.New(pool, b.cfg.Shards)
	what := "catalogue " + shards.CatalogVar + " (" + dbOf(pool) + ")"
	err = b.retryStartup(ctx, what, func(ctx context.Context) error {
		if b.cfg.ApplySchema {
			if err := catalog.Migrate(ctx, pool); err != nil {
				return err
			}
		}
		return cat.RegisterShards(ctx)
	})
	if err != nil {
		return err
	}
	b.placement = &placement{cat: cat, cache: catalog.NewCache(cat, placementCacheSize), shards: b.shards}
	b.moves = b.newMoves(pool)
	return nil
}

// placement is the HTTP API's httpapi.Placement: the catalogue behind the
// broker's placement cache.
type placement struct {
	cat   *catalog.Catalog
	cache *catalog.Cache
	// shards are the shards in configured order, asked whether they hold
	// a queue before the rules place it (held).
	shards []*shardPart
}

// Lookup is the queue's shard and epoch from the cache (read from the
// catalogue on a miss); a queue with no placement is found false.
func (p *placement) Lookup(ctx context.Context, tenant, queue string) (httpapi.Placed, bool, error) {
	pl, err := p.cache.Lookup(ctx, tenant, queue)
	switch {
	case errors.Is(err, catalog.ErrNotPlaced):
		return httpapi.Placed{}, false, nil
	case err != nil:
		return httpapi.Placed{}, false, err
	}
	return httpapi.Placed{Shard: pl.Shard, Epoch: pl.Epoch}, true, nil
}

// Place is the queue's shard and epoch, placing it by the rules when it
// has none. A queue it placed is then looked up once, so the cache holds
// it: its later requests are served while the catalogue is down.
func (p *placement) Place(ctx context.Context, tenant, namespace, queue string) (httpapi.Placed, error) {
	found, ok, err := p.Lookup(ctx, tenant, queue)
	if err != nil || ok {
		return found, err
	}
	pl, err := p.place(ctx, shards.Queue{Tenant: tenant, Namespace: namespace, Name: queue})
	if err != nil {
		return httpapi.Placed{}, err
	}
	if cached, err := p.cache.Lookup(ctx, tenant, queue); err == nil {
		return httpapi.Placed{Shard: cached.Shard, Epoch: cached.Epoch}, nil
	}
	return httpapi.Placed{Shard: pl.Shard, Epoch: pl.Epoch}, nil
}

// place places a queue that has no placement: where a shard already holds
// its rows (the first such shard in configured order: a queue created
// before shards were configured, on the database that became a shard),
// else where the rules say. Without that, a push to such a queue would
// place it by the rules on another shard and create it there, and the
// messages it held would be where no request is routed. It runs once per
// queue (the placement is cached after), so asking every shard costs a
// queue's first push or configure, not every request.
func (p *placement) place(ctx context.Context, q shards.Queue) (catalog.Placement, error) {
	for _, sh := range p.shards {
		held, err := sh.store.QueueHeld(ctx, store.QueueHeldParams{Tenant: q.Tenant, Name: q.Name})
		if err != nil {
			return catalog.Placement{}, fmt.Errorf("place %s: shard %s: %w", q.Name, sh.name, err)
		}
		if held {
			pl, _, err := p.cat.Adopt(ctx, q, sh.name)
			return pl, err
		}
	}
	pl, _, err := p.cat.Place(ctx, q)
	return pl, err
}

// Invalidate forgets the queue's cached placement: a shard answered
// "moved" for it, so the next Lookup reads the catalogue.
func (p *placement) Invalidate(tenant, queue string) { p.cache.Invalidate(tenant, queue) }

// shardOptions gives every shard its push path and contention retry and
// sets the HTTP API's planes and placement; nothing without shards. The
// first shard's push path is the one already built (first).
func (b *Broker) shardOptions(o *httpapi.Options, arbiter *admission.Arbiter, cipher *crypt.Cipher, first *pushpath.Path) {
	if b.shards == nil {
		return
	}
	for i, p := range b.shards {
		p.retry, p.pushes = o.Retry, first
		if i > 0 {
			p.retry = b.contentionRetry(p.store)
			p.pushes = b.newPushPath(arbiter, cipher, p.retry, p)
		}
		o.Shards = append(o.Shards, httpapi.Shard{Name: p.name, Store: p.store, Writes: p.writes, Names: p.names, Push: p.pushes, Retry: p.retry})
	}
	o.Placement, o.Moves = b.placement, b.moves
}

// closeOthers closes the pools of the shards but the first and of the
// catalogue.
func (b *Broker) closeOthers() {
	for _, p := range b.others {
		p.Close()
	}
}

// shardSweepers are the sweepers of the shards but the first (whose
// sweeper, first, the caller made): timers live with their queue.
func (b *Broker) shardSweepers(arbiter *admission.Arbiter, cipher *crypt.Cipher, first *sweeper.Sweeper) []*sweeper.Sweeper {
	sws := []*sweeper.Sweeper{first}
	for _, p := range b.shards[min(1, len(b.shards)):] {
		sws = append(sws, b.newSweeper(arbiter, cipher, p))
	}
	return sws
}

// shardLeaders are the retention and queue statistics leaders of the
// shards but the first (the caller runs the first's): each elects its
// leader on its shard and works on its queues; and the mover's runner,
// whose lock is the catalogue's.
func (b *Broker) shardLeaders() []background.Service {
	var services []background.Service
	if b.moves != nil {
		services = append(services, b.moves.run)
	}
	for _, p := range b.shards[min(1, len(b.shards)):] {
		services = append(services, &leader.Retention{Lead: b.leadOn(p.store, b.cfg.RetentionInterval), Batch: b.cfg.RetentionBatchSize,
			CleanupDays: b.cfg.PartitionCleanupDays, Observe: b.opts.RetentionPasses})
		if b.cfg.StatsInterval > 0 {
			services = append(services, &leader.QueueStats{Lead: b.leadOn(p.store, b.cfg.StatsInterval)})
		}
	}
	return services
}

// shardNames are the name caches of every shard but the first, which a
// mesh hint of a changed queue must reach too.
func (b *Broker) shardNames() []*names.Names {
	var out []*names.Names
	for _, p := range b.shards[min(1, len(b.shards)):] {
		out = append(out, p.names)
	}
	return out
}

// MigrateShards is `queen migrate` with shards: every shard's schema and
// the catalogue's, each error naming its shard or the catalogue.
func MigrateShards(ctx context.Context, cfg config.Config) error {
	step := func(what string, dbCfg config.Config, migrate func(context.Context, *pgxpool.Pool) error) error {
		pc, err := PoolConfig(dbCfg)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer pool.Close()
		if err := migrate(ctx, pool); err != nil {
			return fmt.Errorf("%s (%s): %w", what, dbOf(pool), err)
		}
		return nil
	}
	for _, sh := range cfg.Shards.Shards {
		if err := step("shard "+sh.Name, shardConfig(cfg, sh), store.Migrate); err != nil {
			return err
		}
	}
	cat := cfg
	cat.DatabaseURL = cfg.Shards.CatalogURL
	return step("catalogue "+shards.CatalogVar, cat, catalog.Migrate)
}
