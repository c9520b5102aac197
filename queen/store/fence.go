package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/canary"
)

// movedCode is the SQLSTATE queen.fence_moved raises (migration
// 020_fence_epochs): a statement routed with an epoch met a fenced row at
// another one. Class QF is queen's own; PostgreSQL defines no class Q.
const movedCode = "QF001"

// ErrMoved is what a statement routed with a stale epoch fails with: the
// queue was moved to another shard, or is frozen for a move. errors.Is
// finds it in a *MovedError. Inside the broker it is retriable: the router
// invalidates the queue's placement and routes again (invariant 1).
var ErrMoved = errors.New("queue moved")

// MovedError is ErrMoved for one queue (its id on the shard).
type MovedError struct {
	QueueID string
	Err     error
}

func (e *MovedError) Error() string { return "queue " + e.QueueID + " moved: " + e.Err.Error() }

// Unwrap gives both ErrMoved and the database's error.
func (e *MovedError) Unwrap() []error { return []error{ErrMoved, e.Err} }

// movedOr is err as a *MovedError when it is the fence's SQLSTATE, else err.
func movedOr(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == movedCode {
		return &MovedError{QueueID: pgErr.Detail, Err: err}
	}
	return err
}

// Moved reports whether err is the fence's "moved" (ErrMoved, or the raw
// SQLSTATE of a caller that did not map it).
func Moved(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, ErrMoved) || (errors.As(err, &pgErr) && pgErr.Code == movedCode)
}

// fenceLockSQL is a freeze's (or an activation's) first statement: it
// takes the shard-local queue row FOR UPDATE, which conflicts with every
// lock a creator of the queue's fenced rows takes on it first (FOR SHARE:
// createPartitionsSQL, createConsumersSQL; FOR UPDATE: lockQueueSQL, before
// a subscription's cursor rows). So a creator that holds it is waited for,
// and fenceSQL, the next statement, sees its rows with a snapshot taken
// after it committed; a creator that comes later waits for the freeze to
// commit and reads the rewritten queue row (READ COMMITTED rechecks a
// locked row that was updated), so its rows are born at the new epoch.
const fenceLockSQL = `SELECT 1 FROM queen.queues WHERE tenant_id = $1::uuid AND name = $2 FOR UPDATE`

// fenceSQL sets the epoch of every fenced row of one queue (the shard-local
// queue row, its partition rows, their cursor rows) to $4, in one statement,
// when the queue row is at $3 or at $4 already (a restart: idempotent). It
// updates, not only locks: a writer that waited behind it is rechecked
// against the new row version and fails as moved. Partition rows are locked
// in id order, the order pushes lock them, so a freeze does not deadlock a
// multi-partition push. It answers the queue row's epoch as found (none: no
// such queue).
const fenceSQL = `
WITH q AS (
	SELECT id, epoch FROM queen.queues WHERE tenant_id = $1::uuid AND name = $2 FOR NO KEY UPDATE
),
qu AS (
	UPDATE queen.queues x SET epoch = $4 FROM q WHERE x.id = q.id AND q.epoch IN ($3, $4) AND x.epoch <> $4 RETURNING x.id
),
lp AS (
	SELECT p.id FROM queen.partitions p JOIN q ON p.queue_id = q.id
	WHERE q.epoch IN ($3, $4) ORDER BY p.id FOR NO KEY UPDATE OF p
),
pu AS (
	UPDATE queen.partitions p SET epoch = $4 WHERE p.id IN (SELECT id FROM lp) AND p.epoch <> $4 RETURNING p.id
),
cu AS (
	UPDATE queen.partition_consumers pc SET epoch = $4
	WHERE pc.partition_id IN (SELECT id FROM lp) AND pc.epoch <> $4 RETURNING 1
)
SELECT q.epoch, (SELECT count(*) FROM qu) + (SELECT count(*) FROM pu) + (SELECT count(*) FROM cu) FROM q`

// FenceResult is what a freeze or an activation did: the queue row's epoch
// as found, and how many fenced rows it rewrote (0 on a restart).
type FenceResult struct {
	Found   int64
	Updated int64
}

// Freeze freezes the queue (tenant, name) on this shard at epoch: every
// fenced row goes from epoch to -epoch, in one transaction, so from its
// commit on every statement routed here with epoch fails as moved, those
// that waited behind it included. Run again after it committed, it changes
// nothing (invariant 9). q is the pool, or the mover's transaction (READ
// COMMITTED). A queue at another epoch is an error naming both. The freeze
// is complete: fenceLockSQL says why no fenced row created while it runs
// keeps epoch.
func (s *Store) Freeze(ctx context.Context, q TxStarter, tenant, name string, epoch int64) (FenceResult, error) {
	if epoch <= 0 {
		return FenceResult{}, fmt.Errorf("freeze %s: epoch %d is not positive", name, epoch)
	}
	return fence(ctx, q, "freeze", tenant, name, epoch, -epoch)
}

// Activate makes the queue (tenant, name) writable on this shard at epoch
// to: every fenced row goes from the frozen -from (what the copy brought
// from the source's freeze) to to. Run again, it changes nothing.
func (s *Store) Activate(ctx context.Context, q TxStarter, tenant, name string, from, to int64) (FenceResult, error) {
	if from <= 0 || to <= from {
		return FenceResult{}, fmt.Errorf("activate %s: epochs %d to %d", name, from, to)
	}
	return fence(ctx, q, "activate", tenant, name, -from, to)
}

// TxStarter begins a transaction: the pool, a connection, or a
// transaction (a savepoint in it).
type TxStarter interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// fence runs fenceLockSQL then fenceSQL, in one transaction (a savepoint of
// q's when q is one, which must then be READ COMMITTED: fenceSQL needs a
// snapshot of its own): rows at from (or to already) go to to.
func fence(ctx context.Context, q TxStarter, verb, tenant, name string, from, to int64) (FenceResult, error) {
	var r FenceResult
	sql := fenceSQL
	if verb == "freeze" && canary.On("freeze-only-locks") {
		sql = substitute(sql, freezeOnlyLocks, "freeze-only-locks")
	}
	err := pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fenceLockSQL, tenant, name); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sql, tenant, name, from, to).Scan(&r.Found, &r.Updated)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%s %s: no such queue on this shard", verb, name)
	}
	if err != nil {
		return r, fmt.Errorf("%s %s: %w", verb, name, err)
	}
	if r.Found != from && r.Found != to {
		return r, fmt.Errorf("%s %s: the queue is at epoch %d, not %d", verb, name, r.Found, from)
	}
	return r, nil
}
