package store

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/crypt"
)

// QueueModeGroup is the consumer group of plain queue-mode consumers: one
// shared cursor, competing consumers.
const QueueModeGroup = "__QUEUE_MODE__"

// PopRow is one message a pop statement claimed, as the statement
// answers it (popLeaseSQL's columns): queen/consume makes the pop's answer
// of them.
type PopRow struct {
	PartitionID, Partition string
	// RetryCount is the partition's batch retry count.
	RetryCount        int
	ID, TransactionID string
	TraceID           *string
	// Payload is the message's payload as stored: its reader opens it.
	Payload     crypt.Payload
	ProducerSub *string
	CreatedAt   time.Time
	Seq         int64
	// LeaseExpiresAt is the partition's new lease end; nil for autoAck.
	LeaseExpiresAt *time.Time
}

// PopRows are a pop statement's answer: its rows in the order it answers
// them, and the lease token it claimed them under (minted here, for every
// pop; an autoAck pop holds no lease under it). No rows: nothing claimed,
// no lease held.
type PopRows struct {
	LeaseID string
	Rows    []PopRow
}

// popClaimSQL opens both pop statements: the queue's settings and the
// claimed cursor rows. $1 queue id, $2 group, $3 max partitions, $4 max
// messages, $5 lease token, $6 lease seconds (0: the queue's leaseTime),
// $7 autoAck, $8 now, $9 byte budget (PopParams.MaxBytes), $10 the routed
// epoch (NULL without shards), $11 partition name (specific pops only).
//
// Fence ($10, fence.go): the queue row's epoch is a one-time filter (it
// names no cursor column), so a pop of a frozen or moved queue fails as
// moved even when nothing is claimable; the cursor row's epoch is rechecked
// on the row version the claim locks, so a pop whose snapshot predates a
// freeze and that meets the frozen row fails too. NULL short-circuits both.
//
// Invariant (exclusive lease): a cursor row is claimed only if its lease is
// absent or expired in database time, under FOR UPDATE SKIP LOCKED, so two
// pops of one group never hold the same partition at once.
//
// Invariant (cheap when empty): a fresh pop mark (migration 012, MarkPopEmpty)
// says no cursor of the group is behind; the candidate scan is then a
// one-time filter that reads nothing.
//
// Invariant (fair and live): only partitions whose first message after the
// cursor exists and is visible are candidates, so a partition emptied by
// retention, or whose head is still delayed, never takes a claim that yields
// nothing; candidates are served least-recently-claimed first (a release
// keeps lease_acquired_at), so one busy partition cannot starve the others.
const popClaimSQL = `
WITH q AS (
	SELECT id, lease_time, delayed_processing, window_buffer, coalesce($8::timestamptz, now()) AS now
	FROM queen.queues WHERE id = $1
),
cand AS (
	SELECT pc.partition_id, pc.last_consumed_seq AS cursor, pc.batch_retry_count AS retries,
		pc.lease_acquired_at AS acquired, p.name
	FROM queen.partition_consumers pc
	JOIN queen.partitions p ON p.id = pc.partition_id
	WHERE pc.queue_id = $1 AND pc.consumer_group = $2 AND /*partition*/ TRUE
		AND ($10::bigint IS NULL OR (SELECT x.epoch = $10 OR queen.fence_moved(x.id) FROM queen.queues x WHERE x.id = $1))
		AND ($10::bigint IS NULL OR pc.epoch = $10 OR queen.fence_moved(pc.queue_id))
		AND NOT EXISTS (SELECT 1 FROM queen.pop_marks mk WHERE mk.queue_id = $1
			AND (mk.groups ->> $2)::timestamptz > coalesce($8::timestamptz, now()) - interval '` + popMarkFresh + `')
		AND (pc.lease_expires_at IS NULL OR pc.lease_expires_at <= coalesce($8::timestamptz, now()))
		AND p.last_seq > pc.last_consumed_seq
		AND ((SELECT window_buffer FROM q) = 0
			OR p.last_message_at <= coalesce($8::timestamptz, now()) - make_interval(secs => (SELECT window_buffer FROM q)))
		AND EXISTS (
			SELECT 1 FROM (
				SELECT h.created_at FROM queen.messages h
				WHERE h.partition_id = pc.partition_id AND h.seq > pc.last_consumed_seq
				ORDER BY h.seq LIMIT 1
			) head
			WHERE (SELECT delayed_processing FROM q) = 0
				OR head.created_at <= coalesce($8::timestamptz, now()) - make_interval(secs => (SELECT delayed_processing FROM q)))
	ORDER BY /*order*/ pc.lease_acquired_at ASC NULLS FIRST, pc.partition_id
	LIMIT $3::int
	FOR UPDATE OF pc SKIP LOCKED
),
`

// popHiddenFromSQL is, per claimed partition, the first seq after the
// cursor that delayedProcessing still hides (NULL when none is hidden).
//
// Invariant (nothing skipped): a claim reads a prefix of the messages after
// the cursor in seq order, stopping before the first one delayedProcessing
// still hides; appendSQL makes every committed prefix visible in seq order.
const popHiddenFromSQL = `CASE WHEN q.delayed_processing = 0 THEN NULL ELSE (
			SELECT min(h.seq) FROM queen.messages h
			WHERE h.partition_id = c.partition_id AND h.seq > c.cursor
				AND h.created_at > q.now - make_interval(secs => q.delayed_processing)) END AS hidden_from`

// popPickSQL reads the claimed partition c's messages after its cursor,
// up to the hidden one and $4 of them: the columns the answer needs.
const popPickSQL = `SELECT m.id, m.transaction_id, m.trace_id, m.payload, m.is_encrypted, m.producer_sub, m.created_at, m.seq
			FROM queen.messages m
			WHERE m.partition_id = c.partition_id AND m.seq > c.cursor
				AND (c.hidden_from IS NULL OR m.seq < c.hidden_from)
			ORDER BY m.seq LIMIT $4::int`

// popBytesSQL is the running cost to the answer of the picked messages,
// over the pick's order (window w): each message's JSON text twice, as
// data and as payload.
//
// Invariant (byte budget): the pick keeps messages, in the order it hands
// them out, while their running cost stays within $9, and always the first
// one. What it does not keep is neither leased nor consumed, and the cut
// keeps a prefix in seq order, so nothing is skipped. The text's length
// bounds what the broker writes (it only drops whitespace), which a stored
// size cannot: jsonb may compress, and a number's text may be far longer
// than its numeric (1e-16383). One window and the text's length cost a
// pop of 10 small messages about 4% of its statement, of 100 about 9%
// (against 12% and 23% for a cheap cut on stored sizes before the
// measure); every message the pick reads is measured, as every one was
// written before the budget.
const popBytesSQL = `sum(2 * octet_length(m.payload::text)::bigint) OVER w AS bytes`

// popLeaseSQL closes the pop statements of one lease: it leases (or, for
// autoAck, completes) what per_partition picked and answers the picked
// messages.
var popLeaseSQL = popLease(`$5::text`, false)

// popLease is the closing leased CTE and answer of a pop statement: token
// is the lease token of a row s of per_partition; ranked answers each
// row's claim rank after the lease end (popManySQL).
func popLease(token string, ranked bool) string {
	rank, rankOut := "", ""
	if ranked {
		rank, rankOut = ", s.rank", ", l.rank"
	}
	return `
leased AS (
	UPDATE queen.partition_consumers pc SET
		lease_acquired_at = q.now,
		worker_id = CASE WHEN $7::bool THEN NULL ELSE ` + token + ` END,
		lease_expires_at = CASE WHEN $7::bool THEN NULL
			ELSE q.now + make_interval(secs => coalesce(nullif($6::int, 0), nullif(q.lease_time, 0), 60)) END,
		batch_size = CASE WHEN $7::bool THEN 0 ELSE s.n END,
		acked_count = 0,
		lease_max_seq = s.last_seq,
		last_consumed_seq = CASE WHEN $7::bool THEN s.last_seq ELSE pc.last_consumed_seq END,
		last_consumed_id = CASE WHEN $7::bool THEN s.last_id ELSE pc.last_consumed_id END,
		last_consumed_created_at = CASE WHEN $7::bool THEN s.last_created ELSE pc.last_consumed_created_at END,
		batch_retry_count = CASE WHEN $7::bool THEN 0 ELSE pc.batch_retry_count END,
		total_messages_consumed = pc.total_messages_consumed + CASE WHEN $7::bool THEN s.n ELSE 0 END,
		total_batches_consumed = pc.total_batches_consumed + CASE WHEN $7::bool THEN 1 ELSE 0 END,
		last_consumed_at = CASE WHEN $7::bool THEN q.now ELSE pc.last_consumed_at END
	FROM per_partition s, q
	WHERE pc.partition_id = s.partition_id AND pc.consumer_group = $2
	RETURNING pc.partition_id, pc.lease_expires_at` + rank + `
)
SELECT p.partition_id::text, p.name, p.retries, p.id::text, p.transaction_id, p.trace_id::text, p.payload,
	p.is_encrypted, p.producer_sub, p.created_at, p.seq, l.lease_expires_at` + rankOut + `
FROM picked p JOIN leased l ON l.partition_id = p.partition_id`
}

// popClaimedRankedSQL numbers the claimed partitions in claim order (least
// recently claimed first), with what delayedProcessing hides of each: the
// claimed CTE of the statements that claim several partitions (popSQL,
// popManySQL).
const popClaimedRankedSQL = `
claimed AS (
	SELECT c.*, row_number() OVER (ORDER BY c.acquired ASC NULLS FIRST, c.partition_id) AS rank,
		` + popHiddenFromSQL + `
	FROM cand c, q
),`

// popSQL claims up to $3 partitions, reads their messages and leases
// them, in one statement (popClaimSQL, popHiddenFromSQL, popLeaseSQL give
// its invariants). The batch of $4 messages is shared across the claimed
// partitions in claim order; a partition whose messages the batch did not
// reach is not leased.
var popSQL = popClaimSQL + popClaimedRankedSQL + `
picked AS (
	SELECT * FROM (
		SELECT c.partition_id, c.name, c.retries, m.id, m.transaction_id, m.trace_id, m.payload, m.is_encrypted, m.producer_sub,
			m.created_at, m.seq, row_number() OVER w AS n, ` + popBytesSQL + `
		FROM claimed c
		CROSS JOIN LATERAL (` + popPickSQL + `) m
		WINDOW w AS (ORDER BY c.rank, m.seq ROWS UNBOUNDED PRECEDING)
	) x WHERE n <= $4::int AND (n = 1 OR bytes <= $9::bigint)
),
per_partition AS (
	SELECT partition_id, count(*) AS n, max(seq) AS last_seq,
		(array_agg(id ORDER BY seq DESC))[1] AS last_id,
		(array_agg(created_at ORDER BY seq DESC))[1] AS last_created
	FROM picked GROUP BY partition_id
),` + popLeaseSQL + `
ORDER BY p.n`

// popOneSQL is popSQL for a claim of one partition ($3 = 1), the pop of
// every client that does not ask for more: with one partition there is no
// batch to share out, so it numbers, groups and sorts nothing; the lease
// takes the last picked row. Its invariants are popSQL's
// (TestOnePartitionPopAgreesWithTheGeneralPop).
var popOneSQL = popClaimSQL + `
claimed AS (
	SELECT c.*, ` + popHiddenFromSQL + `
	FROM cand c, q
),
picked AS (
	SELECT c.partition_id, c.name, c.retries, m.id, m.transaction_id, m.trace_id, m.payload, m.is_encrypted, m.producer_sub,
		m.created_at, m.seq
	FROM claimed c` + popPickOwnSQL + `
),
per_partition AS (
	SELECT partition_id, (SELECT count(*) FROM picked) AS n, seq AS last_seq, id AS last_id, created_at AS last_created
	FROM picked ORDER BY seq DESC LIMIT 1
),` + popLeaseSQL + `
ORDER BY p.seq`

// popPickOwnSQL is the pick of one claimed partition c within its own byte
// budget (popBytesSQL over c's messages alone): the pick of popOneSQL and
// of each pop of popManySQL.
const popPickOwnSQL = `
	CROSS JOIN LATERAL (
		SELECT m.*, row_number() OVER w AS n, ` + popBytesSQL + `
		FROM (` + popPickSQL + `) m
		WINDOW w AS (ORDER BY m.seq ROWS UNBOUNDED PRECEDING)
	) m
	WHERE m.n = 1 OR m.bytes <= $9::bigint`

// popText builds the statement for a wildcard or a specific-partition pop
// claiming one partition or several; the statement table (statements.go)
// holds the four, built once.
func popText(partition, one bool) string {
	sql := popSQL
	if one {
		sql = popOneSQL
	}
	if partition {
		sql = strings.Replace(sql, `/*partition*/ TRUE`,
			`pc.partition_id = (SELECT p2.id FROM queen.partitions p2 WHERE p2.queue_id = $1 AND p2.name = $11::text)`, 1)
	}
	return sql
}

// popParams are the wildcard pop's arguments, $1 to $10 (popClaimSQL).
type popParams struct {
	QueueID      string
	Group        string
	Partitions   int
	Batch        int
	LeaseID      string
	LeaseSeconds int
	AutoAck      bool
	Now          *time.Time
	MaxBytes     int64
	Epoch        *int64
}

// popPartitionParams are a specific-partition pop's: the partition's name
// is $11.
type popPartitionParams struct {
	popParams
	Partition string
}

// popStatement names the pop statement for p and the partition ("": a
// wildcard pop) and gives its arguments.
func popStatement(p popParams, partition string) (string, []any) {
	name := "pop"
	if partition != "" {
		name = "pop.partition"
	}
	if p.Partitions == 1 {
		name += ".one"
	}
	if partition != "" {
		return name, argsOf(popPartitionParams{p, partition})
	}
	return name, argsOf(p)
}

// PopParams are one pop statement's arguments as its caller names them
// (queen/consume decides them from its PopRequest): the driver adds the
// lease token and turns a zero MaxBytes into no bound.
type PopParams struct {
	// QueueID and Group are the statement's $1 and $2.
	QueueID, Group string
	// Partition names the one partition to pop; "" pops any (popSQL).
	Partition    string
	Partitions   int // >= 1; 1 for a specific partition
	Batch        int // >= 1
	LeaseSeconds int
	AutoAck      bool
	MaxBytes     int64 // 0: no bound
	// Now is the database's now for the statement (nil: PostgreSQL's).
	Now *time.Time
	// Epoch is the placement epoch the queue was routed with (nil: no
	// shards, nothing checked); another one fails the pop as moved
	// (*MovedError), nothing claimed.
	Epoch *int64
}

// RunPop runs the pop statement p names (popStatement) and reads its rows:
// the claimed messages, their payloads as stored, in the order the
// statement answers them.
func (s *Store) RunPop(ctx context.Context, in PopParams) (PopRows, error) {
	p := popParams{QueueID: in.QueueID, Group: in.Group, Partitions: in.Partitions, Batch: in.Batch, LeaseID: s.ids.New(),
		LeaseSeconds: in.LeaseSeconds, AutoAck: in.AutoAck, Now: in.Now, MaxBytes: in.MaxBytes, Epoch: in.Epoch}
	if p.MaxBytes <= 0 {
		p.MaxBytes = math.MaxInt64
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	name, args := popStatement(p, in.Partition)
	rows, err := s.pool.Query(ctx, text(name), args...)
	if err != nil {
		return PopRows{}, movedOr(err)
	}
	defer rows.Close()
	out := PopRows{LeaseID: p.LeaseID}
	for rows.Next() {
		r, err := scanPopRow(rows)
		if err != nil {
			return PopRows{}, err
		}
		out.Rows = append(out.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return PopRows{}, movedOr(err)
	}
	return out, nil
}

// scanPopRow reads one row of a pop statement (popLease's columns), and
// into extra any columns after them.
func scanPopRow(rows pgx.Rows, extra ...any) (PopRow, error) {
	var r PopRow
	var payload []byte
	var sealed bool
	dst := append([]any{&r.PartitionID, &r.Partition, &r.RetryCount, &r.ID, &r.TransactionID, &r.TraceID, &payload,
		&sealed, &r.ProducerSub, &r.CreatedAt, &r.Seq, &r.LeaseExpiresAt}, extra...)
	if err := rows.Scan(dst...); err != nil {
		return PopRow{}, err
	}
	r.Payload = crypt.Stored(payload, sealed)
	return r, nil
}

// lockQueueSQL serialises a group's subscription against partition creation
// (see createPartitionsSQL) and returns the queue's id. $3, when set, is
// the transaction's lock_timeout (LockWait), set before the first lock:
// the subscription's cursor rows check their partitions' keys (FOR KEY
// SHARE), which waits on a partition row held FOR UPDATE elsewhere, and a
// subscription waiting there holds the queue row, which every writer
// creating a partition or a statistics row of the queue needs.
const lockQueueSQL = `SELECT id::text FROM queen.queues WHERE tenant_id = $1 AND name = $2
	AND (SELECT $3::text IS NULL OR set_config('lock_timeout', $3, true) <> '') FOR UPDATE`

// subscribeSQL records a group's subscription to a queue (the first one
// wins; later modes are ignored, as in Queen) and gives the group a cursor
// row in every partition: at the start for mode all, else after the last
// message created at or before the subscription instant.
const subscribeSQL = `
WITH sub AS (
	INSERT INTO queen.consumer_groups_metadata
		(tenant_id, consumer_group, queue_name, subscription_mode, subscription_timestamp, created_at)
	VALUES ($1, $3, $4, $5, coalesce($6::timestamptz, $7::timestamptz, now()), coalesce($7::timestamptz, now()))
	ON CONFLICT DO NOTHING
	RETURNING subscription_mode, subscription_timestamp
),
mode AS (
	SELECT subscription_mode, subscription_timestamp FROM sub
	UNION ALL
	SELECT subscription_mode, subscription_timestamp FROM queen.consumer_groups_metadata
	WHERE tenant_id = $1 AND consumer_group = $3 AND queue_name = $4
		AND partition_name = '' AND namespace = '' AND task = ''
	LIMIT 1
)
INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, last_consumed_seq, created_at, epoch)
SELECT p.id, p.queue_id, $3,
	CASE WHEN m.subscription_mode = 'all' THEN 0
	ELSE coalesce((SELECT max(x.seq) FROM queen.messages x
		WHERE x.partition_id = p.id AND x.created_at <= m.subscription_timestamp), 0) END,
	coalesce($7::timestamptz, now()), p.epoch
FROM queen.partitions p, mode m
WHERE p.queue_id = $2
ON CONFLICT DO NOTHING`

// subscribeParams are subscribeSQL's arguments, $1 to $7 (lockQueueSQL
// takes Tenant and Queue).
type subscribeParams struct {
	Tenant, QueueID, Group, Queue, Mode string
	From                                *time.Time
	Now                                 *time.Time
}

// SubscribeParams are a subscription's arguments as its caller names
// them: Mode is "all", "new" or "from" (with From), already decided.
// LockWait bounds each row-lock wait of the subscription (LockWait()); ""
// leaves the session's lock_timeout. A wait that ran out fails with 55P03
// (LockTimedOut) and nothing written.
type SubscribeParams struct {
	Tenant, Queue, Group, Mode string
	From                       *time.Time
	Now                        *time.Time
	LockWait                   string
}

// Subscribe records the group's subscription to the queue and gives it its
// cursor rows (lockQueueSQL, then subscribeSQL, in one transaction). It returns the queue's id; ErrNotFound: no such queue.
func (s *Store) Subscribe(ctx context.Context, in SubscribeParams) (string, error) {
	p := subscribeParams{Tenant: in.Tenant, Group: in.Group, Queue: in.Queue, Mode: in.Mode, From: in.From, Now: in.Now}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var wait *string
		if in.LockWait != "" {
			wait = &in.LockWait
		}
		if err := tx.QueryRow(ctx, lockQueueSQL, p.Tenant, p.Queue, wait).Scan(&p.QueueID); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		_, err := tx.Exec(ctx, text("subscribe"), argsOf(p)...)
		return err
	})
	if err != nil {
		return "", err
	}
	return p.QueueID, nil
}

// queuesForSQL lists tenant $1's queues of namespace $2 and task $3 (empty:
// any),
// highest priority first.
const queuesForSQL = `SELECT name FROM queen.queues
		WHERE tenant_id = $1 AND ($2 = '' OR namespace = $2) AND ($3 = '' OR task = $3)
		ORDER BY priority DESC, name`

// QueuesFor lists the tenant's queues matching a namespace and/or task,
// highest priority first: the order a discovery pop tries them in.
func (s *Store) QueuesFor(ctx context.Context, tenant, namespace, task string) ([]string, error) {
	rows, err := s.pool.Query(ctx, queuesForSQL, tenant, namespace, task)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// releaseSQL gives back every live lease held by a token without moving any
// cursor. Only claims nobody was served are released this way (the pop's
// client had gone), so the partition gets its turn back: lease_acquired_at
// is cleared, which puts it first in the claim order, where it was (a
// wildcard pop claims the least recently claimed partition). Keeping the
// claim's time would send it to the back, and an abandoned client would
// cost it a whole round of other partitions' turns.
//
// Fence (fence.go), as extendSQL's: a lease on a frozen cursor row fails
// the statement as moved, nothing released (a release written on the
// source after its freeze would not reach the destination); one that
// waited behind the freeze is rechecked against the frozen row. A lease
// names no queue, so no epoch is routed: every live row is at a positive
// one (always 1 without shards).
const releaseSQL = `
UPDATE queen.partition_consumers pc SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL
WHERE pc.worker_id = $1 AND pc.lease_expires_at > coalesce($2::timestamptz, now())
	AND (pc.epoch > 0 OR queen.fence_moved(pc.queue_id))`

// Release gives back every live lease held by leaseID: the messages are
// redelivered at once. Used when a pop's client went away after the claim
// committed. A lease of a frozen queue is a *MovedError, nothing released.
func (s *Store) Release(ctx context.Context, leaseID string) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, releaseSQL, leaseID, s.dbNow())
	return tag.RowsAffected(), movedOr(err)
}
