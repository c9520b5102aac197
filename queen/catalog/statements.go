package catalog

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/sqlargs"
)

// DB is what the catalogue's statements run on: its pool, one connection
// or a transaction.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// statement is one named statement: its text and its params struct, the
// argument list (fields in order, the first $1).
type statement struct {
	text   string
	params any
}

// statements is every catalogue statement by name, for the test that
// holds each params struct to its text's placeholders. Each statement
// does one thing and decides nothing: choosing a shard, checking input
// and telling a stale epoch from a missing placement are Catalog's.
var statements = map[string]statement{
	"shards.register":  {shardsRegisterSQL, shardsRegisterParams{}},
	"shards.load":      {shardsLoadSQL, shardsLoadParams{}},
	"placement.get":    {placementGetSQL, placementKey{}},
	"placement.add":    {placementAddSQL, placementAddParams{}},
	"placement.set":    {placementSetSQL, placementSetParams{}},
	"placement.list":   {placementListSQL, placementListParams{}},
	"moves.add":        {movesAddSQL, movesAddParams{}},
	"moves.get":        {movesGetSQL, movesGetParams{}},
	"moves.set":        {movesSetSQL, movesSetParams{}},
	"moves.unfinished": {movesUnfinishedSQL, movesUnfinishedParams{}},
	"moves.activate":   {movesActivateSQL, movesActivateParams{}},
}

// argsOf is a params struct as its statement's arguments (sqlargs.Of).
var argsOf = sqlargs.Of

// shardsRegisterSQL adds the shards not yet known. It never removes one:
// a shard left out of one broker's QUEEN_SHARDS by mistake must not lose
// its placements.
const shardsRegisterSQL = `
INSERT INTO queen_catalog.shards (name)
SELECT unnest($1::text[])
ON CONFLICT (name) DO NOTHING`

// shardsRegisterParams are shardsRegisterSQL's arguments.
type shardsRegisterParams struct {
	Names []string
}

// shardsRegister runs shardsRegisterSQL.
func shardsRegister(ctx context.Context, db DB, p shardsRegisterParams) error {
	_, err := db.Exec(ctx, shardsRegisterSQL, argsOf(p)...)
	return err
}

// shardsLoadSQL counts the queues placed on each known shard, with its
// draining flag: what the least-loaded rule compares.
const shardsLoadSQL = `
SELECT s.name, s.draining, count(p.shard)
FROM queen_catalog.shards s LEFT JOIN queen_catalog.placements p ON p.shard = s.name
GROUP BY s.name, s.draining`

// shardsLoadParams are shardsLoadSQL's arguments: none.
type shardsLoadParams struct{}

// ShardLoad is one shard's row of shardsLoadSQL.
type ShardLoad struct {
	Name     string
	Draining bool
	Queues   int64
}

// shardsLoad runs shardsLoadSQL.
func shardsLoad(ctx context.Context, db DB, p shardsLoadParams) ([]ShardLoad, error) {
	rows, err := db.Query(ctx, shardsLoadSQL, argsOf(p)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ShardLoad, error) {
		var l ShardLoad
		err := r.Scan(&l.Name, &l.Draining, &l.Queues)
		return l, err
	})
}

// placementGetSQL reads a queue's placement.
const placementGetSQL = `
SELECT shard, epoch FROM queen_catalog.placements WHERE tenant_id = $1::uuid AND queue = $2`

// placementKey names one queue: placementGetSQL's arguments.
type placementKey struct {
	Tenant, Queue string
}

// placementGet runs placementGetSQL; found is false when the queue has no
// placement.
func placementGet(ctx context.Context, db DB, p placementKey) (pl Placement, found bool, err error) {
	err = db.QueryRow(ctx, placementGetSQL, argsOf(p)...).Scan(&pl.Shard, &pl.Epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Placement{}, false, nil
	}
	return pl, err == nil, err
}

// placementListSQL pages through one tenant's placements by queue name,
// after $2, at most $3.
const placementListSQL = `
SELECT queue, shard, epoch, updated_at FROM queen_catalog.placements
WHERE tenant_id = $1::uuid AND queue > $2 ORDER BY queue LIMIT $3`

// placementListParams are placementListSQL's arguments.
type placementListParams struct {
	Tenant, After string
	Limit         int
}

// QueuePlacement is one row of placementListSQL: a queue and where it is.
type QueuePlacement struct {
	Queue string
	Placement
	UpdatedAt time.Time
}

// placementList runs placementListSQL.
func placementList(ctx context.Context, db DB, p placementListParams) ([]QueuePlacement, error) {
	rows, err := db.Query(ctx, placementListSQL, argsOf(p)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueuePlacement, error) {
		var q QueuePlacement
		err := r.Scan(&q.Queue, &q.Shard, &q.Epoch, &q.UpdatedAt)
		return q, err
	})
}

// placementAddSQL places a queue at epoch 1 unless it has a placement.
// Against a concurrent insert of the same queue it waits for that
// transaction and then does nothing: the one that committed first wins,
// and this statement returns no row.
const placementAddSQL = `
INSERT INTO queen_catalog.placements (tenant_id, queue, shard, epoch)
VALUES ($1::uuid, $2, $3, 1)
ON CONFLICT (tenant_id, queue) DO NOTHING
RETURNING shard, epoch`

// placementAddParams are placementAddSQL's arguments.
type placementAddParams struct {
	Tenant, Queue, Shard string
}

// placementAdd runs placementAddSQL; added is false when the queue had a
// placement already (read it with placementGet, in a later statement whose
// snapshot sees it).
func placementAdd(ctx context.Context, db DB, p placementAddParams) (pl Placement, added bool, err error) {
	err = db.QueryRow(ctx, placementAddSQL, argsOf(p)...).Scan(&pl.Shard, &pl.Epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Placement{}, false, nil
	}
	return pl, err == nil, err
}

// placementSetSQL is the compare-and-set of a move's activation: the queue
// goes to shard $4 at the next epoch only if its epoch is still $3. The
// row lock orders concurrent sets; the loser re-reads the row, finds the
// epoch moved on and updates nothing.
const placementSetSQL = `
UPDATE queen_catalog.placements SET shard = $4, epoch = epoch + 1, updated_at = now()
WHERE tenant_id = $1::uuid AND queue = $2 AND epoch = $3
RETURNING shard, epoch`

// placementSetParams are placementSetSQL's arguments.
type placementSetParams struct {
	Tenant, Queue string
	Expect        int64
	Shard         string
}

// placementSet runs placementSetSQL; set is false when no row had the
// expected epoch (or the queue no placement).
func placementSet(ctx context.Context, db DB, p placementSetParams) (pl Placement, set bool, err error) {
	err = db.QueryRow(ctx, placementSetSQL, argsOf(p)...).Scan(&pl.Shard, &pl.Epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Placement{}, false, nil
	}
	return pl, err == nil, err
}
