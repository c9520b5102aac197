package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TimerOp is one operation on a tenant's timers: schedule (create or
// replace), reschedule (move an existing one) or cancel. A timer is a
// message promised for later: when due, a sweeper pushes it to Queue and
// Partition under Txn, exactly once.
type TimerOp struct {
	Op        string // schedule, reschedule or cancel
	Queue     string
	TimerKey  string
	Partition string // "" means Default
	// When: DeliverAt (absolute) or DelayMs after the database's now; both
	// mean "not before". Cancel needs neither.
	DeliverAt *time.Time
	DelayMs   float64
	Txn       string          // the fired message's transactionId (schedule)
	Payload   json.RawMessage // the message's payload; nil keeps it (reschedule)
	// NoReplace: a schedule that finds the key taken changes nothing and
	// answers exists, echoing nothing of the timer there. A caller allowed
	// to schedule but not to reschedule or cancel (a write-only token)
	// must not do either under the name of schedule.
	NoReplace bool
}

// TimerResult is one operation's outcome. Status is scheduled,
// rescheduled, cancelled, absent (no such timer: maybe already delivered)
// or too_late (a sweeper holds a claim on it).
type TimerResult struct {
	OK        bool
	Status    string
	Queue     string
	TimerKey  string
	Txn       string
	MessageID string
	DeliverAt *time.Time
}

// Timer is one pending timer, as listed or peeked.
type Timer struct {
	Queue, TimerKey, Partition, Txn, MessageID string
	DeliverAt                                  time.Time
	Payload                                    json.RawMessage // as stored: sealed when Encrypted; nil in a list
	Encrypted                                  bool
	ProducerSub, LastError                     string
	Claimed                                    bool
	// Failed: its fire failed QUEEN_SWEEPER_MAX_ATTEMPTS times; it is not
	// claimed again until rescheduled or cancelled (LastError says why).
	Failed               bool
	Attempts             int
	CreatedAt, UpdatedAt time.Time
}

// Timer statements take the injected now as their last parameter.
const (
	// scheduleTimerSQL creates or replaces a timer unless a live claim
	// holds it; a replaced timer loses any stale claim, so its old
	// claimer's fire (by claim token) misses it.
	scheduleTimerSQL = `
INSERT INTO queen.log_timers AS t (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload,
	producer_sub, created_at, updated_at, encrypted)
VALUES ($1, $2, $3, $4,
	coalesce($5::timestamptz, coalesce($10::timestamptz, now()) + make_interval(secs => $6::float8 / 1000)),
	$7, $8, $9, nullif($11, ''), coalesce($10::timestamptz, now()), coalesce($10::timestamptz, now()), $12)
ON CONFLICT (tenant_id, queue, timer_key) DO UPDATE SET partition = excluded.partition, deliver_at = excluded.deliver_at,
	txn = excluded.txn, message_id = excluded.message_id, payload = excluded.payload, producer_sub = excluded.producer_sub,
	encrypted = excluded.encrypted,
	attempts = 0, last_error = NULL, claimed_until = NULL, claim_token = NULL, updated_at = excluded.updated_at
WHERE $13::boolean AND (t.claimed_until IS NULL OR t.claimed_until <= coalesce($10::timestamptz, now()) OR t.claim_token IS NULL)
RETURNING deliver_at, xmax = 0`

	rescheduleTimerSQL = `
UPDATE queen.log_timers SET
	deliver_at = coalesce($4::timestamptz, coalesce($7::timestamptz, now()) + make_interval(secs => $5::float8 / 1000)),
	payload = CASE WHEN $6::boolean THEN $8::jsonb ELSE payload END,
	encrypted = CASE WHEN $6::boolean THEN $9::boolean ELSE encrypted END,
	claimed_until = NULL, claim_token = NULL, attempts = 0, last_error = NULL, updated_at = coalesce($7::timestamptz, now())
WHERE tenant_id = $1 AND queue = $2 AND timer_key = $3
	AND (claimed_until IS NULL OR claimed_until <= coalesce($7::timestamptz, now()) OR claim_token IS NULL)
RETURNING deliver_at, txn, message_id::text`

	cancelTimerSQL = `
DELETE FROM queen.log_timers
WHERE tenant_id = $1 AND queue = $2 AND timer_key = $3
	AND (claimed_until IS NULL OR claimed_until <= coalesce($4::timestamptz, now()) OR claim_token IS NULL)
RETURNING txn, message_id::text`

	// timerClaimedSQL tells a miss apart: a row that is there is claimed.
	timerClaimedSQL = `SELECT txn FROM queen.log_timers WHERE tenant_id = $1 AND queue = $2 AND timer_key = $3`

	listTimersSQL = `
SELECT timer_key, partition, deliver_at, txn, message_id::text, NULL::jsonb, encrypted, coalesce(producer_sub, ''),
	coalesce(last_error, ''), coalesce(claim_token IS NOT NULL AND claimed_until > coalesce($5::timestamptz, now()), false), attempts,
	created_at, updated_at, coalesce(claimed_until = 'infinity', false)
FROM queen.log_timers
WHERE tenant_id = $1 AND queue = $2 AND timer_key > $3
ORDER BY timer_key
LIMIT $4`

	peekTimerSQL = `
SELECT timer_key, partition, deliver_at, txn, message_id::text, payload, encrypted, coalesce(producer_sub, ''),
	coalesce(last_error, ''), coalesce(claim_token IS NOT NULL AND claimed_until > coalesce($4::timestamptz, now()), false), attempts,
	created_at, updated_at, coalesce(claimed_until = 'infinity', false)
FROM queen.log_timers
WHERE tenant_id = $1 AND queue = $2 AND timer_key = $3`

	countTimersSQL = `
SELECT count(*) FROM queen.log_timers
WHERE tenant_id = $1 AND queue = $2 AND left(timer_key, length($3)) = $3`
)

// TimerParams are ApplyTimer's arguments: one op on Tenant's timers, by
// ProducerSub, with its payload as the write policy made it (queen/writes'
// ApplyTimers, which begins no transaction: its caller does).
type TimerParams struct {
	Tenant, ProducerSub string
	Op                  TimerOp
	// Payload is what a schedule stores ("null" for none), or what a
	// reschedule replaces the stored one with (nil keeps it); sealed when
	// Sealed, since its queue encrypts.
	Payload json.RawMessage
	Sealed  bool
	// MessageID is the id of a schedule's message (minted by the caller,
	// NewID, before it sealed the payload).
	MessageID string
	// Now is the statement's database instant (DBNow), read by the caller
	// before it sealed, as the op's first read of database time.
	Now *time.Time
}

// ApplyTimer runs p.Op on q, one statement (and, when it changed nothing,
// timerClaimedSQL to say why).
func (s *Store) ApplyTimer(ctx context.Context, q Executor, p TimerParams) (TimerResult, error) {
	op := p.Op
	r := TimerResult{Queue: op.Queue, TimerKey: op.TimerKey, Txn: op.Txn}
	switch op.Op {
	case "schedule":
		r.MessageID = p.MessageID
		return s.scheduleTimer(ctx, q, p, r)
	case "reschedule":
		var at time.Time
		err := q.QueryRow(ctx, rescheduleTimerSQL, p.Tenant, op.Queue, op.TimerKey, op.DeliverAt, op.DelayMs,
			p.Payload != nil, p.Now, nullableJSON(p.Payload), p.Sealed).Scan(&at, &r.Txn, &r.MessageID)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.timerMiss(ctx, q, p.Tenant, op, r)
		}
		if err != nil {
			return r, err
		}
		r.OK, r.Status, r.DeliverAt = true, "rescheduled", &at
		return r, nil
	case "cancel":
		err := q.QueryRow(ctx, cancelTimerSQL, p.Tenant, op.Queue, op.TimerKey, p.Now).Scan(&r.Txn, &r.MessageID)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.timerMiss(ctx, q, p.Tenant, op, r)
		}
		if err != nil {
			return r, err
		}
		r.OK, r.Status = true, "cancelled"
		return r, nil
	}
	return r, fmt.Errorf("unknown timer op %q", op.Op)
}

// scheduleTimer runs scheduleTimerSQL for p (ApplyTimer's schedule).
func (s *Store) scheduleTimer(ctx context.Context, q Executor, p TimerParams, r TimerResult) (TimerResult, error) {
	op := p.Op
	part := op.Partition
	if part == "" {
		part = DefaultPartition
	}
	var at time.Time
	var inserted bool
	err := q.QueryRow(ctx, scheduleTimerSQL, p.Tenant, op.Queue, op.TimerKey, part, op.DeliverAt, op.DelayMs,
		op.Txn, r.MessageID, string(p.Payload), p.Now, p.ProducerSub, p.Sealed, !op.NoReplace).Scan(&at, &inserted)
	if errors.Is(err, pgx.ErrNoRows) && op.NoReplace {
		r.Status, r.MessageID = "exists", ""
		return r, nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return s.timerMiss(ctx, q, p.Tenant, op, r)
	}
	if err != nil {
		return r, err
	}
	r.OK, r.Status, r.DeliverAt = true, "scheduled", &at
	if !inserted {
		r.Status = "rescheduled"
	}
	return r, nil
}

// timerMiss answers an op that changed nothing: too_late when a live claim
// holds the timer, absent when there is none (it may have fired; the txn
// echoed is where to look).
func (s *Store) timerMiss(ctx context.Context, q querier, tenant string, op TimerOp, r TimerResult) (TimerResult, error) {
	var txn string
	err := q.QueryRow(ctx, timerClaimedSQL, tenant, op.Queue, op.TimerKey).Scan(&txn)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.Status = "absent"
	case err != nil:
		return r, err
	default:
		r.Status, r.Txn = "too_late", txn
	}
	r.MessageID = ""
	return r, nil
}

func nullableJSON(p json.RawMessage) *string {
	if p == nil {
		return nil
	}
	s := string(p)
	return &s
}

// ListTimers lists a queue's pending timers after the key after, in key
// order, at most limit.
func (s *Store) ListTimers(ctx context.Context, tenant, queue, after string, limit int) ([]Timer, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, listTimersSQL, tenant, queue, after, limit, s.dbNow())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Timer, error) { return scanTimer(r, queue) })
}

// scanTimer reads a row of listTimersSQL or peekTimerSQL.
func scanTimer(r pgx.Row, queue string) (Timer, error) {
	t := Timer{Queue: queue}
	var payload []byte
	err := r.Scan(&t.TimerKey, &t.Partition, &t.DeliverAt, &t.Txn, &t.MessageID, &payload, &t.Encrypted, &t.ProducerSub,
		&t.LastError, &t.Claimed, &t.Attempts, &t.CreatedAt, &t.UpdatedAt, &t.Failed)
	if payload != nil {
		t.Payload = payload
	}
	return t, err
}

// CountTimers counts a queue's pending timers whose key starts with prefix.
func (s *Store) CountTimers(ctx context.Context, tenant, queue, prefix string) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := s.pool.QueryRow(ctx, countTimersSQL, tenant, queue, prefix).Scan(&n)
	return n, err
}

// PeekTimer returns one pending timer, or ok=false.
func (s *Store) PeekTimer(ctx context.Context, tenant, queue, key string) (Timer, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	t, err := scanTimer(s.pool.QueryRow(ctx, peekTimerSQL, tenant, queue, key, s.dbNow()), queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return Timer{}, false, nil
	}
	return t, err == nil, err
}
