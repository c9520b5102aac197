package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// A cycle in which the spool's own filesystem failed parks the drain
	// for SpoolFaultPause, doubling per such cycle in a row up to
	// SpoolFaultPauseMax.
	SpoolFaultPause    = time.Second
	SpoolFaultPauseMax = time.Minute
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
	// unfinished holds, per file, the spool-side step left once its
	// records were dealt with in the database (quarantine its damaged
	// bytes and remove it, or move it to failed/) when the filesystem
	// refused it: later cycles retry that step alone and never replay
	// the file again.
	unfinished map[string]func() error
	faults     int   // spool faults in this cycle
	lastFault  error // the latest of them
	faultPause time.Duration

	// Counters for metrics and the simulator's coverage.
	Replayed    atomic.Int64 // files replayed
	Quarantined atomic.Int64
	Cooldowns   atomic.Int64
	ProbeFails  atomic.Int64 // probes that reached a database not answering
	// Deleted stays 0: a file whose quarantine move fails is no longer
	// deleted (it stays, and the move is retried). Kept for the
	// simulator's counters.
	Deleted     atomic.Int64
	SpoolFaults atomic.Int64 // spool-side failures (a file not read, renamed, removed or written)
	Corrupt     atomic.Int64 // runs of damaged bytes quarantined to failed/*.corrupt
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

// spoolFault is a failure of the spool's own filesystem (a file that could
// not be read, renamed, removed or written), never the database's: it does
// not make the spool unhealthy, which would send every push to that same
// disk. stored: the file's records were dealt with in the database first,
// which therefore answers.
type spoolFault struct {
	err    error
	stored bool
}

func (f *spoolFault) Error() string { return f.err.Error() }
func (f *spoolFault) Unwrap() error { return f.err }

// RunOnce runs one drain cycle: finalize the active file, finish what the
// filesystem refused in earlier cycles, then replay up to ten files
// oldest-first while the database is healthy, one while it is not. A cycle
// with spool faults parks the drain (SpoolFaultPause, doubling).
func (d *Drainer) RunOnce(ctx context.Context) error {
	now := d.Spool.o.Clock.Now()
	d.last = now
	if d.Spool.Paused() || now.Before(d.parkedUntil) {
		return nil
	}
	defer d.endCycle(now)
	if err := d.Spool.Finalize(); err != nil {
		d.fault("", err) // the file stays .tmp; the next cycle retries
	}
	files, err := d.Spool.Buffers()
	if err != nil {
		d.fault("", err)
		return nil
	}
	todo := d.finishUnfinished(files)
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
		if len(todo) == 0 {
			d.Spool.SetHealthy(true)
		}
	}
	for done := 0; done < limit && len(todo) > 0; done++ {
		f := todo[0]
		todo = todo[1:]
		if f != d.head {
			d.head, d.permanent = f, 0
		}
		if stop, err := d.replayOne(ctx, now, f); stop {
			return err
		}
	}
	if len(todo) == 0 {
		d.Spool.settle() // every file is gone: so is whatever the count missed
	}
	return nil
}

// replayOne replays one file and reacts to how it went; stop ends the
// cycle (with err to return).
func (d *Drainer) replayOne(ctx context.Context, now time.Time, f string) (stop bool, err error) {
	err = d.replayFile(ctx, f)
	if err == nil {
		d.permanent, d.transient = 0, 0
		d.Spool.SetHealthy(true)
		return false, nil
	}
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	var fault *spoolFault
	if errors.As(err, &fault) {
		if fault.stored {
			d.transient = 0
			d.Spool.SetHealthy(true)
		}
		d.fault(f, err)
		return false, nil
	}
	var perm *permanentError
	if !errors.As(err, &perm) {
		d.Spool.SetHealthy(false)
		d.failedTransiently(now, err)
		return true, nil
	}
	d.permanent++
	d.Spool.o.Log.Warn("spool drain: permanent failure", "file", f, "attempt", d.permanent, "err", err)
	if d.permanent < QuarantineAfter {
		return true, nil
	}
	if err := d.quarantine(f, err); err != nil {
		d.fault(f, err)
	}
	d.head, d.permanent = "", 0
	return false, nil
}

// finishUnfinished retries the spool-side steps earlier cycles left (see
// Drainer.unfinished) and returns the files that still need a replay.
func (d *Drainer) finishUnfinished(files []string) []string {
	if len(d.unfinished) == 0 {
		return files
	}
	present := make(map[string]bool, len(files))
	var todo []string
	for _, f := range files {
		present[f] = true
		step, ok := d.unfinished[f]
		if !ok {
			todo = append(todo, f)
			continue
		}
		if err := step(); err != nil {
			d.fault(f, err)
		}
	}
	for f := range d.unfinished {
		if !present[f] { // gone by other hands
			delete(d.unfinished, f)
		}
	}
	return todo
}

func (d *Drainer) remember(name string, step func() error) {
	if d.unfinished == nil {
		d.unfinished = map[string]func() error{}
	}
	d.unfinished[name] = step
}

// fault notes a spool fault in this cycle.
func (d *Drainer) fault(file string, err error) {
	d.faults++
	d.lastFault = err
	d.Spool.o.Log.Warn("spool drain: the spool's filesystem failed (the database is not blamed)", "file", file, "err", err)
}

// endCycle parks the drain after a cycle with spool faults, longer each
// such cycle in a row, so a filesystem that refuses is neither hammered
// nor made to replay anything twice; a clean cycle resets the pause.
func (d *Drainer) endCycle(now time.Time) {
	if d.faults == 0 {
		d.faultPause = 0
		return
	}
	d.SpoolFaults.Add(int64(d.faults))
	d.faultPause = min(max(2*d.faultPause, SpoolFaultPause), SpoolFaultPauseMax)
	if until := now.Add(d.faultPause); until.After(d.parkedUntil) {
		d.parkedUntil = until
	}
	d.Spool.o.Log.Warn("spool drain: backing off after spool faults", "faults", d.faults, "for", d.faultPause, "err", d.lastFault)
	d.faults, d.lastFault = 0, nil
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
// reasons file beside it: one JSON line per refused record. When the
// filesystem refuses (the reasons or the move), the file stays where it is,
// is never deleted, and the step is retried by later cycles.
func (d *Drainer) quarantine(name string, cause error) error {
	n := d.Spool.count(name)
	base := filepath.Base(name)
	dst := filepath.Join(d.Spool.FailedDir(), base)
	if err := d.writeReasons(filepath.Join(d.Spool.FailedDir(), strings.TrimSuffix(base, ".buf")+reasonsSuffix), cause); err != nil {
		d.remember(name, func() error { return d.quarantine(name, cause) })
		return fmt.Errorf("spool drain: write why %s is quarantined: %w", name, err)
	}
	if err := d.Spool.o.FS.Rename(name, dst); err != nil {
		d.remember(name, func() error { return d.quarantine(name, cause) })
		return fmt.Errorf("spool drain: quarantine %s: %w", name, err)
	}
	delete(d.unfinished, name)
	d.Spool.o.Log.Error("spool drain: quarantined records PostgreSQL refused repeatedly", "file", dst,
		"records", n, "attempts", QuarantineAfter, "err", cause)
	d.Spool.pending.Add(-int64(n))
	d.Quarantined.Add(1)
	return nil
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
