package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RetentionLock is the advisory lock id of the retention leader.
const RetentionLock = 737001

// Leader is a held leader lock: the session that took the advisory lock,
// on which the leader's statements run. If that session dies (its server
// was stopped in a failover, or the session was terminated), the lock is
// gone and so is every statement sent on it: a broker that lost the lock
// cannot go on acting as leader on other connections while another broker,
// which took the lock on the new primary, runs the same pass.
type Leader struct {
	s    *Store
	conn *pgxpool.Conn
	id   int64
}

// tryLeaderSQL tries the session advisory lock $1.
const tryLeaderSQL = `SELECT pg_try_advisory_lock($1)`

// TryLeader takes the session advisory lock id on a dedicated connection.
// It returns ok=false when another broker holds it; Release must be called
// when ok.
func (s *Store) TryLeader(ctx context.Context, id int64) (l *Leader, ok bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := conn.QueryRow(ctx, tryLeaderSQL, id).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, false, err
	}
	return &Leader{s: s, conn: conn, id: id}, true, nil
}

// unlockLeaderSQL releases the session advisory lock $1.
const unlockLeaderSQL = `SELECT pg_advisory_unlock($1)`

// Release gives the lock back and the session to the pool.
func (l *Leader) Release() {
	// Bounded: a session whose server stopped answering must not hold
	// the leader (and a shutdown waiting for it) until TCP gives up.
	ctx, cancel := l.s.bound(context.Background())
	defer cancel()
	if _, err := l.conn.Exec(ctx, unlockLeaderSQL, l.id); err != nil {
		// A connection that may still hold the lock must not go back
		// to the pool; closing it releases the lock server-side.
		_ = l.conn.Conn().Close(context.Background())
	}
	l.conn.Release()
}

// Session is the backend pid of the session holding the lock.
func (l *Leader) Session() uint32 { return l.conn.Conn().PgConn().PID() }

// Executor is where the leader's statements run: the session holding the
// lock, so that a pass stops when the lock is lost with its session.
func (l *Leader) Executor() Executor { return l.conn }

// retentionRule is one deletion rule, in four parts over q (queues) and p
// (partitions), with $1 the injected now (NULL: now()): which queues it
// applies to, which of their partitions qualify, and per partition a
// cutoff (rows created before it are due) and a cap (rows at or past this
// seq are kept).
type retentionRule struct {
	name, kind                       string // kind: retention_history.retention_type, as Queen names it
	queues, partitions, cutoff, kept string
}

// sql is the rule's statement (retentionSQL); the statement table
// (statements.go) builds each rule's once, as retention.<name>.
func (r retentionRule) sql() string {
	return fmt.Sprintf(retentionSQL, r.queues, r.partitions, r.cutoff, r.kept)
}

// retentionRuleSQL is the statement of the rule named name.
func retentionRuleSQL(name string) string {
	for _, r := range retentionRules {
		if r.name == name {
			return r.sql()
		}
	}
	panic("store: no retention rule " + name)
}

// noCap keeps no row by its seq: only the cutoff decides.
const noCap = "9223372036854775807"

var retentionRules = []retentionRule{
	{name: "expired", kind: "retention", queues: "q.retention_enabled AND q.retention_seconds > 0", partitions: "true",
		cutoff: "coalesce($1::timestamptz, now()) - make_interval(secs => q.retention_seconds)", kept: noCap},
	// Invariant (never delete unconsumed): a message is "completed" only when
	// every group subscribed to the queue has a cursor row in its partition
	// and every such cursor is past it. A group that subscribed but has no
	// row there yet, or a partition nobody consumes, keeps its messages.
	{name: "completed", kind: "completed_retention", queues: "q.retention_enabled AND q.completed_retention_seconds > 0",
		partitions: `NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata g
			WHERE g.tenant_id = q.tenant_id AND g.queue_name = q.name /*subscribed*/
				AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers pc
					WHERE pc.partition_id = p.id AND pc.consumer_group = g.consumer_group))`,
		cutoff: "coalesce($1::timestamptz, now()) - make_interval(secs => q.completed_retention_seconds)",
		kept:   "coalesce((SELECT min(pc.last_consumed_seq) FROM queen.partition_consumers pc WHERE pc.partition_id = p.id), 0) + 1"},
	{name: "evicted", kind: "max_wait_time_eviction", queues: "q.max_wait_time_seconds > 0", partitions: "true",
		cutoff: "coalesce($1::timestamptz, now()) - make_interval(secs => q.max_wait_time_seconds)", kept: noCap},
}

// retentionSQL deletes up to $2 messages matching one rule, records per
// queue what it deleted as retention type $3, and counts the deleted rows.
//
// Cost follows the rows it deletes, not the table: a partition's due rows
// are a prefix of its seq order (rows are stored in seq order at about
// their created_at; completed ones below the slowest cursor), so per
// qualifying partition it walks the (partition_id, seq) index from the
// start to the first row that is not due (upto), and deletes below it,
// re-checking created_at (a transaction that began earlier may commit a
// later seq). A partition with nothing due costs one index probe. Before,
// every rule seq-scanned the messages of every queue it applied to.
const retentionSQL = `
WITH cand AS (
	SELECT p.id AS pid, (%[3]s) AS cutoff, (%[4]s)::bigint AS kept
	FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
	WHERE (%[1]s) AND (%[2]s)
),
doomed AS (
	SELECT x.id FROM cand c
	CROSS JOIN LATERAL (
		SELECT least(c.kept, coalesce((SELECT m.seq FROM queen.messages m
			WHERE m.partition_id = c.pid AND m.created_at >= c.cutoff ORDER BY m.seq LIMIT 1), c.kept)) AS upto
	) b
	CROSS JOIN LATERAL (
		SELECT m.id FROM queen.messages m
		WHERE m.partition_id = c.pid AND m.seq < b.upto AND m.created_at < c.cutoff
		ORDER BY m.seq LIMIT $2
	) x
	LIMIT $2
),
d AS (
	DELETE FROM queen.messages WHERE id = ANY(ARRAY(SELECT id FROM doomed)) -- by key: never a join that scans
	RETURNING partition_id
),
h AS (
	INSERT INTO queen.retention_history (queue_id, retention_type, messages_deleted, executed_at)
	SELECT p.queue_id, $3, count(*), coalesce($1::timestamptz, now())
	FROM d JOIN queen.partitions p ON p.id = d.partition_id
	GROUP BY p.queue_id
)
SELECT count(*) FROM d`

// pruneHistorySQL forgets retention history older than a week.
const pruneHistorySQL = `DELETE FROM queen.retention_history WHERE executed_at < coalesce($1::timestamptz, now()) - interval '7 days'`

// RetentionRules names the retention rules, in the order a pass runs
// them: each is a statement RetentionRound runs.
func RetentionRules() []string {
	names := make([]string, len(retentionRules))
	for i, r := range retentionRules {
		names[i] = r.name
	}
	return names
}

// RetentionRound runs the statement of the retention rule named rule once,
// on on, in autocommit: it deletes up to batch messages the rule finds due
// (the oldest of each qualifying partition first), records them in the
// retention history, and answers how many it deleted. It is idempotent:
// the loop over rounds and rules is queen/leader's.
func (s *Store) RetentionRound(ctx context.Context, on Executor, rule string, batch int) (int64, error) {
	kind, ok := retentionKind(rule)
	if !ok {
		return 0, fmt.Errorf("store: no retention rule %q", rule)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := on.QueryRow(ctx, text("retention."+rule), s.dbNow(), batch, kind).Scan(&n)
	return n, err
}

// retentionKind is the retention_history type of the rule named name.
func retentionKind(name string) (string, bool) {
	for _, r := range retentionRules {
		if r.name == name {
			return r.kind, true
		}
	}
	return "", false
}

// PruneRetentionHistory runs pruneHistorySQL on on: it forgets retention
// history older than a week.
func (s *Store) PruneRetentionHistory(ctx context.Context, on Executor) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := on.Exec(ctx, pruneHistorySQL, s.dbNow())
	return err
}

// emptyPartitionsSQL deletes up to $2 partitions that hold no message,
// took no push for $3 days, and whose groups neither hold a lease nor
// consumed within that time. Default partitions stay (configure names
// them). SKIP LOCKED passes over a partition a push holds; a push that
// committed meanwhile moved last_activity, which the re-check under FOR
// UPDATE sees. A push whose cached id names a removed partition retries
// under a fresh id, so nothing is lost; the group cursors go with the
// partition, which held nothing left to consume. It touches the queues'
// statistics rows, so the next incremental count recounts them
// (changedQueuesSQL: a delete leaves no row version behind), and answers
// how many partitions went.
const emptyPartitionsSQL = `
WITH gone AS (
DELETE FROM queen.partitions WHERE id IN (
	SELECT p.id FROM queen.partitions p
	WHERE p.name <> 'Default'
		AND p.last_activity < coalesce($1::timestamptz, now()) - make_interval(days => $3)
		AND NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p.id)
		AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers pc WHERE pc.partition_id = p.id
			AND (pc.lease_expires_at > coalesce($1::timestamptz, now())
				OR pc.last_consumed_at > coalesce($1::timestamptz, now()) - make_interval(days => $3)))
	LIMIT $2
	FOR UPDATE OF p SKIP LOCKED)
RETURNING queue_id
), touched AS (
	UPDATE queen.queue_stats st SET refreshed_at = st.refreshed_at WHERE st.queue_id IN (SELECT queue_id FROM gone)
)
SELECT count(*) FROM gone`

// CleanupEmptyPartitions runs emptyPartitionsSQL once, on on: it removes
// up to batch empty partitions idle for days, and answers how many.
// Idempotent, like every retention rule; days must be positive.
func (s *Store) CleanupEmptyPartitions(ctx context.Context, on Executor, batch, days int) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := on.QueryRow(ctx, emptyPartitionsSQL, s.dbNow(), batch, days).Scan(&n)
	return n, err
}
