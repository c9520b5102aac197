package spool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/store"
)

// Drain limits, from Queen's HA design.
const (
	FilesPerCycleHealthy = 10
	FilesPerCycleFailing = 1
	QuarantineAfter      = 5  // consecutive permanent failures of one head file
	CooldownAfter        = 10 // consecutive transient failures
	Cooldown             = 5 * time.Second
)

// ReplayFunc writes one batch of events (one tenant, queue and partition)
// to the database under their original transactionIds.
type ReplayFunc func(ctx context.Context, tenant string, items []store.PushItem) error

// Drainer replays finalized spool files. It is a background service:
// RunOnce is one cycle, NextDue the cadence (FILE_BUFFER_FLUSH_MS, or the
// end of a cooldown).
type Drainer struct {
	Spool    *Spool
	Replay   ReplayFunc
	Ping     func(context.Context) error
	Arbiter  *admission.Arbiter
	Every    time.Duration
	MaxBatch int

	last        time.Time
	head        string
	permanent   int
	transient   int
	parkedUntil time.Time

	// Counters for metrics and the simulator's coverage.
	Replayed    atomic.Int64 // files replayed
	Quarantined atomic.Int64
	Cooldowns   atomic.Int64
	Deleted     atomic.Int64 // quarantine moves that failed, so the file was deleted
}

// Name implements background.Service.
func (d *Drainer) Name() string { return "spool-drain" }

// NextDue implements background.Service.
func (d *Drainer) NextDue(now time.Time) time.Time {
	next := d.last.Add(d.Every)
	if d.last.IsZero() {
		next = now
	}
	if d.parkedUntil.After(next) {
		return d.parkedUntil
	}
	return next
}

// permanentError marks a failure that will recur on every retry.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// RunOnce runs one drain cycle: finalize the active file, then replay up to
// ten files oldest-first while the database is healthy, one while it is not.
func (d *Drainer) RunOnce(ctx context.Context) error {
	now := d.Spool.o.Clock.Now()
	d.last = now
	if d.Spool.Paused() || now.Before(d.parkedUntil) {
		return nil
	}
	if err := d.Spool.Finalize(); err != nil {
		return err
	}
	files, err := d.Spool.Buffers()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		if !d.Spool.Healthy() && d.Ping != nil && d.Ping(ctx) == nil {
			d.Spool.SetHealthy(true)
		}
		return nil
	}
	limit := FilesPerCycleFailing
	if d.Spool.Healthy() {
		limit = FilesPerCycleHealthy
	}
	for done := 0; done < limit && len(files) > 0; done++ {
		f := files[0]
		files = files[1:]
		if f != d.head {
			d.head, d.permanent = f, 0
		}
		err := d.replayFile(ctx, f)
		if err == nil {
			d.permanent, d.transient = 0, 0
			d.Spool.SetHealthy(true)
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var perm *permanentError
		if !errors.As(err, &perm) {
			d.Spool.SetHealthy(false)
			d.transient++
			if d.transient >= CooldownAfter {
				d.transient = 0
				d.parkedUntil = now.Add(Cooldown)
				d.Cooldowns.Add(1)
				d.Spool.o.Log.Warn("spool drain: database still failing; cooling down", "for", Cooldown, "err", err)
			}
			return nil
		}
		d.permanent++
		d.Spool.o.Log.Warn("spool drain: permanent failure", "file", f, "attempt", d.permanent, "err", err)
		if d.permanent < QuarantineAfter {
			return nil
		}
		d.quarantine(f)
		d.head, d.permanent = "", 0
	}
	return nil
}

// replayFile replays one file in batches, holding a maint slot, and removes
// it when every batch committed. A batch that committed before a later one
// failed replays as duplicates next time: the transactionIds are original.
func (d *Drainer) replayFile(ctx context.Context, name string) error {
	if d.Arbiter != nil {
		release, err := d.Arbiter.Acquire(ctx, admission.Maint)
		if err != nil {
			return err
		}
		defer release()
	}
	evs, torn, err := d.Spool.read(name)
	if err != nil {
		return &permanentError{err}
	}
	if torn {
		d.Spool.o.Log.Warn("spool drain: ignored a torn tail", "file", name)
	}
	type group struct{ tenant, queue, partition string }
	var order []group
	byGroup := map[group][]store.PushItem{}
	for _, e := range evs {
		tenant := e.TenantOrDefault()
		if canary.On("spool-tenant-dropped") {
			tenant = DefaultTenant
		}
		g := group{tenant, e.Queue, e.Partition}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], store.PushItem{Queue: e.Queue, Partition: e.Partition,
			Payload: e.Payload, TransactionID: e.TransactionID, TraceID: e.TraceID})
	}
	batch := max(d.MaxBatch, 1)
	for _, g := range order {
		items := byGroup[g]
		for i := 0; i < len(items); i += batch {
			if err := d.Replay(ctx, g.tenant, items[i:min(i+batch, len(items))]); err != nil {
				if store.Classify(err) == store.Permanent && !store.Unavailable(err) {
					return &permanentError{fmt.Errorf("spool drain %s: %w", name, err)}
				}
				return fmt.Errorf("spool drain %s: %w", name, err)
			}
		}
	}
	if err := d.Spool.o.FS.Remove(name); err != nil {
		// It stays and replays again next cycle, as duplicates.
		return fmt.Errorf("spool drain remove %s: %w", name, err)
	}
	d.Spool.pending.Add(-int64(len(evs)))
	d.Replayed.Add(1)
	return nil
}

// quarantine moves a poison file aside so newer files can replay. If even
// the move fails the file is deleted: its data is a permanent SQL failure
// that can never be stored.
func (d *Drainer) quarantine(name string) {
	evs, _, _ := d.Spool.read(name)
	dst := filepath.Join(d.Spool.FailedDir(), filepath.Base(name))
	if err := d.Spool.o.FS.Rename(name, dst); err != nil {
		d.Spool.o.Log.Error("spool drain: quarantine failed; deleting the poison file", "file", name, "err", err)
		if err := d.Spool.o.FS.Remove(name); err != nil {
			d.Spool.o.Log.Error("spool drain: could not delete the poison file either", "file", name, "err", err)
			return
		}
		d.Deleted.Add(1)
	} else {
		d.Spool.o.Log.Error("spool drain: quarantined a file after repeated permanent failures", "file", dst, "attempts", QuarantineAfter)
	}
	d.Spool.pending.Add(-int64(len(evs)))
	d.Quarantined.Add(1)
}
