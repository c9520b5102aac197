// Package mover moves a queue online from one shard to another, as a state
// machine persisted in the catalogue's moves table, one step at a time, so
// that a mover that stops at any point resumes where it was (invariant 9
// of design-shards.md):
//
//	plan     read the queue on the source, check the destination lacks it
//	copy     publication on the source, subscription on the destination,
//	         wait for the initial copy and the stream to catch up
//	freeze   store.Freeze on the source: writes routed at epoch E fail as moved
//	catch_up wait until the destination applied the freeze's commit
//	activate detach the subscription, drop the slot, recount on the
//	         destination what replication does not carry, store.Activate
//	         -E → E+1 there, then the catalogue's compare-and-set E → E+1
//	cleanup  drop the publication and the slot, delete the source's rows
//	done
//
// An error before the catalogue's compare-and-set fails the move and rolls
// it back (the subscription, slot and publication dropped, the
// destination's copied rows deleted, the source unfrozen to E); after it,
// the move only goes forward. Each state write compares and bumps the
// move's step counter, and each step's effect is idempotent, so a step
// rerun after a crash between its effect and its state write does it once.
package mover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store"
)

// The states of a move, as the catalogue's moves table spells them.
const (
	StatePlan     = "plan"
	StateCopy     = "copy"
	StateFreeze   = "freeze"
	StateCatchUp  = "catch_up"
	StateActivate = "activate"
	StateCleanup  = "cleanup"
	StateDone     = "done"
	StateFailed   = "failed"
)

// Errors of Plan and of the other calls, typed for an HTTP layer:
// ErrUnknownQueue and ErrNoMove are a 404, ErrBadQueue, ErrUnknownShard
// and ErrSameShard a 400, ErrMoveUnfinished and ErrBusy a 409.
var (
	ErrUnknownQueue   = errors.New("unknown queue")
	ErrBadQueue       = catalog.ErrBadQueue
	ErrUnknownShard   = errors.New("unknown shard")
	ErrSameShard      = errors.New("the queue is on that shard already")
	ErrMoveUnfinished = catalog.ErrMoveUnfinished
	ErrNoMove         = catalog.ErrNoMove
	ErrBusy           = errors.New("another mover is running")
	ErrFailed         = errors.New("move failed")
)

// Shard is one shard as the mover reaches it.
type Shard struct {
	Pool  *pgxpool.Pool
	Store *store.Store
	// ConnInfo is the shard's connection string as the other shards'
	// servers reach it: a destination's subscription connects with it.
	ConnInfo string
}

// Config is a mover's: the catalogue, the shards by name, its log and
// clock, and its bounds.
type Config struct {
	Catalog     *catalog.Catalog
	CatalogPool *pgxpool.Pool // the catalogue's pool: the mover's lock is a session's
	Shards      map[string]Shard
	Log         *slog.Logger
	Clock       clock.Clock
	// CatchUpTimeout bounds each wait for the destination (the copy's and
	// the one after the freeze): a move whose slot does not catch up is
	// failed and its slot dropped, lest WAL pile up on the source.
	// Default 5 minutes.
	CatchUpTimeout time.Duration
	// Poll is how often a wait rereads the slot's position. Default 100ms.
	Poll time.Duration
	// Grace is how long after the activation the source's rows stay (a
	// late reader's); Default 0.
	Grace time.Duration
	// DeleteBatch is how many rows one delete of the cleanup takes.
	// Default 1000.
	DeleteBatch int
	// AfterEffect is a fault-injection seam, nil in production: it is
	// called after each step's effect and before its state write (point
	// is the state), and at the points inside a step ("activate.placement":
	// the destination activated, the catalogue not yet set; "rollback":
	// before a rollback's effects). An error it returns stops the step
	// there, as a mover that died: the move is neither failed nor rolled
	// back, and a new mover's Step, Run or Resume reruns the step. The
	// simulator kills its mover so (sim.MoveSpec.CrashPct).
	AfterEffect func(point string) error
}

// Mover runs moves.
type Mover struct {
	cfg Config
}

// New returns a mover over cfg, with its defaults filled in.
func New(cfg Config) *Mover {
	if cfg.CatchUpTimeout <= 0 {
		cfg.CatchUpTimeout = 5 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.DeleteBatch <= 0 {
		cfg.DeleteBatch = 1000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Mover{cfg: cfg}
}

// Plan records a move of the queue (tenant, queue) from the shard it is
// placed on to shard to, and returns its id. Nothing runs yet: Run or
// Step does.
func (m *Mover) Plan(ctx context.Context, tenant, queue, to string) (string, error) {
	if _, ok := m.cfg.Shards[to]; !ok {
		return "", fmt.Errorf("mover: move %s/%s to %q: %w", tenant, queue, to, ErrUnknownShard)
	}
	p, err := m.cfg.Catalog.Lookup(ctx, tenant, queue)
	switch {
	case errors.Is(err, catalog.ErrNotPlaced):
		return "", fmt.Errorf("mover: move %s/%s: %w: %w", tenant, queue, ErrUnknownQueue, err)
	case err != nil:
		return "", err
	case p.Shard == to:
		return "", fmt.Errorf("mover: move %s/%s to %s: %w", tenant, queue, to, ErrSameShard)
	}
	if _, ok := m.cfg.Shards[p.Shard]; !ok {
		return "", fmt.Errorf("mover: move %s/%s from %q: %w", tenant, queue, p.Shard, ErrUnknownShard)
	}
	id, err := m.cfg.Catalog.AddMove(ctx, tenant, queue, p.Shard, to, p.Epoch+1)
	if err != nil {
		return "", err
	}
	m.cfg.Log.Info("move planned", "move", id, "tenant", tenant, "queue", queue, "from", p.Shard, "to", to, "epoch", p.Epoch+1)
	return id, nil
}

// Status is what Get tells of a move.
type Status struct {
	ID, Tenant, Queue, From, To, State, Reason string
	Epoch                                      int64
	// CopyDuration is from the copy's start to the destination caught up
	// before the freeze; FreezePause from the freeze's commit to the
	// catalogue naming the destination (the time writes fail as moved).
	CopyDuration, FreezePause time.Duration
	RowsCopied                int64
}

// Get reads the move id; one that does not exist is ErrNoMove.
func (m *Mover) Get(ctx context.Context, id string) (Status, error) {
	mv, err := m.cfg.Catalog.Move(ctx, id)
	if err != nil {
		return Status{}, err
	}
	s := Status{ID: mv.ID, Tenant: mv.Tenant, Queue: mv.Queue, From: mv.From, To: mv.To, State: mv.State,
		Reason: mv.Reason, Epoch: mv.Epoch, RowsCopied: mv.RowsCopied}
	if mv.CopyStarted != nil && mv.CopiedAt != nil {
		s.CopyDuration = mv.CopiedAt.Sub(*mv.CopyStarted)
	}
	if end := firstSet(mv.ActivatedAt, mv.FinishedAt); mv.FrozenAt != nil && end != nil {
		s.FreezePause = end.Sub(*mv.FrozenAt)
	}
	return s, nil
}

// firstSet is the first of ts that is not nil.
func firstSet(ts ...*time.Time) *time.Time {
	for _, t := range ts {
		if t != nil {
			return t
		}
	}
	return nil
}

// Step runs the next step of move id and writes its state; a move done or
// failed is left as it is. It holds the mover's lock while it runs
// (ErrBusy when another mover has it).
func (m *Mover) Step(ctx context.Context, id string) error {
	return m.locked(ctx, func() error {
		_, err := m.step(ctx, id)
		return err
	})
}

// Run runs move id's steps until it is done (nil) or failed (an error
// that is ErrFailed, with the reason), or a step stops on an error it
// leaves for a later Run or Resume.
func (m *Mover) Run(ctx context.Context, id string) error {
	return m.locked(ctx, func() error { return m.run(ctx, id) })
}

// Resume runs every unfinished move, oldest first: what a mover does when
// it starts, to finish the moves a stopped one left.
func (m *Mover) Resume(ctx context.Context) error {
	return m.locked(ctx, func() error {
		ids, err := m.cfg.Catalog.UnfinishedMoves(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for _, id := range ids {
			if err := m.run(ctx, id); err != nil && !errors.Is(err, ErrFailed) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// run steps move id until it is finished.
func (m *Mover) run(ctx context.Context, id string) error {
	for {
		mv, err := m.step(ctx, id)
		switch {
		case err != nil:
			return err
		case mv.State == StateDone:
			return nil
		case mv.State == StateFailed:
			return fmt.Errorf("mover: move %s of %s/%s: %w: %s", id, mv.Tenant, mv.Queue, ErrFailed, mv.Reason)
		}
	}
}

// locked runs fn holding the mover's session lock on the catalogue.
func (m *Mover) locked(ctx context.Context, fn func() error) error {
	conn, err := m.cfg.CatalogPool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("mover: lock: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, lockSQL, argsOf(lockParams{moverLock})...).Scan(&got); err != nil {
		return fmt.Errorf("mover: lock: %w", err)
	}
	if !got {
		return ErrBusy
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), unlockSQL, argsOf(lockParams{moverLock})...); err != nil {
			// The session ends with the connection: it takes the lock along.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return fn()
}

// hook calls Config.AfterEffect at point.
func (m *Mover) hook(point string) error {
	if m.cfg.AfterEffect == nil {
		return nil
	}
	return m.cfg.AfterEffect(point)
}

// slotName names a move's publication, subscription and slot: the move's
// own, so a restarted step finds what it created.
func slotName(id string) string { return "queen_move_" + strings.ReplaceAll(id, "-", "") }

// queueRows identifies the move's queue's rows, for the row filters.
func queueRows(mv catalog.Move) shards.QueueRows {
	return shards.QueueRows{QueueID: mv.QueueID, Tenant: mv.Tenant, Name: mv.Queue, Partitions: mv.Partitions}
}

// now is the mover's clock's time, for the timings.
func (m *Mover) now() *time.Time {
	t := m.cfg.Clock.Now()
	return &t
}
