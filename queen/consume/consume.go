// Package consume owns a pop from a validated request to a settled claim:
// the claim, the long-poll wait around it, and what becomes of the claim
// once its answer was (or could not be) written. It knows nothing of HTTP:
// httpapi parses the request, writes the answer this package's Result
// describes, and counts; the simulator can drive it directly.
//
// The contract, each rule with its reason:
//
//   - A client already gone claims nothing. A claim hides its partition
//     from the group for the lease; one nobody will receive only costs.
//     (The claim observer still sees a claim let through, with
//     Claim.ClientGone, so the simulator can tell.)
//   - A claim, once started, runs to its end even if the client leaves
//     meanwhile (bounded by DB_STATEMENT_TIMEOUT). Cancelling it could
//     reach PostgreSQL after its commit and leave a lease nobody knows,
//     hiding the partition for a whole lease.
//   - A claim that finished after its client left is given back at once
//     (Result Gone), for the same reason: otherwise the partition hides
//     for the lease.
//   - An empty try waits, when the request asks to, without holding a
//     database connection: on the waker (a push on this broker) or a
//     back-off timer, whichever comes first. The timer is the floor under
//     lost wakes (another broker's push, a lost mesh hint): it starts at
//     Wait.Initial, and after Wait.Threshold empty tries grows by
//     Wait.Factor up to Wait.Max, so an idle queue costs few statements
//     and a lost wake costs at most one interval.
//   - The wait ends empty at the request's timeout, and at once while the
//     broker drains: a graceful stop must not wait for parked polls.
//   - An autoAck pop's claim is leased like any other (the caller builds
//     its store request with AutoAck false), and completed only once its
//     answer was written (Complete): an answer nobody received must not
//     consume what it claimed. An answer that could not be written gives
//     its claim back (Release), so the next pop gets the messages at once
//     rather than after the lease.
//   - A claim is the store's statements in an order this package owns
//     (Claimer): subscribe on a group's first pop, the pop statement, and
//     after an empty wildcard pop the pop mark and the watermark, each
//     spaced by a throttle of this broker's.
//   - Acks are settled here too (Ack): completions of concurrent requests
//     share one statement through the ack combiner, and each request hears
//     only its own items (ack.go names the retry layers). Any other batch
//     (failures, retries, DLQ moves) runs the general ack's state machine
//     (ackstate.go) between the store's read and write, the transaction
//     route's strict acks included (AckStrictInTx).
//
// Imports flow one way: httpapi -> consume -> store, combine, waker, clock.
package consume

import (
	"context"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/waker"
)

// Wait tunes the back-off of a parked pop between empty tries
// (POP_WAIT_INITIAL_INTERVAL_MS, POP_WAIT_BACKOFF_THRESHOLD,
// POP_WAIT_BACKOFF_MULTIPLIER, POP_WAIT_MAX_INTERVAL_MS).
type Wait struct {
	Initial   time.Duration
	Threshold int
	Factor    float64
	Max       time.Duration
}

// Options wire a Consumer.
type Options struct {
	Store *store.Store
	// Retry runs each completion statement again when it lost a lock race
	// (the broker's one contention retry over Store; zero: none).
	Retry combine.Retry
	// Names caches the groups' subscriptions (ClaimerOptions.Names).
	Names *names.Names
	// Cipher opens the popped payloads (ClaimerOptions.Cipher).
	Cipher *crypt.Cipher
	// Waker ends a parked pop's wait early when a push commits.
	Waker *waker.Hub
	// Clock paces the waits (virtual in the simulator).
	Clock clock.Clock
	Wait  Wait
	// Draining is closed when the broker stops gracefully: parked pops
	// answer empty at once and new ones do not park. Nil: never.
	Draining <-chan struct{}
	// OnClaim, when set, is told of every claim a pop made (the
	// simulator's view of claims that delivery cannot show: one given
	// back at once still hid its partition meanwhile).
	OnClaim func(Claim)
	Log     *slog.Logger
	// AckStatements is how many combined completion statements may be in
	// flight at once (QUEEN_ACK_STATEMENTS); acks of completions arriving
	// while they run wait and go together in the next one. Zero means 4.
	AckStatements int
	// PopStatements is how many combined pop statements may be in flight
	// at once (ClaimerOptions.PopStatements, QUEEN_POP_STATEMENTS).
	PopStatements int
	// AckBatchRows caps the items of one combined completion statement
	// (QUEEN_PUSH_BATCH_ROWS). Zero means 1000.
	AckBatchRows int
	// PopMarkEvery spaces the pop marks and the checks of cached
	// subscriptions (ClaimerOptions.PopMarkEvery). Zero means 250 ms.
	PopMarkEvery time.Duration
}

// Claim is one claim a pop made, for Options.OnClaim.
type Claim struct {
	Tenant, Queue, LeaseID string
	Messages               int
	// ClientGone: the request's context was done before the claim began.
	ClientGone bool
}

// Consumer runs pops. It is safe for concurrent use.
type Consumer struct {
	o      Options
	claims *Claimer
	acks   *combine.Combiner[store.AckRow, store.AckResult]
}

// New returns a Consumer.
func New(o Options) *Consumer {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	claims := NewClaimer(o.Store, ClaimerOptions{Names: o.Names, Cipher: o.Cipher, Clock: o.Clock, PopMarkEvery: o.PopMarkEvery, PopStatements: o.PopStatements, Log: o.Log, Retry: o.Retry})
	return &Consumer{o: o, claims: claims, acks: newAckCombiner(o)}
}

// Request is what a pop waits for.
type Request struct {
	// Tenant and Queue name the wake key the pop parks on; Queue "" is
	// the tenant-wide key of pops by namespace or task.
	Tenant, Queue string
	// Group is the consumer group ("" for queue mode): a wake goes to as
	// many pops of each group as partitions got messages.
	Group string
	// Wait asks to park until Timeout when the first try is empty.
	Wait    bool
	Timeout time.Duration
}

// Outcome is how a pop ended.
type Outcome int

const (
	// Claimed: the pop claimed messages (Result.Claim); its answer is
	// the caller's to write, then Complete or Release.
	Claimed Outcome = iota
	// Empty: nothing to claim within the wait (or no wait was asked).
	Empty
	// Draining: the broker stops gracefully; the pop answers empty now.
	Draining
	// Gone: the client left. Nothing is claimed, or the claim was given
	// back; there is nobody to answer.
	Gone
)

// Result is a pop's end.
type Result struct {
	Outcome Outcome
	// Claim is the claimed batch when Outcome is Claimed.
	Claim PopResult
}

// Try is one claim attempt. It is run with a context that is never
// cancelled (a started claim runs to its end); an empty PopResult means
// nothing was there.
type Try func(context.Context) (PopResult, error)

// Pop runs try until it claims messages or, when req.Wait, until
// req.Timeout passes, parking between tries as the package doc says. An
// error from try ends the pop and is returned as try gave it (it is the
// caller's own, answered as the caller answers its store errors).
func (c *Consumer) Pop(ctx context.Context, req Request, try Try) (Result, error) {
	deadline := c.o.Clock.Now().Add(req.Timeout)
	interval := c.o.Wait.Initial
	key := waker.Key(req.Tenant, req.Queue)
	for empties := 0; ; empties++ {
		// Whether the client had gone before this claim began, read
		// before the check below: a claim it lets through is reported.
		gone := ctx.Err() != nil
		woken, withdraw := c.o.Waker.Wait(key, req.Group)
		if ctx.Err() != nil && !canary.On("claim-after-leave") {
			withdraw(true) // the client is gone: claim nothing
			return Result{Outcome: Gone}, nil
		}
		// Once started, a claim runs to its end even if the client leaves
		// meanwhile (see the package doc); a finished claim whose client
		// has gone is released in claimed.
		res, err := try(context.WithoutCancel(ctx))
		if err != nil {
			withdraw(true)
			return Result{}, err
		}
		if len(res.Messages) > 0 {
			withdraw(true)
			return c.claimed(ctx, req.Tenant, res, gone), nil
		}
		left := deadline.Sub(c.o.Clock.Now())
		if !req.Wait || left <= 0 {
			withdraw(true)
			return Result{Outcome: Empty}, nil
		}
		if c.draining() {
			withdraw(true)
			return Result{Outcome: Draining}, nil
		}
		interval = c.backOff(interval, empties)
		if out, ended := c.park(ctx, woken, c.sleep(interval, left)); ended {
			withdraw(true)
			return Result{Outcome: out}, nil
		}
		withdraw(false) // this pop re-checks itself
	}
}

// claimed reports a claim to the observer and gives it back when its
// client left while it ran: the partition is not hidden for a whole lease.
func (c *Consumer) claimed(ctx context.Context, tenant string, res PopResult, gone bool) Result {
	if c.o.OnClaim != nil {
		c.o.OnClaim(Claim{Tenant: tenant, Queue: res.Queue, LeaseID: res.LeaseID, Messages: len(res.Messages), ClientGone: gone})
	}
	if ctx.Err() != nil {
		// The claim raced the client's disconnect: give it back so
		// the partition is not hidden for a whole lease.
		if !canary.On("cancel-keeps-claim") {
			c.Release(res.LeaseID)
		}
		return Result{Outcome: Gone}
	}
	return Result{Outcome: Claimed, Claim: res}
}

// backOff is the interval before the next try: Initial for the first
// Threshold empty tries, then growing by Factor up to Max.
func (c *Consumer) backOff(interval time.Duration, empties int) time.Duration {
	if empties < c.o.Wait.Threshold {
		return interval
	}
	interval = time.Duration(float64(interval) * c.o.Wait.Factor)
	return min(interval, c.o.Wait.Max)
}

// sleep is how long a parked pop waits before it tries again by itself:
// the back-off interval, never past the timeout.
func (c *Consumer) sleep(interval, left time.Duration) time.Duration {
	if canary.On("poll-waits-for-wake") {
		return left // no periodic re-check: only a wake ends the wait
	}
	return min(interval, left)
}

// park waits for a wake, the back-off timer, the client leaving or the
// drain. ended reports that the pop ends with out rather than try again.
func (c *Consumer) park(ctx context.Context, woken <-chan struct{}, d time.Duration) (out Outcome, ended bool) {
	t := c.o.Clock.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return Gone, true
	case <-woken:
		t.Stop()
	case <-t.C():
	case <-c.o.Draining:
		// Graceful stop: answer now rather than hold the shutdown.
		t.Stop()
		return Draining, true
	}
	return 0, false
}

func (c *Consumer) draining() bool {
	select {
	case <-c.o.Draining:
		return true
	default:
		return false
	}
}
