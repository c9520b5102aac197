package spool

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/store"
)

// DefaultReplayBytes bounds the payload bytes a replay holds in memory at
// once (Drainer.MaxBytes): when the batches being gathered reach it they are
// all written, so a file of any size replays in bounded memory.
const DefaultReplayBytes = 8 << 20

// Rejected is one spooled record PostgreSQL refused, with why. Rejected
// records go to failed/ with a line each in <file>.reasons.jsonl.
type Rejected struct {
	Tenant        string `json:"tenant,omitempty"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	SQLState      string `json:"sqlstate,omitempty"`
	Reason        string `json:"reason"`
}

// replayFile replays one file in batches, holding a maint slot, and removes
// it when every record is stored or quarantined. A batch that committed
// before a later one failed replays as duplicates next time: the
// transactionIds are original.
//
// A batch PostgreSQL refuses permanently is split: each of its records is
// written alone, so one client's poison record never takes the others with
// it. The records stored are dropped from the file (it is rewritten to hold
// only the refused ones) and the error is permanent, carrying the refused
// records and their SQLSTATEs for the quarantine.
//
// Damaged records are skipped by the reader (the records after them still
// replay) and their bytes quarantined before the file is removed or
// rewritten. A file that cannot be read is a spool fault, not a permanent
// failure: it stays and is retried.
func (d *Drainer) replayFile(ctx context.Context, name string) error {
	if d.Arbiter != nil {
		release, err := d.Arbiter.Acquire(ctx, admission.Maint)
		if err != nil {
			return err
		}
		defer release()
	}
	r := &replay{d: d, ctx: ctx, name: name, batch: max(d.MaxBatch, 1), maxBytes: d.MaxBytes, byGroup: map[group][]Event{}}
	if r.maxBytes <= 0 {
		r.maxBytes = DefaultReplayBytes
	}
	sc, err := d.Spool.scan(name, r.add)
	if err == nil {
		err = r.flushAll()
	}
	if err != nil {
		var perm *permanentError
		if errors.As(err, &perm) || r.transient {
			return err
		}
		// Neither the database nor a record: the file could not be read.
		return &spoolFault{err: err}
	}
	if sc.torn {
		d.Spool.o.Log.Warn("spool drain: dropped a torn tail (a write that failed, never answered buffered)",
			"file", name, "offset", sc.tornAt)
	}
	return d.finish(name, storedFile{total: sc.events, damaged: sc.damaged, rejected: r.rejected})
}

// storedFile is what is left to do for a file whose records were written:
// total intact ones, of which rejected were refused, and damaged runs.
type storedFile struct {
	total    int
	damaged  []damage
	rejected []rejectedEvent
}

// finish quarantines a replayed file's damaged bytes, then rewrites it to
// its refused records or removes it. When the filesystem refuses, the file
// stays whole, and (unless records were refused, which replay again anyway)
// later cycles retry only this step: nothing is stored twice.
func (d *Drainer) finish(name string, f storedFile) error {
	if len(f.damaged) > 0 {
		dst, err := d.Spool.quarantineDamage(name, f.damaged)
		if err != nil {
			if len(f.rejected) == 0 {
				d.remember(name, func() error { return d.finish(name, f) })
			}
			return &spoolFault{err: fmt.Errorf("spool drain: quarantine the damaged bytes of %s: %w", name, err), stored: true}
		}
		d.Spool.o.Log.Error("spool drain: quarantined damaged records; the records around them are stored",
			"file", name, "to", dst, "runs", len(f.damaged), "first", f.damaged[0].Reason)
		d.Corrupt.Add(int64(len(f.damaged)))
		f.damaged = nil
	}
	if len(f.rejected) > 0 {
		delete(d.unfinished, name)
		return d.keepRejected(name, f.total, f.rejected)
	}
	if err := d.Spool.o.FS.Remove(name); err != nil {
		d.remember(name, func() error { return d.finish(name, f) })
		return &spoolFault{err: fmt.Errorf("spool drain: remove %s (its records are stored): %w", name, err), stored: true}
	}
	delete(d.unfinished, name)
	d.Spool.pending.Add(-int64(f.total))
	d.Replayed.Add(1)
	return nil
}

// keepRejected rewrites a file to hold only its refused records and
// reports them as a permanent failure.
func (d *Drainer) keepRejected(name string, total int, rejected []rejectedEvent) error {
	evs := make([]Event, len(rejected))
	why := make([]Rejected, len(rejected))
	for i, r := range rejected {
		evs[i], why[i] = r.ev, r.why
	}
	if len(rejected) < total {
		if err := d.Spool.rewrite(name, evs); err != nil {
			// The whole file stays; its stored records replay as duplicates.
			d.Spool.o.Log.Warn("spool drain: could not drop the stored records from a file", "file", name, "err", err)
		} else {
			d.Spool.pending.Add(-int64(total - len(rejected)))
			d.Spool.o.Log.Warn("spool drain: stored a file's records except those PostgreSQL refused",
				"file", name, "stored", total-len(rejected), "refused", len(rejected))
		}
	}
	return &permanentError{err: fmt.Errorf("spool drain %s: PostgreSQL refused %d record(s): %s", name, len(why), why[0].Reason),
		rejected: why}
}

type group struct{ tenant, queue, partition string }

type rejectedEvent struct {
	ev  Event
	why Rejected
}

// replay gathers one file's events into per-(tenant, queue, partition)
// batches, in file order, and writes each when it is full, when the bytes
// held reach maxBytes, and at the end.
type replay struct {
	d        *Drainer
	ctx      context.Context
	name     string
	batch    int
	maxBytes int

	order     []group
	byGroup   map[group][]Event
	bytes     int
	rejected  []rejectedEvent
	transient bool // a write failed for a reason that may pass
}

func (r *replay) add(e Event) error {
	tenant := e.TenantOrDefault()
	if canary.On("spool-tenant-dropped") {
		tenant = DefaultTenant
	}
	g := group{tenant, e.Queue, e.Partition}
	if _, ok := r.byGroup[g]; !ok {
		r.order = append(r.order, g)
	}
	r.byGroup[g] = append(r.byGroup[g], e)
	r.bytes += len(e.Payload)
	if len(r.byGroup[g]) >= r.batch {
		if err := r.flush(g); err != nil {
			return err
		}
	}
	if r.bytes >= r.maxBytes {
		return r.flushAll()
	}
	return nil
}

func (r *replay) flushAll() error {
	for _, g := range r.order {
		if err := r.flush(g); err != nil {
			return err
		}
	}
	r.order, r.bytes = r.order[:0], 0
	clear(r.byGroup)
	return nil
}

// flush writes one group's gathered events. A permanent refusal of the
// batch is retried record by record to find the records at fault.
func (r *replay) flush(g group) error {
	evs := r.byGroup[g]
	if len(evs) == 0 {
		return nil
	}
	r.byGroup[g] = evs[:0]
	for _, e := range evs {
		r.bytes -= len(e.Payload)
	}
	err := r.d.Replay(r.ctx, g.tenant, items(evs))
	if err == nil {
		return nil
	}
	if !refused(err) {
		r.transient = true
		return fmt.Errorf("spool drain %s: %w", r.name, err)
	}
	if canary.On("spool-poison-whole-file") {
		return &permanentError{err: fmt.Errorf("spool drain %s: %w", r.name, err)}
	}
	for _, e := range evs {
		err := r.d.Replay(r.ctx, g.tenant, items([]Event{e}))
		switch {
		case err == nil:
		case refused(err):
			r.rejected = append(r.rejected, rejectedEvent{e, rejection(g.tenant, e, err)})
		default:
			r.transient = true
			return fmt.Errorf("spool drain %s: %w", r.name, err)
		}
	}
	return nil
}

// refused reports a failure PostgreSQL will repeat for the same records.
func refused(err error) bool {
	return store.Classify(err) == store.Permanent && !store.Unavailable(err)
}

func items(evs []Event) []store.PushItem {
	out := make([]store.PushItem, len(evs))
	for i, e := range evs {
		out[i] = store.PushItem{Queue: e.Queue, Partition: e.Partition, Payload: e.Body(),
			TransactionID: e.TransactionID, TraceID: e.TraceID, ProducerSub: e.ProducerSub}
	}
	return out
}

func rejection(tenant string, e Event, err error) Rejected {
	why := Rejected{Queue: e.Queue, Partition: e.Partition, TransactionID: e.TransactionID, Reason: err.Error()}
	if tenant != DefaultTenant {
		why.Tenant = tenant
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		why.SQLState, why.Reason = pgErr.Code, pgErr.Message
	}
	return why
}
