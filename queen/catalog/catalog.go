// Package catalog is the shard catalogue (../shared/design-shards.md):
// its schema and migrations, one named statement per operation
// (statements.go), the placement of a new queue and the compare-and-set
// of a move's activation (Catalog), and the brokers' placement cache
// (Cache).
//
// The catalogue is its own PostgreSQL database (QUEEN_CATALOG_URL). Its
// tables live in schema queen_catalog, beside nothing of a shard's, so one
// database can be a shard and the catalogue at once. A broker with shards
// routes each queue-addressed request by its placement: Cache.Lookup on
// every such request (from memory once cached), Place when a configure or
// a push creates a queue.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/shards"
)

// Placement is where a queue lives: its shard, and the epoch the shard's
// fence compares (1 when placed, one more with every move's activation).
type Placement struct {
	Shard string
	Epoch int64
}

// The errors a caller tells apart; each returned error wraps one of them
// and names the queue or shard.
var (
	ErrNotPlaced    = errors.New("queue has no placement")
	ErrUnknownShard = errors.New("unknown shard")
	ErrBadQueue     = errors.New("not a queue the catalogue can key")
)

// StaleEpochError refuses a compare-and-set whose expected epoch is no
// longer the queue's: another activation came first.
type StaleEpochError struct {
	Tenant, Queue   string
	Expect, Current int64
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("catalog: queue %s/%s is at epoch %d, not the expected %d", e.Tenant, e.Queue, e.Current, e.Expect)
}

// Catalog runs the catalogue's statements on its database, choosing new
// queues' shards by the configured rules.
type Catalog struct {
	db  DB
	cfg shards.Config
}

// New returns the catalogue on db (normally a pool on QUEEN_CATALOG_URL)
// placing by cfg's shards and rules.
func New(db DB, cfg shards.Config) *Catalog {
	return &Catalog{db: reconnecting{db}, cfg: cfg}
}

// RegisterShards records the configured shards' names in the catalogue.
// Shards it already knows stay as they are; none is removed.
func (c *Catalog) RegisterShards(ctx context.Context) error {
	if err := shardsRegister(ctx, c.db, shardsRegisterParams{Names: c.cfg.Names()}); err != nil {
		return fmt.Errorf("catalog: register shards %s: %w", strings.Join(c.cfg.Names(), ", "), err)
	}
	return nil
}

// Loads are the known shards with the queues placed on each.
func (c *Catalog) Loads(ctx context.Context) ([]ShardLoad, error) {
	loads, err := shardsLoad(ctx, c.db, shardsLoadParams{})
	if err != nil {
		return nil, fmt.Errorf("catalog: shard loads: %w", err)
	}
	return loads, nil
}

// Placements pages through the tenant's placements by queue name: at most
// limit after the queue named after ("" for the first page).
func (c *Catalog) Placements(ctx context.Context, tenant, after string, limit int) ([]QueuePlacement, error) {
	if err := checkQueue(tenant, "-"); err != nil {
		return nil, err
	}
	ps, err := placementList(ctx, c.db, placementListParams{Tenant: tenant, After: after, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("catalog: placements of %s: %w", tenant, err)
	}
	return ps, nil
}

// Lookup reads a queue's placement; a queue without one is ErrNotPlaced.
func (c *Catalog) Lookup(ctx context.Context, tenant, queue string) (Placement, error) {
	if err := checkQueue(tenant, queue); err != nil {
		return Placement{}, err
	}
	p, found, err := placementGet(ctx, c.db, placementKey{tenant, queue})
	switch {
	case err != nil:
		return Placement{}, fmt.Errorf("catalog: placement of %s/%s: %w", tenant, queue, err)
	case !found:
		return Placement{}, fmt.Errorf("catalog: %s/%s: %w", tenant, queue, ErrNotPlaced)
	}
	return p, nil
}

// Place returns the placement of a queue, placing it first if it has
// none: on the shard the rules choose (shards.Place, loads read from the
// catalogue), at epoch 1. Brokers placing one queue at once agree: the
// first insert to commit wins and the others return its placement, even
// when their rules or loads chose another shard. created says whether this
// call placed it.
func (c *Catalog) Place(ctx context.Context, q shards.Queue) (p Placement, created bool, err error) {
	if err := checkQueue(q.Tenant, q.Name); err != nil {
		return Placement{}, false, err
	}
	key := placementKey{q.Tenant, q.Name}
	if p, found, err := placementGet(ctx, c.db, key); err != nil || found {
		return p, false, wrapPlace(q, err)
	}
	shard, err := c.choose(ctx, q)
	if err != nil {
		return Placement{}, false, err
	}
	return c.placeOn(ctx, q, shard)
}

// Adopt places a queue that has no placement on shard, whatever the rules
// say: the shard already holds its rows (a queue created before shards
// were configured, on the database that became a shard), so placing it
// elsewhere would leave them where no request is routed. A queue already
// placed keeps its placement (created false), as with Place.
func (c *Catalog) Adopt(ctx context.Context, q shards.Queue, shard string) (p Placement, created bool, err error) {
	if err := checkQueue(q.Tenant, q.Name); err != nil {
		return Placement{}, false, err
	}
	if !slices.Contains(c.cfg.Names(), shard) {
		return Placement{}, false, wrapPlace(q, fmt.Errorf("shard %q: %w", shard, ErrUnknownShard))
	}
	return c.placeOn(ctx, q, shard)
}

// placeOn inserts q's placement on shard at epoch 1, or answers the
// placement another broker's insert committed first.
func (c *Catalog) placeOn(ctx context.Context, q shards.Queue, shard string) (Placement, bool, error) {
	key := placementKey{q.Tenant, q.Name}
	p, added, err := placementAdd(ctx, c.db, placementAddParams{q.Tenant, q.Name, shard})
	if err != nil || added {
		return p, added, wrapPlace(q, shardError(err, shard))
	}
	// Another broker's insert committed first; this later statement's
	// snapshot sees it.
	p, found, err := placementGet(ctx, c.db, key)
	if err == nil && !found {
		err = fmt.Errorf("placed concurrently, then gone: %w", ErrNotPlaced)
	}
	return p, false, wrapPlace(q, err)
}

// choose is the shard the rules give a new queue. A draining shard counts
// as the most loaded, so a least-loaded rule passes it over for a listed
// shard that is not draining.
func (c *Catalog) choose(ctx context.Context, q shards.Queue) (string, error) {
	loads, err := c.Loads(ctx)
	if err != nil {
		return "", err
	}
	byName := make(map[string]int64, len(loads))
	for _, l := range loads {
		byName[l.Name] = l.Queues
		if l.Draining {
			byName[l.Name] = math.MaxInt64
		}
	}
	shard := shards.Place(q, c.cfg, byName)
	if shard == "" {
		return "", fmt.Errorf("catalog: place %s/%s: no shards configured (%s)", q.Tenant, q.Name, shards.ShardsVar)
	}
	return shard, nil
}

// SetPlacement is a move's activation: the queue goes to shard at epoch
// expect+1 if its epoch is still expect. A later epoch is a
// *StaleEpochError carrying it; a queue with no placement ErrNotPlaced; a
// shard not configured, or not in the catalogue, ErrUnknownShard.
func (c *Catalog) SetPlacement(ctx context.Context, tenant, queue string, expect int64, shard string) (Placement, error) {
	if err := checkQueue(tenant, queue); err != nil {
		return Placement{}, err
	}
	if !slices.Contains(c.cfg.Names(), shard) {
		return Placement{}, fmt.Errorf("catalog: move %s/%s to %q: %w (%s names %s)", tenant, queue, shard,
			ErrUnknownShard, shards.ShardsVar, strings.Join(c.cfg.Names(), ", "))
	}
	p, set, err := placementSet(ctx, c.db, placementSetParams{tenant, queue, expect, shard})
	if err != nil || set {
		return p, wrapSet(tenant, queue, shardError(err, shard))
	}
	cur, found, err := placementGet(ctx, c.db, placementKey{tenant, queue})
	switch {
	case err != nil:
		return Placement{}, wrapSet(tenant, queue, err)
	case !found:
		return Placement{}, wrapSet(tenant, queue, ErrNotPlaced)
	}
	return Placement{}, &StaleEpochError{Tenant: tenant, Queue: queue, Expect: expect, Current: cur.Epoch}
}

// uuidText is a UUID's text form: the tenant ids queen keeps.
var uuidText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// checkQueue refuses, naming it, a queue the catalogue cannot key: an
// empty name or a tenant that is not a UUID.
func checkQueue(tenant, queue string) error {
	switch {
	case queue == "":
		return fmt.Errorf("catalog: queue %q of tenant %s: %w: empty name", queue, tenant, ErrBadQueue)
	case !uuidText.MatchString(tenant):
		return fmt.Errorf("catalog: queue %q: %w: tenant %q is not a UUID", queue, ErrBadQueue, tenant)
	}
	return nil
}

// shardError names the shard when the catalogue refused it by the
// foreign key: a configured shard RegisterShards has not recorded.
func shardError(err error, shard string) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == pgerrcode.ForeignKeyViolation {
		return fmt.Errorf("shard %q is not in the catalogue (RegisterShards records it): %w: %w", shard, ErrUnknownShard, err)
	}
	return err
}

// wrapPlace gives a Place error its context.
func wrapPlace(q shards.Queue, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("catalog: place %s/%s: %w", q.Tenant, q.Name, err)
}

// wrapSet gives a SetPlacement error its context.
func wrapSet(tenant, queue string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("catalog: set placement of %s/%s: %w", tenant, queue, err)
}
