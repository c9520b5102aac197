package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/shards"
)

// stepFunc runs one state's effect on the move (recording in mv what it
// learnt) and answers the state that follows. It must be idempotent: a
// mover that stopped after the effect and before the state write runs it
// again.
type stepFunc func(ctx context.Context, mv *catalog.Move, a, b Shard) (next string, err error)

// steps is each unfinished state's step.
func (m *Mover) steps(state string) stepFunc {
	switch state {
	case StatePlan:
		return m.plan
	case StateCopy:
		return m.copy
	case StateFreeze:
		return m.freeze
	case StateCatchUp:
		return m.catchUp
	case StateActivate:
		return m.activate
	case StateCleanup:
		return m.cleanup
	}
	return nil
}

// crashError is an error Config.AfterEffect returned: the step stops as if
// the mover died there, its state not written and the move not failed.
type crashError struct{ err error }

func (e *crashError) Error() string { return "mover stopped: " + e.err.Error() }
func (e *crashError) Unwrap() error { return e.err }

// forwardError is an error of a step after the catalogue named the
// destination: the move cannot be rolled back, only retried.
type forwardError struct{ err error }

func (e *forwardError) Error() string { return e.err.Error() }
func (e *forwardError) Unwrap() error { return e.err }

// step runs move id's next step and writes its state (compare-and-set on
// the step counter), and answers the move as written. A failing step
// fails the move and rolls it back, unless the mover is stopping (ctx
// ended, or AfterEffect's crash) or the move is past its activation.
func (m *Mover) step(ctx context.Context, id string) (catalog.Move, error) {
	mv, err := m.cfg.Catalog.Move(ctx, id)
	if err != nil || mv.State == StateDone || mv.State == StateFailed {
		return mv, err
	}
	a, b, err := m.shardsOf(mv)
	if err != nil {
		return mv, err
	}
	if mv.Reason != "" {
		return m.rollback(ctx, mv, a, b)
	}
	from := mv.State
	fn := m.steps(from)
	if fn == nil {
		return mv, fmt.Errorf("mover: move %s: unknown state %q", id, from)
	}
	start := m.cfg.Clock.Now()
	next, err := fn(ctx, &mv, a, b)
	if err == nil {
		if herr := m.hook(from); herr != nil {
			err = &crashError{herr}
		}
	}
	if err != nil {
		return m.stepFailed(ctx, mv, from, err)
	}
	mv.State = next
	out, err := m.cfg.Catalog.SetMove(ctx, mv)
	if err != nil {
		return mv, err
	}
	m.cfg.Log.Info("move step", "move", id, "tenant", mv.Tenant, "queue", mv.Queue, "from", from, "to", next,
		"took", m.cfg.Clock.Now().Sub(start))
	return out, nil
}

// stepFailed handles a step's error: returned as it is when the mover is
// stopping or the move only goes forward; otherwise the move is failed,
// its reason written first (a restart finishes the rollback), then
// rolled back.
func (m *Mover) stepFailed(ctx context.Context, mv catalog.Move, from string, err error) (catalog.Move, error) {
	var crash *crashError
	var fwd *forwardError
	if ctx.Err() != nil || errors.As(err, &crash) || errors.As(err, &fwd) {
		return mv, fmt.Errorf("mover: move %s at %s: %w", mv.ID, from, err)
	}
	m.cfg.Log.Warn("move failing", "move", mv.ID, "tenant", mv.Tenant, "queue", mv.Queue, "state", from, "err", err)
	mv.Reason = fmt.Sprintf("%s: %v", from, err)
	written, werr := m.cfg.Catalog.SetMove(ctx, mv)
	if werr != nil {
		return mv, errors.Join(err, werr)
	}
	a, b, _ := m.shardsOf(mv)
	return m.rollback(ctx, written, a, b)
}

// shardsOf is the move's source and destination.
func (m *Mover) shardsOf(mv catalog.Move) (a, b Shard, err error) {
	a, okA := m.cfg.Shards[mv.From]
	b, okB := m.cfg.Shards[mv.To]
	if !okA || !okB {
		return a, b, fmt.Errorf("mover: move %s from %s to %s: %w (not configured here)", mv.ID, mv.From, mv.To, ErrUnknownShard)
	}
	return a, b, nil
}

// placedAt tells whether the catalogue places the move's queue on shard
// at epoch.
func (m *Mover) placedAt(ctx context.Context, mv catalog.Move, shard string, epoch int64) (bool, error) {
	p, err := m.cfg.Catalog.Lookup(ctx, mv.Tenant, mv.Queue)
	if err != nil {
		return false, err
	}
	return p.Shard == shard && p.Epoch == epoch, nil
}

// plan reads the queue on the source (its id, its partitions: what the
// publication filters on) and checks the catalogue still places it there
// and the destination lacks it.
func (m *Mover) plan(ctx context.Context, mv *catalog.Move, a, b Shard) (string, error) {
	if ok, err := m.placedAt(ctx, *mv, mv.From, mv.Epoch-1); err != nil || !ok {
		return "", errors.Join(err, fmt.Errorf("the catalogue no longer places the queue on %s at epoch %d", mv.From, mv.Epoch-1))
	}
	q, found, err := a.Store.MoveQueue(ctx, a.Pool, mv.Tenant, mv.Queue)
	if err != nil || !found {
		return "", errors.Join(err, fmt.Errorf("shard %s does not hold the queue", mv.From))
	}
	there, found, err := b.Store.MoveQueue(ctx, b.Pool, mv.Tenant, mv.Queue)
	if err == nil && found && there.Tombstone() {
		// A move away from b left it; the copy brings the queue row back.
		err = b.Store.DropTombstone(ctx, b.Pool, there.ID)
		found = false
	}
	if err != nil || found {
		return "", errors.Join(err, fmt.Errorf("shard %s holds the queue already", mv.To))
	}
	mv.QueueID, mv.Partitions, mv.CopyStarted = q.ID, q.Partitions, m.now()
	return StateCopy, nil
}

// copy publishes the queue's rows on the source, subscribes the
// destination, and waits until it caught up: the freeze that follows then
// waits only for what was written meanwhile.
func (m *Mover) copy(ctx context.Context, mv *catalog.Move, a, b Shard) (string, error) {
	name := slotName(mv.ID)
	if err := shards.CreatePublication(ctx, a.Pool, name, queueRows(*mv)); err != nil {
		return "", err
	}
	// The slot first, apart: shards that are databases of one cluster
	// hang in a CREATE SUBSCRIPTION that makes its own slot.
	if err := shards.CreateSlot(ctx, a.Pool, name); err != nil {
		return "", err
	}
	if err := shards.SubscribeToSlot(ctx, b.Pool, name, a.ConnInfo, name); err != nil {
		return "", err
	}
	if err := m.waitCaughtUp(ctx, a, b, name); err != nil {
		return "", err
	}
	mv.CopiedAt = m.now()
	return StateFreeze, nil
}

// freeze fences the queue on the source: from its commit every write
// routed there at epoch E fails as moved (store.Freeze, idempotent).
func (m *Mover) freeze(ctx context.Context, mv *catalog.Move, a, _ Shard) (string, error) {
	if _, err := a.Store.Freeze(ctx, a.Pool, mv.Tenant, mv.Queue, mv.Epoch-1); err != nil {
		return "", err
	}
	mv.FrozenAt = m.now()
	return StateCatchUp, nil
}

// catchUp waits until the destination applied everything the source
// committed up to now, the freeze included. A partition created since
// the copy began is not in the publication: the move fails rather than
// lose it.
func (m *Mover) catchUp(ctx context.Context, mv *catalog.Move, a, b Shard) (string, error) {
	q, found, err := a.Store.MoveQueue(ctx, a.Pool, mv.Tenant, mv.Queue)
	if err != nil || !found {
		return "", errors.Join(err, fmt.Errorf("shard %s no longer holds the queue", mv.From))
	}
	if !slices.Equal(q.Partitions, mv.Partitions) {
		return "", fmt.Errorf("the queue has %d partitions, the copy publishes %d: one was created during the copy",
			len(q.Partitions), len(mv.Partitions))
	}
	if canary.On("activate-before-catchup") {
		return StateActivate, nil // the planted bug: what the source committed last may not be applied yet
	}
	if err := m.waitCaughtUp(ctx, a, b, slotName(mv.ID)); err != nil {
		return "", err
	}
	return StateActivate, nil
}

// errSlotTimeout is a wait for the destination that ran out of time.
var errSlotTimeout = errors.New("the destination did not catch up in time")

// waitCaughtUp is shards.WaitCaughtUp bounded by CatchUpTimeout on the
// mover's clock.
func (m *Mover) waitCaughtUp(ctx context.Context, a, b Shard, name string) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := m.cfg.Clock.NewTimer(m.cfg.CatchUpTimeout)
	defer timer.Stop()
	stop := make(chan struct{})
	defer close(stop)
	timedOut := make(chan struct{})
	go func() {
		select {
		case <-timer.C():
			close(timedOut)
			cancel()
		case <-stop:
		}
	}()
	_, err := shards.WaitCaughtUp(wctx, m.cfg.Clock, a.Pool, b.Pool, name, name, m.cfg.Poll)
	select {
	case <-timedOut:
		if ctx.Err() == nil {
			return fmt.Errorf("%w (%s): %w", errSlotTimeout, m.cfg.CatchUpTimeout, err)
		}
	default:
	}
	return err
}

// dropSlot detaches the destination's subscription and drops its slot on
// the source, bounded by CatchUpTimeout.
func (m *Mover) dropSlot(ctx context.Context, a, b Shard, name string) error {
	if err := shards.DetachSubscription(ctx, b.Pool, name); err != nil {
		return err
	}
	return m.dropSourceSlot(ctx, a, name)
}

// dropSourceSlot drops the slot on the source, bounded by CatchUpTimeout.
func (m *Mover) dropSourceSlot(ctx context.Context, a Shard, name string) error {
	dctx, cancel := context.WithTimeout(ctx, m.cfg.CatchUpTimeout)
	defer cancel()
	return shards.DropSlot(dctx, m.cfg.Clock, a.Pool, name)
}

// isMissingSchema tells whether err is a table or schema that does not
// exist: a destination without the store's schema.
func isMissingSchema(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == pgerrcode.UndefinedTable || pg.Code == pgerrcode.InvalidSchemaName)
}
