package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AckItem is one acknowledgement.
type AckItem struct {
	TransactionID string
	PartitionID   string
	Status        string // completed (default), failed, retry, dlq
	LeaseID       string // "" skips the token check (the lease must still be live)
	Error         string
	// Epoch is the placement epoch the router found the partition's queue
	// at (shards configured); 0 checks nothing. Never on the wire.
	Epoch int64
}

// AckResult is the outcome of one acknowledgement.
type AckResult struct {
	Index         int
	TransactionID string
	Success       bool
	Error         string
	QueueName     string
	PartitionName string
	LeaseReleased bool
	DLQ           bool
}

// Ack errors reported per item.
const (
	ErrMsgNotFound      = "Message not found"
	ErrInvalidLease     = "Invalid or expired lease"
	ErrAlreadyCommitted = "already committed: the group's cursor is past this message"
	ErrNotOwned         = "partition not owned by tenant"
)

// NormalizeAckStatus maps Queen's status spellings to completed, failed,
// retry or dlq.
func NormalizeAckStatus(s string) string {
	switch strings.ToLower(s) {
	case "", "completed", "success", "acked", "ok":
		return "completed"
	case "retry":
		return "retry"
	case "dlq":
		return "dlq"
	}
	return "failed"
}

// AckGroup is the consumer group an ack's statements run under: group ""
// is queue mode (QueueModeGroup).
func AckGroup(group string) string {
	if group == "" {
		return QueueModeGroup
	}
	return group
}

// Bound applies the client-side statement bound (TxTimeout), so a database
// that stopped answering fails the call instead of hanging it.
func (s *Store) Bound(ctx context.Context) (context.Context, context.CancelFunc) { return s.bound(ctx) }

// AllCompletedAndDistinct reports whether items are completions only, no
// (partition, transactionId) twice: what one ackCompletedSQL (AckCompletions)
// takes; anything else is a general batch (AckRead, AckWrite).
func AllCompletedAndDistinct(items []AckItem) bool { return allCompletedAndDistinct(items) }

func allCompletedAndDistinct(items []AckItem) bool {
	type key struct{ pid, txid string }
	seen := make(map[key]bool, len(items))
	for _, it := range items {
		k := key{it.PartitionID, it.TransactionID}
		if NormalizeAckStatus(it.Status) != "completed" || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}

// ackCompletedSQL completes a batch of messages in one statement and answers
// per input row: a verdict (ok, not_found, not_owned, invalid_lease,
// committed), the queue and partition names, and whether this item's
// completion released the lease. Each row names its own consumer group and
// tenant, so one statement carries the completions of many requests (the
// ack combiner); no (partition, transactionId, group) may appear twice.
//
// Invariant (lease compare-and-set): the cursor rows are locked FOR UPDATE
// in (partition id, group) order, and an item counts only while the lease
// is live in database time, held by the item's leaseId when it names one,
// and covers the item (seq <= lease_max_seq). A consumer whose lease
// expired cannot complete a message that was handed to someone else. The
// rule is queen.ack_verdict (migration 019), which ackReadSQL calls too;
// its ignore_lease is false here, true only as the ack-ignores-lease canary
// rewrites the statement (canaries.go).
//
// Invariant (cursor moves forward only): the cursor moves to the highest
// accepted seq, never back; the lease ends when it reaches lease_max_seq.
//
// The update changes no indexed column, so it can be HOT (migration 013
// leaves room on the pages): the lease ends by its expiry going NULL, and
// worker_id keeps the ended lease's token, which every reader of it
// (extend, release, transactions, the listings) ignores without a live
// expiry.
//
// Each distinct partition's name, queue and owner are read once (owners),
// not once per item: a combined ack names tens of messages of a few
// partitions, and those two lookups were about half its buffer hits.
//
// Lock wait ($7, the combiner's rowLockWait; NULL keeps the session's): set in
// the CTE that locks, as appendSQL does, so a cursor row held elsewhere
// fails this statement (55P03, nothing written) instead of holding its
// combiner slot.
//
// Fence ($8, one epoch per row; NULL without shards, which checks nothing):
// a locked cursor row at another epoch than its rows were routed with
// fails the statement as moved (fence.go), nothing written; the check is in
// the locking scan, so an ack that waited behind a freeze fails too.
const ackCompletedSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[], $8::bigint[])
		WITH ORDINALITY AS v(pid, txid, lease, grp, tenant, epoch, ord)
),
owners AS MATERIALIZED (
	SELECT p.id AS pid, p.name AS pname, q.name AS qname, q.tenant_id
	FROM queen.partitions p
	JOIN queen.queues q ON q.id = p.queue_id
	WHERE p.id IN (SELECT DISTINCT pid FROM input)
),
found AS (
	SELECT i.ord, i.pid, i.lease, i.grp, m.id, m.seq, m.created_at, o.pname, o.qname,
		o.tenant_id = i.tenant AS owned
	FROM input i
	JOIN queen.messages m ON m.partition_id = i.pid AND m.transaction_id = i.txid
	JOIN owners o ON o.pid = i.pid
),
cur AS (
	SELECT pc.partition_id, pc.consumer_group, pc.last_consumed_seq, pc.worker_id, pc.lease_expires_at, pc.lease_max_seq
	FROM queen.partition_consumers pc
	WHERE (pc.partition_id, pc.consumer_group) IN (SELECT pid, grp FROM found WHERE owned)
		AND (SELECT $7::text IS NULL OR set_config('lock_timeout', $7, true) <> '')
		AND ($8::bigint[] IS NULL OR pc.epoch = ALL (SELECT i.epoch FROM input i WHERE i.pid = pc.partition_id)
			OR queen.fence_moved(pc.queue_id))
	ORDER BY pc.partition_id, pc.consumer_group
	FOR UPDATE
),
clock AS (SELECT coalesce($6::timestamptz, now()) AS now),
judged AS (
	SELECT f.*, CASE
		WHEN NOT f.owned THEN 'not_owned'
		WHEN c.partition_id IS NULL THEN 'invalid_lease'
		ELSE queen.ack_verdict(f.seq, c.last_consumed_seq, c.worker_id, c.lease_expires_at, c.lease_max_seq,
			f.lease, clock.now, false) END AS verdict
	FROM found f LEFT JOIN cur c ON c.partition_id = f.pid AND c.consumer_group = f.grp, clock
),
accepted AS (
	SELECT pid, grp, max(seq) AS seq, count(*) AS n, (array_agg(id ORDER BY seq DESC))[1] AS id,
		(array_agg(created_at ORDER BY seq DESC))[1] AS created_at
	FROM judged WHERE verdict = 'ok' GROUP BY pid, grp
),
moved AS (
	UPDATE queen.partition_consumers pc SET
		last_consumed_seq = a.seq, last_consumed_id = a.id, last_consumed_created_at = a.created_at,
		acked_count = pc.acked_count + a.n,
		lease_expires_at = CASE WHEN a.seq >= pc.lease_max_seq THEN NULL ELSE pc.lease_expires_at END,
		batch_retry_count = CASE WHEN a.seq >= pc.lease_max_seq THEN 0 ELSE pc.batch_retry_count END,
		total_messages_consumed = pc.total_messages_consumed + a.n,
		total_batches_consumed = pc.total_batches_consumed + CASE WHEN a.seq >= pc.lease_max_seq THEN 1 ELSE 0 END,
		last_consumed_at = clock.now
	FROM accepted a, clock
	WHERE pc.partition_id = a.pid AND pc.consumer_group = a.grp
	RETURNING pc.partition_id, pc.consumer_group, a.seq AS top, pc.lease_expires_at IS NULL AS released
)
SELECT i.ord, coalesce(j.verdict, 'not_found'), coalesce(j.qname, ''), coalesce(j.pname, ''),
	coalesce(mv.released AND j.seq = mv.top, false)
FROM input i
LEFT JOIN judged j ON j.ord = i.ord
LEFT JOIN moved mv ON mv.partition_id = j.pid AND mv.consumer_group = j.grp
WHERE ($8::bigint[] IS NULL OR NOT EXISTS (` + ackPartitionFenceSQL + `))
ORDER BY i.ord`

// ackPartitionFenceSQL is the acks' second fence check, on the partition
// rows their items name (input's pid and routed epoch): one at another
// epoch fails the statement as moved. The cursor row's check misses a
// move's source whose cleanup deleted the cursor rows before the messages
// and partitions: the ack then found no lease and was refused for good
// (invalid lease, then not found) while the lease lived on the
// destination, so its message was delivered again; the frozen partition
// row turns that into moved, and the broker routes again. Read once per
// statement (an uncorrelated subquery); never without shards (the epochs
// array is NULL and the OR stops before it).
//
// The raise is inside a CASE, one expression over both rows: as three
// ANDed conditions the planner may push fence_moved(p.queue_id), which
// names p alone, down to the scan of partitions, ahead of the epoch
// comparison, and fail every ack as moved (seen once in make
// bench-shards: an ack of a queue that was not moving answered 503).
const ackPartitionFenceSQL = `SELECT 1 FROM queen.partitions p JOIN input x ON x.pid = p.id
	WHERE CASE WHEN x.epoch <> 0 AND p.epoch <> x.epoch THEN queen.fence_moved(p.queue_id) ELSE false END`

type ackCompletedParams struct {
	PartitionIDs, TransactionIDs, LeaseIDs, Groups, Tenants []string
	Now                                                     *time.Time
	LockWait                                                string
	Epochs                                                  []int64
}

var ackVerdicts = map[string]string{
	"not_found": ErrMsgNotFound, "not_owned": ErrNotOwned, "invalid_lease": ErrInvalidLease,
	"committed": ErrAlreadyCommitted, "ok": "",
}

// AckVerdictError is the per-item error a verdict of queen.ack_verdict
// answers ("" for ok), as AckReadRow carries them.
func AckVerdictError(verdict string) string { return ackVerdicts[verdict] }

// AckRow is one completion as AckCompletions takes it: the item (its Epoch
// the placement epoch the row's queue was routed with; 0: no shards) and
// whose it is.
type AckRow struct {
	AckItem
	Tenant, Group string
}

// AckCompletions runs one ackCompletedSQL over rows (completions of one or
// more requests, no (partition, transactionId, group) twice) and answers one
// result per row, in order, Index the row's. It waits at most LockWait for
// a cursor row. It neither combines nor retries.
func (s *Store) AckCompletions(ctx context.Context, rows []AckRow) ([]AckResult, error) {
	return s.ackStatement(ctx, rows)
}

// ackStatement runs ackCompletedSQL over rows and answers one result per
// row, in order.
func (s *Store) ackStatement(ctx context.Context, rows []AckRow) ([]AckResult, error) {
	p := ackCompletedParams{Now: s.dbNow(), LockWait: LockWait()}
	for _, r := range rows {
		p.PartitionIDs = append(p.PartitionIDs, r.PartitionID)
		p.TransactionIDs = append(p.TransactionIDs, r.TransactionID)
		p.LeaseIDs = append(p.LeaseIDs, r.LeaseID)
		p.Groups = append(p.Groups, r.Group)
		p.Tenants = append(p.Tenants, r.Tenant)
	}
	p.Epochs = ackEpochs(rows)
	res, err := s.pool.Query(ctx, text("ack.completed"), argsOf(p)...)
	if err != nil {
		return nil, movedOr(err)
	}
	defer res.Close()
	out := make([]AckResult, len(rows))
	for res.Next() {
		var ord int64
		var verdict string
		var r AckResult
		if err := res.Scan(&ord, &verdict, &r.QueueName, &r.PartitionName, &r.LeaseReleased); err != nil {
			return nil, err
		}
		r.Index = int(ord - 1)
		r.TransactionID = rows[r.Index].TransactionID
		r.Error = ackVerdicts[verdict]
		r.Success = verdict == "ok"
		if verdict == "not_found" || verdict == "not_owned" {
			r.QueueName, r.PartitionName = "", ""
		}
		out[r.Index] = r
	}
	return out, movedOr(res.Err())
}

// ackEpochs are the rows' routed epochs, nil when none is set (no shards:
// the statement checks nothing).
func ackEpochs(rows []AckRow) []int64 {
	return routedEpochs(len(rows), func(i int) int64 { return rows[i].Epoch })
}

// AckEpochs are items' routed epochs as AckReadParams.Epochs takes them:
// nil when none is set (no shards: the read checks nothing).
func AckEpochs(items []AckItem) []int64 {
	return routedEpochs(len(items), func(i int) int64 { return items[i].Epoch })
}

// routedEpochs are the n epochs at gives, nil when all are 0 (no
// allocation without shards).
func routedEpochs(n int, at func(int) int64) []int64 {
	var epochs []int64
	for i := range n {
		if e := at(i); e != 0 && epochs == nil {
			epochs = make([]int64, n)
		}
		if epochs != nil {
			epochs[i] = at(i)
		}
	}
	return epochs
}

// ackReadSQL reads, for a general ack batch inside a transaction, each
// item's message, its group's cursor row and the lease rule's verdict on
// the item against that row (queen.ack_verdict, the rule ackCompletedSQL
// applies): as read, and as it would be once the lease is gone, which an
// earlier item of the same request can do. It locks the cursor rows FOR
// UPDATE in partition id order (the global lock order: cursor rows, then
// partition rows). $6 is the items' lease ids; ignore_lease is false, true
// only as the ack-ignores-lease canary rewrites the statement.
//
// Fence ($7, one epoch per item; NULL without shards, which checks
// nothing): a locked cursor row at another epoch than its items were routed
// with fails the statement as moved (fence.go), as in ackCompletedSQL. The
// rows stay locked until the transaction ends, so the batch's write
// (ackWriteSQL), a later statement of it, needs no check of its own.
const ackReadSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $6::text[], $7::bigint[]) WITH ORDINALITY AS v(pid, txid, lease, epoch, ord)
),
found AS (
	SELECT i.ord, i.pid, i.lease, m.id, m.seq, m.created_at, p.name AS pname, q.name AS qname, q.retry_limit,
		q.tenant_id = $4::uuid AS owned
	FROM input i
	JOIN queen.messages m ON m.partition_id = i.pid AND m.transaction_id = i.txid
	JOIN queen.partitions p ON p.id = m.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
),
cur AS (
	SELECT pc.partition_id, pc.last_consumed_seq, pc.last_consumed_id::text AS last_id, pc.last_consumed_created_at,
		pc.worker_id, pc.lease_expires_at, pc.acked_count, pc.batch_retry_count, pc.lease_max_seq
	FROM queen.partition_consumers pc
	WHERE pc.consumer_group = $3 AND pc.partition_id IN (SELECT pid FROM found WHERE owned)
		AND ($7::bigint[] IS NULL OR pc.epoch = ALL (SELECT i.epoch FROM input i WHERE i.pid = pc.partition_id)
			OR queen.fence_moved(pc.queue_id))
	ORDER BY pc.partition_id
	FOR UPDATE
),
clock AS (SELECT coalesce($5::timestamptz, now()) AS now)
SELECT i.ord, f.id IS NOT NULL, coalesce(f.owned, false), f.id::text, f.seq, f.created_at, f.pname, f.qname, f.retry_limit,
	c.partition_id IS NOT NULL, c.last_consumed_seq, c.last_id, c.last_consumed_created_at, c.worker_id,
	c.lease_expires_at, c.acked_count, c.batch_retry_count, c.lease_max_seq,
	queen.ack_verdict(f.seq, c.last_consumed_seq, c.worker_id, c.lease_expires_at, c.lease_max_seq, f.lease, clock.now, false),
	queen.ack_verdict(f.seq, c.last_consumed_seq, NULL, NULL, c.lease_max_seq, f.lease, clock.now, false)
FROM input i
LEFT JOIN found f ON f.ord = i.ord
LEFT JOIN cur c ON c.partition_id = f.pid
CROSS JOIN clock
WHERE ($7::bigint[] IS NULL OR NOT EXISTS (` + ackPartitionFenceSQL + `))
ORDER BY i.ord`

// ackWriteSQL writes back the edited cursor rows and the DLQ rows of a
// general ack batch in one statement. lease_acquired_at is left alone: a
// released partition keeps its place in the fairness order.
const ackWriteSQL = ackCursorsSQL + `,
dead AS (
	INSERT INTO queen.dead_letter_queue
		(message_id, partition_id, consumer_group, error_message, retry_count, original_created_at, failed_at)
	SELECT d.mid, d.pid, $11, d.msg, d.retries, d.created_at, coalesce($12::timestamptz, now())
	FROM unnest($13::uuid[], $14::uuid[], $15::text[], $16::int[], $17::timestamptz[]) AS d(mid, pid, msg, retries, created_at)
	ON CONFLICT (message_id, consumer_group) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM cursors), (SELECT count(*) FROM dead)`

// ackCursorsOnlySQL is ackWriteSQL for a batch that dead-letters nothing:
// without the DLQ insert, whose statement trigger (dlq_counts) would
// otherwise run for every ack.
const ackCursorsOnlySQL = ackCursorsSQL + `
SELECT (SELECT count(*) FROM cursors), 0`

// ackCursorsSQL writes back the edited cursor rows ($1-$12).
const ackCursorsSQL = `
WITH cursors AS (
	UPDATE queen.partition_consumers pc SET
		last_consumed_seq = v.seq, last_consumed_id = v.id, last_consumed_created_at = v.created_at,
		worker_id = v.worker, lease_expires_at = v.expires, acked_count = v.acked, batch_retry_count = v.retries,
		total_messages_consumed = pc.total_messages_consumed + v.completed,
		total_batches_consumed = pc.total_batches_consumed + v.batches,
		last_consumed_at = CASE WHEN v.completed > 0 THEN coalesce($12::timestamptz, now()) ELSE pc.last_consumed_at END
	FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::timestamptz[], $5::text[], $6::timestamptz[],
		$7::int[], $8::int[], $9::int[], $10::int[]) AS v(pid, seq, id, created_at, worker, expires, acked, retries, completed, batches)
	WHERE pc.partition_id = v.pid AND pc.consumer_group = $11
	RETURNING 1
)`

// AckCursorsParams is ackCursorsOnlySQL's argument list: the cursor rows a
// general ack moved, one array element per partition.
type AckCursorsParams struct {
	PartitionIDs                       []string
	Seqs                               []int64
	IDs                                []string
	CreatedAts                         []*time.Time
	Workers                            []*string
	Expires                            []*time.Time
	Acked, Retries, Completed, Batches []int
	Group                              string
	Now                                *time.Time
}

// AckDLQParams are the dead-lettered messages ackWriteSQL adds after the
// cursor rows' arguments.
type AckDLQParams struct {
	DLQMessageIDs, DLQPartitionIDs, DLQMessages []string
	DLQRetries                                  []int
	DLQCreatedAts                               []time.Time
}

// AckWriteParams is ackWriteSQL's argument list: the cursors, then the DLQ
// rows.
type AckWriteParams struct {
	AckCursorsParams
	AckDLQParams
}

// AckReadParams is ackReadSQL's argument list: the items' partitions,
// transactionIds and lease ids, their consumer group (resolved:
// QueueModeGroup for queue mode), the tenant acking and the items' routed
// epochs.
type AckReadParams struct {
	PartitionIDs, TransactionIDs []string
	Group, Tenant                string
	Now                          *time.Time
	LeaseIDs                     []string
	// Epochs are the items' routed epochs (AckEpochs; nil without shards).
	Epochs []int64
}

// AckReadRow is one item of a general ack batch as ackReadSQL read it.
// The message's fields are set when it was Found and Owned by the tenant;
// Cursor when HasCursor (the group's row in the item's partition, which
// the read locked).
type AckReadRow struct {
	Found, Owned                bool
	MessageID, Partition, Queue string
	Seq                         int64
	CreatedAt                   time.Time
	RetryLimit                  int
	// Verdict is queen.ack_verdict's on the item against the cursor row
	// as read; Unleased, against that row once its lease is gone.
	Verdict, Unleased string
	HasCursor         bool
	Cursor            AckCursor
}

// AckCursor is a consumer group's cursor row in one partition, as
// ackReadSQL locked it.
type AckCursor struct {
	Seq, LeaseMax      int64
	ID                 string
	CreatedAt, Expires *time.Time
	Worker             *string
	Acked, Retries     int
}

// AckRead runs ackReadSQL in tx: it locks the cursor rows of p's items in
// partition order and answers one row per item, in the items' order. It
// sets p.Now (the injected database instant); the caller's is ignored. A
// cursor row at another epoch than p.Epochs routed is a *MovedError, and
// tx must roll back.
func (s *Store) AckRead(ctx context.Context, tx pgx.Tx, p AckReadParams) ([]AckReadRow, error) {
	p.Now = s.dbNow()
	rows, err := tx.Query(ctx, text("ack.read"), argsOf(p)...)
	if err != nil {
		return nil, movedOr(err)
	}
	defer rows.Close()
	out := make([]AckReadRow, len(p.PartitionIDs))
	for rows.Next() {
		if err := scanAckRead(rows, out); err != nil {
			return nil, err
		}
	}
	return out, movedOr(rows.Err())
}

// scanAckRead reads one row of ackReadSQL into out, at its item's index.
func scanAckRead(rows pgx.Rows, out []AckReadRow) error {
	var ord int64
	var r AckReadRow
	var m struct {
		id, pname, qname, verdict, unleased *string
		seq                                 *int64
		created                             *time.Time
		limit                               *int
	}
	var c struct {
		seq, leaseMax  *int64
		id             *string
		acked, retries *int
	}
	if err := rows.Scan(&ord, &r.Found, &r.Owned, &m.id, &m.seq, &m.created, &m.pname, &m.qname, &m.limit,
		&r.HasCursor, &c.seq, &c.id, &r.Cursor.CreatedAt, &r.Cursor.Worker, &r.Cursor.Expires, &c.acked, &c.retries, &c.leaseMax,
		&m.verdict, &m.unleased); err != nil {
		return err
	}
	if r.Found && r.Owned {
		r.MessageID, r.Partition, r.Queue, r.Seq, r.CreatedAt, r.RetryLimit = *m.id, *m.pname, *m.qname, *m.seq, *m.created, *m.limit
		r.Verdict, r.Unleased = deref(m.verdict), deref(m.unleased)
	}
	if r.HasCursor {
		r.Cursor.Seq, r.Cursor.ID, r.Cursor.Acked, r.Cursor.Retries, r.Cursor.LeaseMax = *c.seq, *c.id, *c.acked, *c.retries, *c.leaseMax
	}
	out[ord-1] = r
	return nil
}

// AckWrite writes back a general ack batch's cursor rows and DLQ rows in
// tx, one statement: ackWriteSQL, or ackCursorsOnlySQL when it
// dead-letters nothing (sparing the DLQ insert's statement trigger). It
// sets p.Now (the injected database instant); the caller's is ignored.
func (s *Store) AckWrite(ctx context.Context, tx pgx.Tx, p AckWriteParams) error {
	p.Now = s.dbNow()
	if len(p.DLQMessageIDs) == 0 {
		_, err := tx.Exec(ctx, text("ack.cursors"), argsOf(p.AckCursorsParams)...)
		return err
	}
	_, err := tx.Exec(ctx, text("ack.write"), argsOf(p)...)
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// extendSQL pushes out every live lease held by a token, of the tenant's
// queues, to at least now+seconds. An expired lease is not revived: its
// messages may already be someone else's.
//
// Fence (fence.go): a lease on a frozen cursor row (epoch < 0: its queue
// moved away, or is frozen for a move) fails the statement as moved,
// nothing extended; one that waited behind the freeze is rechecked against
// the frozen row. A lease names no queue, so no epoch is routed: every
// live row is at a positive one (always 1 without shards).
//
// With shards, $5 and $6 name the queues placed on this shard and their
// epochs (NULL without shards: every queue, unchecked): a lease of a queue
// placed elsewhere is left alone (a move's copy holds the lease rows on
// its destination before the activation, and an extension written there
// would be overwritten by the copy: a lease lost while answered renewed),
// and one of a queue placed here at another epoch fails as moved.
const extendSQL = `
UPDATE queen.partition_consumers pc
SET lease_expires_at = GREATEST(pc.lease_expires_at, coalesce($3::timestamptz, now()) + make_interval(secs => $4::int))
FROM queen.queues q
WHERE pc.queue_id = q.id AND q.tenant_id = $1
	AND pc.worker_id = $2 AND pc.lease_expires_at > coalesce($3::timestamptz, now())
	AND ($5::text[] IS NULL OR q.name = ANY ($5::text[]))
	AND (pc.epoch > 0 OR queen.fence_moved(pc.queue_id))
	AND ($5::text[] IS NULL
		OR pc.epoch = (SELECT x.e FROM unnest($5::text[], $6::bigint[]) AS x(n, e) WHERE x.n = q.name LIMIT 1)
		OR queen.fence_moved(pc.queue_id))
RETURNING pc.lease_expires_at`

// leaseQueuesSQL names the tenant's queues in which token $2 holds a live
// lease on this shard: what the router looks up the placement of before
// an extension (extendSQL's $5).
const leaseQueuesSQL = `
SELECT DISTINCT q.name FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
WHERE q.tenant_id = $1 AND pc.worker_id = $2 AND pc.lease_expires_at > coalesce($3::timestamptz, now())`

// PlacedQueue is a queue placed on the shard a statement runs on, with
// its placement epoch.
type PlacedQueue struct {
	Name  string
	Epoch int64
}

// LeaseQueues names the tenant's queues in which leaseID holds a live
// lease on this shard.
func (s *Store) LeaseQueues(ctx context.Context, tenant, leaseID string) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, text("lease.queues"), tenant, leaseID, s.dbNow())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ExtendLease extends every live lease held by leaseID. It returns how many
// partition leases it renewed and the new expiry; a lease of a frozen queue
// is a *MovedError, nothing extended.
func (s *Store) ExtendLease(ctx context.Context, tenant, leaseID string, seconds int) (int64, *time.Time, error) {
	return s.ExtendPlacedLease(ctx, tenant, leaseID, seconds, nil)
}

// ExtendPlacedLease is ExtendLease on a shard, for the queues placed on it
// only (extendSQL): placed nil extends every queue's, as without shards.
func (s *Store) ExtendPlacedLease(ctx context.Context, tenant, leaseID string, seconds int, placed []PlacedQueue) (int64, *time.Time, error) {
	var names []string
	var epochs []int64
	if placed != nil {
		names, epochs = make([]string, len(placed)), make([]int64, len(placed))
		for i, p := range placed {
			names[i], epochs[i] = p.Name, p.Epoch
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, text("lease.extend"), tenant, leaseID, s.dbNow(), seconds, names, epochs)
	if err != nil {
		return 0, nil, movedOr(err)
	}
	defer rows.Close()
	var n int64
	var exp *time.Time
	for rows.Next() {
		var t time.Time
		if err := rows.Scan(&t); err != nil {
			return 0, nil, err
		}
		n++
		if exp == nil || t.After(*exp) {
			exp = &t
		}
	}
	return n, exp, movedOr(rows.Err())
}

// partitionOwnerSQL is the tenant owning a partition.
const partitionOwnerSQL = `SELECT q.tenant_id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = $1::uuid`

// PartitionOwner is the tenant owning partition pid (the
// ack-ignores-tenant canary of queen/consume acks as it, whoever asked).
func (s *Store) PartitionOwner(ctx context.Context, pid string) (string, error) {
	var owner string
	if err := s.pool.QueryRow(ctx, partitionOwnerSQL, pid).Scan(&owner); err != nil {
		return "", fmt.Errorf("owner of partition %s: %w", pid, err)
	}
	return owner, nil
}

// partitionsHereSQL is which of the partitions $1 exist in this database
// as tenant $2's, with their queues' names.
const partitionsHereSQL = `
SELECT q.name, '', p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
WHERE p.id = ANY($1::uuid[]) AND q.tenant_id = $2`

// PartitionsHere answers which of pids are tenant's partitions in this
// database, with their queues (Partition left ""): with shards, where a
// broker sends an ack, which names its partition and not its queue. After
// a move two shards hold them; the queue's placement tells which serves.
func (s *Store) PartitionsHere(ctx context.Context, tenant string, pids []string) ([]PartitionRow, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, partitionsHereSQL, pids, tenant)
	if err != nil {
		return nil, fmt.Errorf("partitions here: %w", err)
	}
	here, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PartitionRow])
	if err != nil {
		return nil, fmt.Errorf("partitions here: %w", err)
	}
	return here, nil
}
