package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/crypt"
)

// The sweeper's statements. Every broker runs them; FOR UPDATE SKIP LOCKED
// shares the rows, and a claim is a lease: a broker that dies holding one
// leaves the rows claimable again when it ends.
const (
	// claimTimersSQL leases up to $4 due timers under token $3 for $2 ms.
	// The ordering expression is the index's.
	claimTimersSQL = `
UPDATE queen.log_timers t SET claimed_until = coalesce($1::timestamptz, now()) + make_interval(secs => $2::float8 / 1000),
	claim_token = $3
WHERE (t.tenant_id, t.queue, t.timer_key) IN (
	SELECT tenant_id, queue, timer_key FROM queen.log_timers
	WHERE greatest(deliver_at, coalesce(claimed_until, deliver_at)) <= coalesce($1::timestamptz, now())
	ORDER BY greatest(deliver_at, coalesce(claimed_until, deliver_at))
	LIMIT $4
	FOR UPDATE SKIP LOCKED)
RETURNING t.tenant_id::text, t.queue, t.timer_key, t.partition, t.deliver_at, t.txn, t.message_id::text,
	t.payload, coalesce(t.producer_sub, ''), t.encrypted`

	// fireTimersSQL deletes the claimed timers that are still this claim's:
	// one rescheduled or cancelled since (or re-claimed by another broker
	// after the lease ran out) is not deleted and so not pushed here.
	fireTimersSQL = `
DELETE FROM queen.log_timers
WHERE claim_token = $1
	AND (tenant_id, queue, timer_key) IN (SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[]))
RETURNING tenant_id::text, queue, timer_key`

	// nextTimerSQL is how long until the next timer may be claimed (ms,
	// negative when overdue; NULL when there is none). Failed timers
	// (claimed_until infinity) are never claimable.
	nextTimerSQL = `
SELECT extract(epoch FROM min(greatest(deliver_at, coalesce(claimed_until, deliver_at))) - coalesce($1::timestamptz, now())) * 1000
FROM queen.log_timers WHERE claimed_until IS DISTINCT FROM 'infinity'`

	// failTimerSQL records a permanent fire failure of a timer still held
	// by the claim: attempts and last_error are written and the claim is
	// given up. Below $6 attempts it is claimable again after a backoff
	// of $7 ms doubled per earlier attempt, at most $9 ms; at $6 it has failed: claimed_until infinity keeps it out of
	// every claim until it is rescheduled or cancelled, and the list shows
	// it with its error.
	failTimerSQL = `
UPDATE queen.log_timers SET attempts = attempts + 1, last_error = $5, claim_token = NULL,
	claimed_until = CASE WHEN attempts + 1 >= $6 THEN 'infinity'::timestamptz
		ELSE coalesce($1::timestamptz, now()) + make_interval(secs => least($7::float8 * power(2, least(attempts, 30)), $9::float8) / 1000) END,
	updated_at = coalesce($1::timestamptz, now())
WHERE claim_token = $2 AND tenant_id = $3::uuid AND queue = $4 AND timer_key = $8
RETURNING attempts, attempts >= $6`

	// dueTimersSQL counts claimable due timers, up to $2.
	dueTimersSQL = `
SELECT count(*) FROM (SELECT 1 FROM queen.log_timers
	WHERE greatest(deliver_at, coalesce(claimed_until, deliver_at)) <= coalesce($1::timestamptz, now()) LIMIT $2) d`

	pruneKVSQL = `
DELETE FROM queen.kv WHERE ctid IN (
	SELECT ctid FROM queen.kv WHERE expires_at <= coalesce($1::timestamptz, now())
	LIMIT $2 FOR UPDATE SKIP LOCKED)`
)

// ClaimedTimer is a due timer leased to one sweeper.
type ClaimedTimer struct {
	Tenant, Queue, TimerKey, Partition, Txn, MessageID, ProducerSub string
	DeliverAt                                                       time.Time
	Payload                                                         crypt.Payload // sealed at schedule when its queue encrypted
}

// ClaimTimers leases up to limit due timers for lease under token.
func (s *Store) ClaimTimers(ctx context.Context, token string, lease time.Duration, limit int) ([]ClaimedTimer, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, text("timer.claim"), s.dbNow(), float64(lease.Milliseconds()), token, limit)
	if err != nil {
		return nil, err
	}
	var out []ClaimedTimer
	for rows.Next() {
		var c ClaimedTimer
		var payload []byte
		var sealed bool
		if err := rows.Scan(&c.Tenant, &c.Queue, &c.TimerKey, &c.Partition, &c.DeliverAt, &c.Txn, &c.MessageID,
			&payload, &c.ProducerSub, &sealed); err != nil {
			rows.Close()
			return nil, err
		}
		c.Payload = crypt.Stored(payload, sealed)
		out = append(out, c)
	}
	return out, rows.Err()
}

// FiredRow is the row a claimed timer fires as into partition pid (queen/names
// resolves it): its promised message id, its txn as transactionId, its
// payload as stored (sealed when its queue encrypted at schedule), its
// producer.
func FiredRow(c ClaimedTimer, pid string) AppendRow {
	return AppendRow{id: c.MessageID, pid: pid, txid: c.Txn, payload: c.Payload, sub: c.ProducerSub}
}

// DeleteClaimedTimers runs fireTimersSQL in tx: it deletes the claimed
// timers still held by token, and held[i] reports whether claimed[i] was
// (one rescheduled or cancelled since, or claimed again after the lease
// ran out, is neither deleted nor held).
func (s *Store) DeleteClaimedTimers(ctx context.Context, tx pgx.Tx, token string, claimed []ClaimedTimer) ([]bool, error) {
	var tenants, queues, keys []string
	for _, c := range claimed {
		tenants, queues, keys = append(tenants, c.Tenant), append(queues, c.Queue), append(keys, c.TimerKey)
	}
	res, err := tx.Query(ctx, fireTimersSQL, token, tenants, queues, keys)
	if err != nil {
		return nil, err
	}
	deleted := map[[3]string]bool{}
	for res.Next() {
		var k [3]string
		if err := res.Scan(&k[0], &k[1], &k[2]); err != nil {
			res.Close()
			return nil, err
		}
		deleted[k] = true
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	held := make([]bool, len(claimed))
	for i, c := range claimed {
		held[i] = deleted[[3]string{c.Tenant, c.Queue, c.TimerKey}]
	}
	return held, nil
}

// TimerFailure is what FailTimer recorded.
type TimerFailure struct {
	Attempts int
	Failed   bool // no attempt is left: the timer waits for a reschedule or cancel
	Held     bool // the claim still held the timer (else nothing was written)
}

// FailTimer records that firing a claimed timer failed permanently: its
// attempts and last error are written, and it is claimable again after
// backoff doubled per earlier attempt (at most ceiling), or, at
// maxAttempts, never until rescheduled or cancelled.
func (s *Store) FailTimer(ctx context.Context, token string, c ClaimedTimer, why string, maxAttempts int, backoff, ceiling time.Duration) (TimerFailure, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var f TimerFailure
	err := s.pool.QueryRow(ctx, failTimerSQL, s.dbNow(), token, c.Tenant, c.Queue, why, maxAttempts,
		float64(backoff.Milliseconds()), c.TimerKey, float64(ceiling.Milliseconds())).Scan(&f.Attempts, &f.Failed)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, nil
	}
	f.Held = err == nil
	return f, err
}

// NextTimer is how long until the next timer may be claimed (negative when
// one is overdue), or ok=false when there is no timer at all.
func (s *Store) NextTimer(ctx context.Context) (time.Duration, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ms *float64
	if err := s.pool.QueryRow(ctx, nextTimerSQL, s.dbNow()).Scan(&ms); err != nil || ms == nil {
		return 0, false, err
	}
	return time.Duration(*ms * float64(time.Millisecond)), true, nil
}

// PruneKV deletes up to limit expired KV rows (already invisible to reads).
func (s *Store) PruneKV(ctx context.Context, limit int) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, pruneKVSQL, s.dbNow(), limit)
	return tag.RowsAffected(), err
}

// DueTimers counts the timers due and not claimed, up to limit (a gauge:
// a backlog here means the sweepers fall behind).
func (s *Store) DueTimers(ctx context.Context, limit int) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := s.pool.QueryRow(ctx, dueTimersSQL, s.dbNow(), limit).Scan(&n)
	return n, err
}
