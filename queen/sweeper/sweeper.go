// Package sweeper fires due timers and prunes expired KV rows.
//
// It runs on every broker and elects nothing: brokers share the due rows
// through FOR UPDATE SKIP LOCKED, and each claim is a lease
// (QUEEN_SWEEPER_LEASE_MS). A timer fires in one transaction that deletes
// its row and pushes its message under the timer's fixed transactionId, so
// it is delivered once. A broker that stops or dies holding claims leaves
// them to expire: those timers fire from another broker at most one lease
// later, and never twice, since the dead broker's fire never committed.
//
// Between cycles it sleeps until the next timer is due, clamped to
// [QUEEN_SWEEPER_MIN_SLEEP_MS, QUEEN_SWEEPER_MAX_SLEEP_MS], and, after five
// cycles with nothing to do, doubles the sleep up to
// QUEEN_SWEEPER_IDLE_MAX_SLEEP_MS. A schedule committed here that makes the
// next due time earlier wakes it at once (in process only: no mesh frame),
// so a timer scheduled on one broker and fired by another waits at most
// that broker's sleep.
package sweeper

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// Sweeper is one broker's sweeper: a background.Service that can be woken.
type Sweeper struct {
	Store *store.Store
	// Names resolves the fired timers' partitions, cached (the broker's
	// one queen/names over Store).
	Names *names.Names
	// Writes appends the fired timers' rows (the broker's one write policy,
	// queen/writes); required.
	Writes  *writes.Policy
	Arbiter *admission.Arbiter // its database work takes Maint slots; nil: none
	Clock   clock.Clock
	IDs     *ids.Source // claim tokens
	Log     *slog.Logger
	// Cipher is the store's payload cipher (QUEEN_ENCRYPTION_KEY; nil:
	// none). A fire stores a timer's payload as it was stored at
	// schedule; only the timer-seals-twice canary seals with it.
	Cipher *crypt.Cipher

	Lease        time.Duration // QUEEN_SWEEPER_LEASE_MS
	MinSleep     time.Duration // QUEEN_SWEEPER_MIN_SLEEP_MS
	MaxSleep     time.Duration // QUEEN_SWEEPER_MAX_SLEEP_MS
	IdleMaxSleep time.Duration // QUEEN_SWEEPER_IDLE_MAX_SLEEP_MS
	ClaimBatch   int           // timers claimed per cycle
	PruneBatch   int           // expired KV rows deleted per cycle
	// MaxAttempts (QUEEN_SWEEPER_MAX_ATTEMPTS) bounds the permanent fire
	// failures of one timer; then it is failed, listed with its error.
	MaxAttempts int
	// RetryBase is the backoff after a timer's first permanent failure;
	// it doubles per attempt, up to Lease.
	RetryBase time.Duration

	// Fired is told of the messages a cycle pushed, per tenant and queue,
	// so parked pops wake (here and on peers).
	Fired func(tenant, queue string, partitionIDs []string)
	// Observe, when set, is told of every claim this sweeper took and how
	// it ended ("claim", "fired", "failed"), under the claim's token: the
	// simulator records them to check that no claim is taken while
	// another is live.
	Observe func(kind, token string, t store.ClaimedTimer)

	mu    sync.Mutex
	next  time.Time
	sleep time.Duration // the last idle sleep
	idle  int
	wake  chan struct{}

	Stats Stats
}

// Stats are the sweeper's counters since start.
type Stats struct {
	Cycles, Claimed, Fired, Duplicates, Pruned, Failures atomic.Int64
	// FireFailures counts timers whose own fire failed permanently
	// (isolated from their batch); TimersFailed those that used up
	// MaxAttempts.
	FireFailures, TimersFailed atomic.Int64
	// Lateness of fired timers: fire time minus deliverAt, milliseconds.
	Lateness Histogram
}

// Name implements background.Service.
func (s *Sweeper) Name() string { return "sweeper" }

// NextDue implements background.Service.
func (s *Sweeper) NextDue(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next.IsZero() {
		return now
	}
	return s.next
}

// Woken implements background.Wakeable: a send makes the shell re-read
// NextDue at once.
func (s *Sweeper) Woken() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	return s.wake
}

// Hint says a timer committed here is due in d: the sweeper moves its next
// cycle earlier if it was to sleep past it.
func (s *Sweeper) Hint(d time.Duration) {
	at := s.Clock.Now().Add(max(d, 0))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.next.IsZero() && !at.Before(s.next) {
		return
	}
	s.next, s.idle = at, 0
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// RunOnce claims and fires what is due, prunes expired KV rows and decides
// when to run next.
func (s *Sweeper) RunOnce(ctx context.Context) error {
	s.Stats.Cycles.Add(1)
	if s.Arbiter != nil {
		release, err := s.Arbiter.Acquire(ctx, admission.Maint)
		if err != nil {
			s.schedule(s.MaxSleep)
			return err
		}
		defer release()
	}
	claimed, fired, err := s.fire(ctx)
	if err != nil {
		s.Stats.Failures.Add(1)
		s.schedule(s.MaxSleep)
		return err
	}
	pruned, err := s.Store.PruneKV(ctx, s.PruneBatch)
	if err != nil {
		s.Stats.Failures.Add(1)
		s.schedule(s.MaxSleep)
		return err
	}
	s.Stats.Pruned.Add(pruned)
	switch {
	case claimed == s.ClaimBatch || pruned == int64(s.PruneBatch):
		s.schedule(0) // more is due now
	default:
		s.scheduleNext(ctx, claimed+fired > 0 || pruned > 0)
	}
	return nil
}

// fire claims due timers and fires them.
func (s *Sweeper) fire(ctx context.Context) (claimed, fired int, err error) {
	token := s.IDs.New()
	c, err := s.Store.ClaimTimers(ctx, token, s.Lease, s.ClaimBatch)
	if err != nil || len(c) == 0 {
		return 0, 0, err
	}
	s.Stats.Claimed.Add(int64(len(c)))
	s.observe("claim", token, c)
	s.observe("firing", token, nil)
	f, err := s.FireTimers(ctx, token, c)
	if err != nil && poisonous(err) && !canary.On("timer-batch-poisoned") {
		if len(c) > 1 {
			f, err = s.fireEach(ctx, token, c)
		} else {
			err = s.failed(ctx, token, c[0], err)
		}
	}
	s.fired(token, f)
	if err != nil {
		// The claims left stand until their lease ends; another cycle
		// (here or on another broker) fires them then.
		s.Log.Warn("sweeper: firing claimed timers failed; they fire again after the lease",
			"timers", len(c)-len(f), "lease", s.Lease, "err", err)
		return len(c), len(f), err
	}
	return len(c), len(f), nil
}

// fired accounts for the timers a cycle fired (all of them, or those fired
// before an outage stopped it): stats, observers and wakes.
func (s *Sweeper) fired(token string, f []FiredTimer) {
	now := s.Clock.Now()
	parts := map[[2]string]map[string]bool{}
	for _, t := range f {
		s.observe("fired", token, []store.ClaimedTimer{t.ClaimedTimer})
		if t.Duplicate {
			s.Stats.Duplicates.Add(1)
			continue
		}
		s.Stats.Fired.Add(1)
		s.Stats.Lateness.Observe(float64(now.Sub(t.DeliverAt).Milliseconds()))
		k := [2]string{t.Tenant, t.Queue}
		if parts[k] == nil {
			parts[k] = map[string]bool{}
		}
		parts[k][t.PartitionID] = true
	}
	if s.Fired != nil {
		for k, ps := range parts {
			ids := make([]string, 0, len(ps))
			for p := range ps {
				ids = append(ids, p)
			}
			s.Fired(k[0], k[1], ids)
		}
	}
}

// observe tells the observer of claims ("claim" per timer), of the moment a
// claimed batch goes to its fire ("firing", once, no timer) and of how each
// claim ended ("fired", "failed").
func (s *Sweeper) observe(kind, token string, ts []store.ClaimedTimer) {
	if s.Observe == nil {
		return
	}
	if ts == nil {
		s.Observe(kind, token, store.ClaimedTimer{})
	}
	for _, t := range ts {
		s.Observe(kind, token, t)
	}
}

// poisonous reports a fire failure that is the timers' own and will repeat:
// PostgreSQL refused their message for what it holds (SQLSTATE classes 22
// data exception, 23 integrity constraint, 54 program limit: a value too
// long for its index). Anything else (an outage, a read-only server during a
// failover, a migration's missing column, a broker without the key an
// encrypted queue needs) is no timer's fault: the claims wait out their
// lease and fire later, from here or from another broker.
func poisonous(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// fireEach fires a batch that failed permanently one timer at a time, so a
// poison timer does not hold back the healthy ones claimed with it; each
// that fails on its own is recorded (failed). An outage stops it: the
// claims left wait out their lease.
func (s *Sweeper) fireEach(ctx context.Context, token string, claimed []store.ClaimedTimer) ([]FiredTimer, error) {
	var fired []FiredTimer
	for _, c := range claimed {
		f, err := s.FireTimers(ctx, token, []store.ClaimedTimer{c})
		switch {
		case err == nil:
			fired = append(fired, f...)
		case poisonous(err):
			if err := s.failed(ctx, token, c, err); err != nil {
				return fired, err
			}
		default:
			return fired, err
		}
	}
	return fired, nil
}

// failed records one timer's permanent fire failure, with a backoff that
// doubles per attempt up to the lease.
func (s *Sweeper) failed(ctx context.Context, token string, c store.ClaimedTimer, cause error) error {
	s.Stats.FireFailures.Add(1)
	backoff := s.RetryBase
	if backoff <= 0 {
		backoff = time.Second
	}
	// The claim ends with the write below (another sweeper may take the
	// timer after the backoff): told first, so no observer sees the next
	// claim before this one's end.
	s.observe("failed", token, []store.ClaimedTimer{c})
	f, err := s.Store.FailTimer(ctx, token, c, cause.Error(), max(s.MaxAttempts, 1), backoff, s.Lease)
	if err != nil {
		return err
	}
	switch {
	case !f.Held:
	case f.Failed:
		s.Stats.TimersFailed.Add(1)
		s.Log.Error("sweeper: a timer failed for good; it waits for a reschedule or cancel",
			"tenant", c.Tenant, "queue", c.Queue, "timerKey", c.TimerKey, "attempts", f.Attempts, "err", cause)
	default:
		s.Log.Warn("sweeper: a timer's fire failed; the rest of its batch fired, it is retried",
			"tenant", c.Tenant, "queue", c.Queue, "timerKey", c.TimerKey, "attempts", f.Attempts, "err", cause)
	}
	return nil
}

// scheduleNext sleeps until the next timer, within the bounds; with nothing
// done for five cycles, the sleep doubles up to IdleMaxSleep, never past a
// timer it knows of.
func (s *Sweeper) scheduleNext(ctx context.Context, worked bool) {
	d := s.MaxSleep
	next, known, err := s.Store.NextTimer(ctx)
	known = known && err == nil
	if known {
		d = min(max(next, s.MinSleep), s.MaxSleep)
	}
	s.mu.Lock()
	if worked {
		s.idle, s.sleep = 0, 0
	} else if s.idle++; s.idle >= 5 {
		s.sleep = min(max(2*s.sleep, d), max(s.IdleMaxSleep, s.MaxSleep))
		d = s.sleep
		if known {
			d = min(d, max(next, s.MinSleep))
		}
	}
	s.mu.Unlock()
	s.schedule(d)
}

func (s *Sweeper) schedule(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = s.Clock.Now().Add(d)
}
