// Package pushpath owns a push from validated items to a durable answer, and
// the replay of what it could not commit. A push is either committed to
// PostgreSQL (the push combiner merges concurrent pushes into one
// statement; commit.go names the retry layers around it) and answered "queued" or "duplicate" only after COMMIT, or
// appended to the on-disk spool, sealed when a key is set, and answered
// "buffered"; the spool's drain hands it back to Replay later, under the same
// transactionIds, so it is stored once.
//
// It decides which, in one place: push maintenance and an unhealthy spool
// send pushes straight to disk; a push that failed because the database is
// unavailable is spooled, and only an outage turns the spool unhealthy (lock
// contention, or one broken connection while the database still answers,
// buffers that push alone). A spool fault is never an outage: a push the
// spool's disk refuses while the database answers is committed there.
// Anything else is the caller's error to answer.
// httpapi only parses the request and encodes the Outcome.
package pushpath

import (
	"context"
	"errors"
	"log/slog"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// Options wire a Path.
type Options struct {
	Store *store.Store
	// Retry runs each push statement again when it lost a lock race (the
	// broker's one contention retry over Store; zero: none).
	Retry combine.Retry
	// Writes is the write policy every append runs through (the broker's
	// one queen/writes over Store); nil: one of this path's own, without a
	// key (a row for a queue that encrypts is refused).
	Writes *writes.Policy
	// Names resolves the pushes' partitions, cached (the broker's one
	// queen/names over Store, forgetting Writes' hints); nil: a cache of
	// this path's own.
	Names *names.Names
	// Spool keeps pushes while the database is unavailable; nil: none, and
	// an unavailable database is the caller's error.
	Spool *spool.Spool
	// Diverted reports push maintenance: every push goes to the spool.
	Diverted func() bool
	// Ping asks the drain's own connection whether the database answers.
	Ping    func(context.Context) error
	Cipher  *crypt.Cipher      // seals what goes to disk; nil: none
	Arbiter *admission.Arbiter // meters the database work; nil: none
	IDs     *ids.Source        // mints missing transactionIds
	Log     *slog.Logger
	// PushStatements is how many combined push statements may be in
	// flight at once (QUEEN_PUSH_STATEMENTS); pushes arriving while they
	// run wait and go together in the next one. Zero means 4.
	PushStatements int
	// PushBatchRows caps the rows of one combined push statement
	// (QUEEN_PUSH_BATCH_ROWS). Zero means 1000.
	PushBatchRows int
}

// Path is one broker's push path. It is safe for concurrent use.
type Path struct {
	o      Options
	pushes *combine.Combiner[store.AppendRow, store.AppendOut]
}

// New returns the push path.
func New(o Options) *Path {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Writes == nil {
		o.Writes = writes.New(o.Store, writes.Options{})
	}
	if o.Names == nil {
		o.Names = names.New(o.Store, names.Options{SealHints: o.Writes})
	}
	return &Path{o: o, pushes: newCombiner(o)}
}

// Outcome is what became of a push: Results when it committed, Buffered when
// it went to the spool (SpoolErr set when the spool could not keep it: the
// push is lost and must be answered as failed).
type Outcome struct {
	Results  []store.PushResult
	Buffered []spool.Event
	SpoolErr error
	// DBError: the database failed this push (it was buffered instead).
	DBError bool
}

// ErrCancelled is returned when the caller went away before the push was
// decided; nothing may be answered.
var ErrCancelled = errors.New("pushpath: the caller went away")

// Push commits items for tenant, or buffers them. Items carry no
// transactionId where the client sent none: one is minted first, so a push
// that ends up in the spool replays under the id it may already have
// committed under. The error is the database's, for the caller to answer,
// when it is neither committed nor buffered.
func (p *Path) Push(ctx context.Context, tenant, sub string, items []store.PushItem) (Outcome, error) {
	for i := range items {
		if items[i].TransactionID == "" {
			items[i].TransactionID = p.o.IDs.New()
		}
	}
	if p.o.Spool != nil && (p.diverted() || !p.o.Spool.Healthy()) {
		out := p.buffer(tenant, sub, items)
		if out.SpoolErr == nil || p.diverted() || !p.databaseAnswers(ctx) {
			return out, nil
		}
		// The spool's disk refused and the database answers (the
		// unhealthy mark is older than its recovery): a spool fault is
		// the spool's, so the push goes to PostgreSQL.
		p.o.Log.Warn("push: the spool could not take this push and the database answers; committing it there", "err", out.SpoolErr)
	}
	ctx, release, err := p.admit(ctx)
	if err != nil {
		return Outcome{}, ErrCancelled
	}
	results, err := p.commit(ctx, tenant, items, sub)
	release()
	if err == nil {
		return Outcome{Results: results}, nil
	}
	if p.o.Spool == nil || !store.Unavailable(err) || store.Moved(err) || ctx.Err() != nil {
		// A moved queue is not an outage: the router routes it again.
		return Outcome{}, err
	}
	switch {
	case store.Contention(err):
		// The database is up; this push lost a lock race several times
		// over. Keep it, but do not send every later push to disk.
		p.o.Log.Warn("push: lock contention outlasted the retries; buffering this push only", "err", err)
	case p.databaseAnswers(ctx):
		// Timed out queueing behind a busy partition, or one connection
		// broke: the database itself answers.
		p.o.Log.Warn("push: failed, but the database answers; buffering this push only", "err", err)
	default:
		p.o.Log.Warn("push: database unavailable; buffering to the spool", "err", err)
		p.o.Spool.SetHealthy(false)
	}
	out := p.buffer(tenant, sub, items)
	out.DBError = true
	return out, nil
}

// Replay stores spooled items (the drain's half of the path): the same
// statement as a live push, under the tenant and producer stamped at push
// time, so a record already committed answers duplicate.
func (p *Path) Replay(ctx context.Context, tenant string, items []store.PushItem) error {
	_, err := p.commit(ctx, tenant, items, "")
	return err
}

func (p *Path) diverted() bool { return p.o.Diverted != nil && p.o.Diverted() }

// admit takes a push slot; the context returned carries it, so a push
// waiting on a row locked elsewhere gives it back meanwhile.
func (p *Path) admit(ctx context.Context) (context.Context, func(), error) {
	if p.o.Arbiter == nil {
		return ctx, func() {}, nil
	}
	return p.o.Arbiter.Hold(ctx, admission.Push)
}

// databaseAnswers asks the drain's probe (its own connection) whether the
// database is up, so that one failed push does not send every later push on
// this broker to disk when only that push had a problem.
func (p *Path) databaseAnswers(ctx context.Context) bool {
	return p.o.Ping != nil && p.o.Ping(ctx) == nil
}

// buffer appends the items to the spool. With a key nothing reaches the disk
// in the clear: whether the queue encrypts is the replay's to decide.
func (p *Path) buffer(tenant, sub string, items []store.PushItem) Outcome {
	evs := make([]spool.Event, len(items))
	for i, it := range items {
		part := it.Partition
		if part == "" {
			part = store.DefaultPartition
		}
		evs[i] = spool.Event{Tenant: tenant, Queue: it.Queue, Partition: part, TransactionID: it.TransactionID,
			TraceID: it.TraceID, ProducerSub: sub}
		body := it.Payload
		if p.o.Cipher != nil {
			var err error
			if body, err = p.o.Cipher.SealPayload(body); err != nil {
				p.o.Log.Error("push: sealing a spooled payload failed", "err", err)
				return Outcome{Buffered: evs, SpoolErr: errors.New("could not seal the payload for the spool")}
			}
		}
		evs[i].SetBody(body)
	}
	if err := p.o.Spool.Append(evs); err != nil {
		p.o.Log.Error("push: spool write failed", "err", err)
		return Outcome{Buffered: evs, SpoolErr: err}
	}
	return Outcome{Buffered: evs}
}
