package spool

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/dbprobe"
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
	Spool  *Spool
	Replay ReplayFunc
	// Ping asks whether the database answers; while the spool is
	// unhealthy a cycle replays nothing until it does. It should back off
	// by itself (dbprobe.Prober does).
	Ping     func(context.Context) error
	Arbiter  *admission.Arbiter
	Every    time.Duration
	MaxBatch int
	MaxBytes int // payload bytes gathered before writing; 0 is DefaultReplayBytes

	last        time.Time
	head        string
	permanent   int
	transient   int
	parkedUntil time.Time

	// Counters for metrics and the simulator's coverage.
	Replayed    atomic.Int64 // files replayed
	Quarantined atomic.Int64
	Cooldowns   atomic.Int64
	ProbeFails  atomic.Int64 // probes that reached a database not answering
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

// permanentError marks a failure that will recur on every retry; rejected
// names the records PostgreSQL refused, when it was their content.
type permanentError struct {
	err      error
	rejected []Rejected
}

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
	limit := FilesPerCycleFailing
	if d.Spool.Healthy() {
		limit = FilesPerCycleHealthy
	} else if d.Ping != nil {
		// Believed down: ask the probe (its own connection, backing off)
		// before sending anything through the pool.
		if err := d.Ping(ctx); err != nil {
			if !errors.Is(err, dbprobe.ErrBackoff) && ctx.Err() == nil {
				d.ProbeFails.Add(1)
				d.failedTransiently(now, err)
			}
			return nil
		}
		if len(files) == 0 {
			d.Spool.SetHealthy(true)
		}
	}
	if len(files) == 0 {
		d.Spool.settle()
		return nil
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
			d.failedTransiently(now, err)
			return nil
		}
		d.permanent++
		d.Spool.o.Log.Warn("spool drain: permanent failure", "file", f, "attempt", d.permanent, "err", err)
		if d.permanent < QuarantineAfter {
			return nil
		}
		d.quarantine(f, err)
		d.head, d.permanent = "", 0
	}
	if len(files) == 0 {
		d.Spool.settle() // every file is gone: so is whatever the count missed
	}
	return nil
}

// failedTransiently counts a failure that may pass (a replay or a probe
// that reached a database not answering); ten in a row park the drain.
func (d *Drainer) failedTransiently(now time.Time, err error) {
	d.transient++
	if d.transient >= CooldownAfter {
		d.transient = 0
		d.parkedUntil = now.Add(Cooldown)
		d.Cooldowns.Add(1)
		d.Spool.o.Log.Warn("spool drain: database still failing; cooling down", "for", Cooldown, "err", err)
	}
}

// quarantine moves a poison file aside so newer files can replay, with a
// reasons file beside it: one JSON line per refused record (or one for the
// whole file when it could not be read). If even the move fails the file is
// deleted: its data is a permanent SQL failure that can never be stored.
func (d *Drainer) quarantine(name string, cause error) {
	n := d.Spool.count(name)
	base := filepath.Base(name)
	dst := filepath.Join(d.Spool.FailedDir(), base)
	if err := d.writeReasons(filepath.Join(d.Spool.FailedDir(), strings.TrimSuffix(base, ".buf")+reasonsSuffix), cause); err != nil {
		d.Spool.o.Log.Error("spool drain: could not write why a file is quarantined", "file", name, "err", err)
	}
	if err := d.Spool.o.FS.Rename(name, dst); err != nil {
		d.Spool.o.Log.Error("spool drain: quarantine failed; deleting the poison file", "file", name, "err", err)
		if err := d.Spool.o.FS.Remove(name); err != nil {
			d.Spool.o.Log.Error("spool drain: could not delete the poison file either", "file", name, "err", err)
			return
		}
		d.Deleted.Add(1)
	} else {
		d.Spool.o.Log.Error("spool drain: quarantined records PostgreSQL refused repeatedly", "file", dst,
			"records", n, "attempts", QuarantineAfter, "err", cause)
	}
	d.Spool.pending.Add(-int64(n))
	d.Quarantined.Add(1)
}

func (d *Drainer) writeReasons(name string, cause error) error {
	var why []Rejected
	var perm *permanentError
	if errors.As(cause, &perm) {
		why = perm.rejected
	}
	if len(why) == 0 {
		why = []Rejected{{Reason: cause.Error()}}
	}
	var buf []byte
	for _, w := range why {
		line, err := json.Marshal(w)
		if err != nil {
			return err
		}
		buf = append(append(buf, line...), '\n')
	}
	return d.Spool.writeFile(name, buf)
}
