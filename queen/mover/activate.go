package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/shards"
)

// activate makes the destination the queue's owner: the subscription is
// detached and its slot dropped (the source is frozen and the
// destination caught up past the freeze, so nothing more comes), the
// destination recounts what replication did not carry and goes from the
// frozen -E to E+1 in one transaction, then the catalogue's
// compare-and-set names it at E+1. Rerun after that set, it only records
// the state.
func (m *Mover) activate(ctx context.Context, mv *catalog.Move, a, b Shard) (string, error) {
	done, err := m.placedAt(ctx, *mv, mv.To, mv.Epoch)
	if err != nil {
		return "", err
	}
	if canary.On("move-step-twice") {
		return m.activateUnguarded(ctx, mv, a, b)
	}
	if !done {
		if err := m.activateOn(ctx, mv, a, b); err != nil {
			return "", err
		}
		if err := m.hook(StateActivate + ".placement"); err != nil {
			return "", &crashError{err}
		}
		if err := m.setPlacement(ctx, *mv); err != nil {
			return "", err
		}
	}
	if mv.ActivatedAt == nil {
		mv.ActivatedAt = m.now()
	}
	if mv.RowsCopied == 0 {
		// A mover that died after the catalogue's set lost the count: an
		// approximate one now (the queue takes writes on the destination).
		n, err := queueRowsCount(ctx, b.Pool, queueRows(*mv))
		if err != nil {
			return "", &forwardError{err}
		}
		mv.RowsCopied = n
	}
	return StateCleanup, nil
}

// activateUnguarded is the planted bug move-step-twice: an activation
// that does not look whether it ran, and sets the catalogue by bumping the
// epoch it reads rather than by comparing the move's. Run once it does
// what activate does; rerun after a mover died past its set, it bumps the
// placement to E+2, past the destination's E+1, and every write routed
// there fails as moved.
func (m *Mover) activateUnguarded(ctx context.Context, mv *catalog.Move, a, b Shard) (string, error) {
	if err := m.activateOn(ctx, mv, a, b); err != nil {
		return "", err
	}
	if err := m.hook(StateActivate + ".placement"); err != nil {
		return "", &crashError{err}
	}
	p, err := m.cfg.Catalog.Lookup(ctx, mv.Tenant, mv.Queue)
	if err == nil {
		_, err = m.cfg.Catalog.SetPlacement(ctx, mv.Tenant, mv.Queue, p.Epoch, mv.To)
	}
	if err != nil {
		return "", err
	}
	mv.ActivatedAt = m.now()
	return StateCleanup, nil
}

// activateOn ends the copy and activates the queue on the destination.
func (m *Mover) activateOn(ctx context.Context, mv *catalog.Move, a, b Shard) error {
	if err := m.dropSlot(ctx, a, b, slotName(mv.ID)); err != nil {
		return err
	}
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("activate on %s: %w", mv.To, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := b.Store.RecountMoved(ctx, tx, mv.QueueID); err != nil {
		return err
	}
	if _, err := b.Store.Activate(ctx, tx, mv.Tenant, mv.Queue, mv.Epoch-1, mv.Epoch); err != nil {
		return err
	}
	n, err := queueRowsCount(ctx, tx, queueRows(*mv))
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("activate on %s: %w", mv.To, err)
	}
	mv.RowsCopied = n
	return nil
}

// setPlacement is the catalogue's compare-and-set E → E+1 on the
// destination, only while this mover's view of the move is current (no
// other mover began to roll it back): catalog.ActivateMove. A set whose
// answer was lost is no error.
func (m *Mover) setPlacement(ctx context.Context, mv catalog.Move) error {
	_, err := m.cfg.Catalog.ActivateMove(ctx, mv)
	return err
}

// cleanup removes the move from the source, after the grace period: the
// publication and the slot (gone with the subscription, unless a crash
// came between), then the queue's rows, in batches, but for its queue
// row: that stays, frozen, a tombstone, so that a broker whose placement
// cache still names the source meets the fence (moved) rather than
// creating the queue there afresh.
func (m *Mover) cleanup(ctx context.Context, mv *catalog.Move, a, _ Shard) (string, error) {
	if mv.ActivatedAt != nil {
		if wait := mv.ActivatedAt.Add(m.cfg.Grace).Sub(m.cfg.Clock.Now()); wait > 0 {
			clock.Sleep(ctx, m.cfg.Clock, wait)
		}
	}
	name := slotName(mv.ID)
	err := shards.DropPublication(ctx, a.Pool, name)
	if err == nil {
		err = m.dropSourceSlot(ctx, a, name)
	}
	if err == nil {
		_, err = deleteQueueRows(ctx, a.Pool, queueRows(*mv), m.cfg.DeleteBatch, true)
	}
	if err != nil {
		return "", &forwardError{err}
	}
	mv.FinishedAt = m.now()
	return StateDone, nil
}

// rollback undoes a failing move (its reason written) and marks it
// failed: the source unfrozen to E first, so it serves the queue again at
// once; the subscription detached and its slot and the publication
// dropped; the destination's copied rows deleted. Each part is
// idempotent; when one fails the move stays as it is, to be rolled back
// again by the next Step, Run or Resume. A move the catalogue already
// places on the destination is not rolled back but resumed forward.
func (m *Mover) rollback(ctx context.Context, mv catalog.Move, a, b Shard) (catalog.Move, error) {
	forward, err := m.placedAt(ctx, mv, mv.To, mv.Epoch)
	if err != nil {
		return mv, fmt.Errorf("mover: roll back move %s: %w", mv.ID, err)
	}
	if forward {
		m.cfg.Log.Warn("move activated, not rolled back", "move", mv.ID, "reason", mv.Reason)
		mv.Reason = ""
		return m.cfg.Catalog.SetMove(ctx, mv)
	}
	if err := m.undo(ctx, mv, a, b); err != nil {
		return mv, fmt.Errorf("mover: roll back move %s (%s): %w", mv.ID, mv.Reason, err)
	}
	mv.State, mv.FinishedAt = StateFailed, m.now()
	out, err := m.cfg.Catalog.SetMove(ctx, mv)
	if err != nil {
		return mv, err
	}
	m.cfg.Log.Warn("move failed", "move", mv.ID, "tenant", mv.Tenant, "queue", mv.Queue, "reason", mv.Reason)
	return out, nil
}

// undo is rollback's effects.
func (m *Mover) undo(ctx context.Context, mv catalog.Move, a, b Shard) error {
	if err := m.hook("rollback"); err != nil {
		return &crashError{err}
	}
	_, found, err := a.Store.MoveQueue(ctx, a.Pool, mv.Tenant, mv.Queue)
	if err != nil {
		return err
	}
	if found {
		if _, err := a.Store.Unfreeze(ctx, a.Pool, mv.Tenant, mv.Queue, mv.Epoch-1); err != nil {
			return err
		}
	}
	name := slotName(mv.ID)
	detachErr := shards.DetachSubscription(ctx, b.Pool, name)
	// The slot goes even when the destination is unreachable: WAL must
	// not pile up on the source for a move that is over.
	if err := m.dropSourceSlot(ctx, a, name); err != nil {
		return errors.Join(detachErr, err)
	}
	if err := shards.DropPublication(ctx, a.Pool, name); err != nil || detachErr != nil {
		return errors.Join(detachErr, err)
	}
	if mv.QueueID == "" {
		return nil
	}
	_, err = deleteQueueRows(ctx, b.Pool, queueRows(mv), m.cfg.DeleteBatch, false)
	if isMissingSchema(err) {
		return nil
	}
	return err
}
