package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of the moves' statements, for errors.Is.
var (
	ErrMoveUnfinished = errors.New("the queue has an unfinished move")
	ErrNoMove         = errors.New("no such move")
	ErrStaleMove      = errors.New("the move's step was written by another mover")
)

// Move is one row of queen_catalog.moves: a queue's move from one shard
// to another, as the mover persists it between steps.
type Move struct {
	ID            string
	Tenant, Queue string
	From, To      string
	State, Reason string
	// Epoch is the placement epoch the move activates (the queue's epoch
	// when it was planned, plus one).
	Epoch int64
	// Step counts the move's state writes: each compares it and adds one.
	Step       int64
	QueueID    string   // the queue's id, once the plan step read it
	Partitions []string // the partitions the copy publishes
	RowsCopied int64
	// Timings, nil until the step that sets each ran.
	CopyStarted, CopiedAt, FrozenAt, ActivatedAt, FinishedAt *time.Time
	CreatedAt                                                time.Time
}

// movesAddSQL plans a move at state plan. The unique index
// moves_one_unfinished refuses a second unfinished move of the queue.
const movesAddSQL = `
INSERT INTO queen_catalog.moves (tenant_id, queue, from_shard, to_shard, epoch)
VALUES ($1::uuid, $2, $3, $4, $5)
RETURNING id::text`

// movesAddParams are movesAddSQL's arguments.
type movesAddParams struct {
	Tenant, Queue, From, To string
	Epoch                   int64
}

// movesColumns are a Move's columns, in scanMove's order.
const movesColumns = `id::text, tenant_id::text, queue, from_shard, to_shard, state, reason, epoch, step,
	coalesce(queue_id::text, ''), partitions::text[], rows_copied,
	copy_started, copied_at, frozen_at, activated_at, finished_at, created_at`

// movesGetSQL reads one move.
const movesGetSQL = `SELECT ` + movesColumns + ` FROM queen_catalog.moves WHERE id = $1::uuid`

// movesGetParams are movesGetSQL's arguments.
type movesGetParams struct {
	ID string
}

// movesSetSQL writes a move's state and what its step learnt, only if its
// step counter is still $2 (the compare-and-set of every transition), and
// counts the step.
const movesSetSQL = `
UPDATE queen_catalog.moves SET state = $3, reason = $4, queue_id = nullif($5, '')::uuid, partitions = $6::uuid[],
	rows_copied = $7, copy_started = $8, copied_at = $9, frozen_at = $10, activated_at = $11, finished_at = $12,
	step = step + 1, updated_at = now()
WHERE id = $1::uuid AND step = $2
RETURNING ` + movesColumns

// movesSetParams are movesSetSQL's arguments.
type movesSetParams struct {
	ID                                                       string
	Step                                                     int64
	State, Reason, QueueID                                   string
	Partitions                                               []string
	RowsCopied                                               int64
	CopyStarted, CopiedAt, FrozenAt, ActivatedAt, FinishedAt *time.Time
}

// movesUnfinishedSQL lists the moves not done nor failed, oldest first.
const movesUnfinishedSQL = `
SELECT id::text FROM queen_catalog.moves WHERE state NOT IN ('done', 'failed') ORDER BY created_at, id`

// movesUnfinishedParams are movesUnfinishedSQL's arguments: none.
type movesUnfinishedParams struct{}

// scanMove reads one row of movesColumns.
func scanMove(row pgx.Row) (Move, error) {
	var m Move
	err := row.Scan(&m.ID, &m.Tenant, &m.Queue, &m.From, &m.To, &m.State, &m.Reason, &m.Epoch, &m.Step,
		&m.QueueID, &m.Partitions, &m.RowsCopied, &m.CopyStarted, &m.CopiedAt, &m.FrozenAt, &m.ActivatedAt,
		&m.FinishedAt, &m.CreatedAt)
	return m, err
}

// AddMove plans a move of the queue from one shard to another, to
// activate epoch, and returns its id. A queue with an unfinished move is
// ErrMoveUnfinished; a shard the catalogue does not know ErrUnknownShard.
func (c *Catalog) AddMove(ctx context.Context, tenant, queue, from, to string, epoch int64) (string, error) {
	if err := checkQueue(tenant, queue); err != nil {
		return "", err
	}
	var id string
	err := c.db.QueryRow(ctx, movesAddSQL, argsOf(movesAddParams{tenant, queue, from, to, epoch})...).Scan(&id)
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == pgerrcode.UniqueViolation {
		err = fmt.Errorf("%w: %w", ErrMoveUnfinished, err)
	}
	if err != nil {
		return "", fmt.Errorf("catalog: plan the move of %s/%s from %s to %s: %w", tenant, queue, from, to, shardError(err, to))
	}
	return id, nil
}

// Move reads the move id; a move that does not exist is ErrNoMove.
func (c *Catalog) Move(ctx context.Context, id string) (Move, error) {
	if !uuidText.MatchString(id) {
		return Move{}, fmt.Errorf("catalog: move %q: %w", id, ErrNoMove)
	}
	m, err := scanMove(c.db.QueryRow(ctx, movesGetSQL, argsOf(movesGetParams{id})...))
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNoMove
	}
	if err != nil {
		return Move{}, fmt.Errorf("catalog: move %s: %w", id, err)
	}
	return m, nil
}

// SetMove writes m (its state, reason, what its steps learnt) if the
// move's step counter is still m.Step, and returns the row as written,
// its counter one higher. Another mover's write since is ErrStaleMove.
func (c *Catalog) SetMove(ctx context.Context, m Move) (Move, error) {
	p := movesSetParams{m.ID, m.Step, m.State, m.Reason, m.QueueID, m.Partitions, m.RowsCopied,
		m.CopyStarted, m.CopiedAt, m.FrozenAt, m.ActivatedAt, m.FinishedAt}
	if p.Partitions == nil {
		p.Partitions = []string{}
	}
	out, err := scanMove(c.db.QueryRow(ctx, movesSetSQL, argsOf(p)...))
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w (expected step %d)", ErrStaleMove, m.Step)
	}
	if err != nil {
		return Move{}, fmt.Errorf("catalog: move %s to %s: %w", m.ID, m.State, err)
	}
	return out, nil
}

// UnfinishedMoves are the ids of the moves neither done nor failed,
// oldest first: what a restarted mover resumes.
func (c *Catalog) UnfinishedMoves(ctx context.Context) ([]string, error) {
	rows, err := c.db.Query(ctx, movesUnfinishedSQL, argsOf(movesUnfinishedParams{})...)
	if err != nil {
		return nil, fmt.Errorf("catalog: unfinished moves: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("catalog: unfinished moves: %w", err)
	}
	return ids, nil
}

// movesActivateSQL is the catalogue's half of a move's activation: the
// placement compare-and-set of placementSetSQL, only while the move is
// still at step $6 with no reason. It locks the move row first, so a
// mover that meanwhile began rolling the move back (its reason written,
// its step counted) makes this set nothing, and one that begins after it
// finds the queue placed on the destination and goes forward instead.
const movesActivateSQL = `
WITH mv AS (
	SELECT id FROM queen_catalog.moves WHERE id = $5::uuid AND step = $6 AND reason = '' FOR UPDATE
)
UPDATE queen_catalog.placements SET shard = $4, epoch = epoch + 1, updated_at = now()
WHERE tenant_id = $1::uuid AND queue = $2 AND epoch = $3 AND EXISTS (SELECT 1 FROM mv)
RETURNING shard, epoch`

// movesActivateParams are movesActivateSQL's arguments.
type movesActivateParams struct {
	Tenant, Queue string
	Expect        int64
	Shard, Move   string
	Step          int64
}

// ActivateMove places m's queue on m.To at m.Epoch if it is at m.Epoch-1
// and the move is still at step m.Step, not being rolled back. A queue
// already placed so (a set whose answer was lost) is no error; a move
// another mover wrote since is ErrStaleMove; a placement at another epoch
// a *StaleEpochError.
func (c *Catalog) ActivateMove(ctx context.Context, m Move) (Placement, error) {
	if !slices.Contains(c.cfg.Names(), m.To) {
		return Placement{}, fmt.Errorf("catalog: move %s to %q: %w", m.ID, m.To, ErrUnknownShard)
	}
	var p Placement
	err := c.db.QueryRow(ctx, movesActivateSQL, argsOf(movesActivateParams{m.Tenant, m.Queue, m.Epoch - 1, m.To, m.ID, m.Step})...).
		Scan(&p.Shard, &p.Epoch)
	if !errors.Is(err, pgx.ErrNoRows) {
		return p, wrapSet(m.Tenant, m.Queue, err)
	}
	cur, err := c.Lookup(ctx, m.Tenant, m.Queue)
	switch {
	case err != nil:
		return Placement{}, err
	case cur.Shard == m.To && cur.Epoch == m.Epoch:
		return cur, nil
	case cur.Epoch != m.Epoch-1:
		return Placement{}, &StaleEpochError{Tenant: m.Tenant, Queue: m.Queue, Expect: m.Epoch - 1, Current: cur.Epoch}
	}
	return Placement{}, fmt.Errorf("catalog: activate move %s: %w (expected step %d, no reason)", m.ID, ErrStaleMove, m.Step)
}
