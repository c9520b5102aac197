package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueStatsLock is the advisory lock id of the queue-statistics leader.
const QueueStatsLock = 737003

// queueStatsChunk is how many queues one refresh statement counts: a
// statement's time follows its queues' partitions, and stays far inside
// the statement timeout. At 500 queues of 100 partitions each its sorts
// spilled to disk under the default work_mem (560 ms a statement, against
// 210 ms for 100 queues).
const queueStatsChunk = 100

// queueIDsAfterSQL pages through every tenant's queues by id.
const queueIDsAfterSQL = `SELECT id::text FROM queen.queues WHERE id > $1::uuid ORDER BY id LIMIT $2`

// refreshQueueStatsSQL counts queues $1 at $2 and replaces their rows of
// queen.queue_stats (migration 018). It reads partitions, cursors and
// counters, never a message but what a live lease holds: a pass every few
// seconds must not cost the backlog. So pending is what the sequence says
// was pushed past each partition's furthest cursor, capped by what the
// partition stores: exact but for messages deleted unconsumed (retention,
// eviction, the delete route) and seqs a deduplicated row left unused,
// which count until a cursor passes them, as in the depth route and the
// lists (seqPendingSQL). The other figures are the lists'
// (queueSummariesSQL), with the queue-mode depth by the sequence, the
// partitions holding dead letters and the live leases. A queue with no
// partition gets a row of zeros; a queue deleted meanwhile gets none. Only
// a queue whose counts changed is proposed for the upsert: ON CONFLICT DO
// UPDATE locks (and logs a lock of) the row it meets even when its WHERE
// is false, 50 B of WAL a queue a pass.
const refreshQueueStatsSQL = `
INSERT INTO queen.queue_stats AS t (queue_id, partitions, messages, pending, processing, dlq, queue_dlq, depth,
	dlq_partitions, leases, leased_partitions, lease_batch, lease_acked, refreshed_at)
SELECT n.* FROM (
	SELECT q.id AS queue_id, coalesce(s.partitions, 0) AS partitions, coalesce(s.messages, 0) AS messages,
		coalesce(s.pending, 0) AS pending, coalesce(s.processing, 0) AS processing, coalesce(s.dlq, 0) AS dlq,
		coalesce(s.queue_dlq, 0) AS queue_dlq, coalesce(s.depth, 0) AS depth, coalesce(s.dlq_partitions, 0) AS dlq_partitions,
		coalesce(ls.leases, 0) AS leases, coalesce(ls.partitions, 0) AS leased_partitions,
		coalesce(ls.batch, 0) AS lease_batch, coalesce(ls.acked, 0) AS lease_acked,
		coalesce($2::timestamptz, now()) AS refreshed_at
	FROM queen.queues q
	LEFT JOIN (` + queueCountsWithSQL + `
		SELECT p.queue_id, count(*)::int AS partitions,
			coalesce(sum(p.appended - coalesce(d.n, 0)), 0)::bigint AS messages,
			coalesce(sum(` + seqPendingSQL + `), 0)::bigint AS pending,
			` + queueProcessingSQL + ` AS processing,
			coalesce(sum(da.n), 0)::bigint AS dlq, coalesce(sum(df.n), 0)::bigint AS queue_dlq,
			coalesce(sum(p.last_seq - coalesce(pc.last_consumed_seq, 0)), 0)::bigint AS depth,
			count(*) FILTER (WHERE da.n > 0)::int AS dlq_partitions` + queueCountsFromSQL + `
	) s ON s.queue_id = q.id
	LEFT JOIN (
		SELECT pc.queue_id, count(DISTINCT pc.worker_id) AS leases, count(DISTINCT pc.partition_id) AS partitions,
			sum(pc.batch_size) AS batch, sum(pc.acked_count) AS acked
		FROM queen.partition_consumers pc
		WHERE pc.queue_id = ANY($1::uuid[]) AND pc.lease_expires_at > coalesce($2::timestamptz, now())
		GROUP BY pc.queue_id
	) ls ON ls.queue_id = q.id
	WHERE q.id = ANY($1::uuid[])
) n
LEFT JOIN queen.queue_stats cur ON cur.queue_id = n.queue_id
WHERE cur.queue_id IS NULL
	OR (cur.partitions, cur.messages, cur.pending, cur.processing, cur.dlq, cur.queue_dlq, cur.depth, cur.dlq_partitions,
		cur.leases, cur.leased_partitions, cur.lease_batch, cur.lease_acked)
	IS DISTINCT FROM (n.partitions, n.messages, n.pending, n.processing, n.dlq, n.queue_dlq, n.depth, n.dlq_partitions,
		n.leases, n.leased_partitions, n.lease_batch, n.lease_acked)
ON CONFLICT (queue_id) DO UPDATE SET partitions = excluded.partitions, messages = excluded.messages,
	pending = excluded.pending, processing = excluded.processing, dlq = excluded.dlq, queue_dlq = excluded.queue_dlq,
	depth = excluded.depth, dlq_partitions = excluded.dlq_partitions, leases = excluded.leases,
	leased_partitions = excluded.leased_partitions, lease_batch = excluded.lease_batch, lease_acked = excluded.lease_acked,
	refreshed_at = excluded.refreshed_at`

// queueStatsPassSQL records that a complete refresh began at $1: every row
// of queen.queue_stats holds as of then, written or left unchanged.
const queueStatsPassSQL = `INSERT INTO queen.queue_stats_pass (counted_since) VALUES ($1)
ON CONFLICT (one) DO UPDATE SET counted_since = greatest(queen.queue_stats_pass.counted_since, excluded.counted_since)`

// dbNowSQL is the database's now (or the injected one): when a pass begins.
const dbNowSQL = `SELECT coalesce($1::timestamptz, now())`

// StatsHorizon is where a complete refresh began, in transactions: every
// transaction below it had ended, so each of its row versions was counted
// by that refresh (if its queue was counted). The zero value asks for a
// full pass.
type StatsHorizon struct {
	xmin int64 // pg_snapshot_xmin at the pass's start, with its epoch
}

// statsHorizonSQL is the oldest transaction still running now: a row
// version written by any transaction below it is visible to every later
// snapshot.
const statsHorizonSQL = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`

// statsHorizonReach is how far back (in transactions) an incremental pass
// trusts a horizon: row versions carry 32-bit xids, compared modulo 2^32,
// so a horizon older than 2^31 transactions would be misread; past 2^30 a
// full pass runs instead.
const statsHorizonReach = 1 << 30

// changedQueuesSQL lists the queues whose counts may differ from their
// row of queen.queue_stats since horizon $1 (the low 32 bits of a
// StatsHorizon): a row version of their partitions, cursors, dead-letter
// or delete counters, or of their stats row itself (a delete of a
// partition or of a group's cursors touches it), written by a transaction
// at or above the horizon; a live lease at the last count (leases end
// with time, writing nothing); or no stats row yet. Every other queue's
// rows were all counted by a complete pass, so its counts still hold. It
// reads the tables' rows, not their indexes, once: a few pages per
// thousand partitions, against a count's dozen buffer hits per partition.
var changedQueuesSQL = `
SELECT DISTINCT c.queue_id::text FROM (
	SELECT p.queue_id FROM queen.partitions p WHERE ` + xminAtOrAbove("p") + `
	UNION ALL SELECT pc.queue_id FROM queen.partition_consumers pc WHERE ` + xminAtOrAbove("pc") + `
	UNION ALL SELECT p.queue_id FROM queen.dlq_counts d JOIN queen.partitions p ON p.id = d.partition_id WHERE ` + xminAtOrAbove("d") + `
	UNION ALL SELECT p.queue_id FROM queen.message_deletes d JOIN queen.partitions p ON p.id = d.partition_id WHERE ` + xminAtOrAbove("d") + `
	UNION ALL SELECT st.queue_id FROM queen.queue_stats st WHERE st.leases > 0 OR st.processing > 0 OR ` + xminAtOrAbove("st") + `
	UNION ALL SELECT q.id FROM queen.queues q WHERE NOT EXISTS (SELECT 1 FROM queen.queue_stats st WHERE st.queue_id = q.id)
) c ORDER BY 1`

// xminAtOrAbove is true when table alias t's row version was written by a
// transaction at or above the horizon $1 (its low 32 bits): its age is
// at most the horizon's. age() is xid arithmetic modulo 2^32 against one
// reference for the whole statement, a frozen row's age is the largest,
// and it costs a row far less than comparing the xid's text.
func xminAtOrAbove(t string) string {
	return `age(` + t + `.xmin) <= (SELECT age($1::bigint::text::xid))`
}

// RefreshQueueStats recounts every queue of every tenant into the
// snapshot, queueStatsChunk queues a statement, each in autocommit, and
// returns how many queues it counted. A failed chunk stops the pass; the
// next one starts again from the first queue.
func (lead *Leader) RefreshQueueStats(ctx context.Context) (int, error) {
	n, _, err := lead.s.refreshQueueStats(ctx, lead.conn, StatsHorizon{})
	return n, err
}

// RefreshChangedQueueStats is RefreshQueueStats counting only the queues
// that changed since the complete pass that answered since
// (changedQueuesSQL); the zero since, or one too old, counts every queue.
// It answers the horizon of this pass, for the next one, once the pass is
// complete; after an error, since stays the one to pass.
func (lead *Leader) RefreshChangedQueueStats(ctx context.Context, since StatsHorizon) (int, StatsHorizon, error) {
	return lead.s.refreshQueueStats(ctx, lead.conn, since)
}

// RefreshQueueStats is Leader.RefreshQueueStats on a pooled connection,
// for tests and tools that want the snapshot current now.
func (s *Store) RefreshQueueStats(ctx context.Context) (int, error) {
	n, _, err := s.refreshQueueStats(ctx, s.pool, StatsHorizon{})
	return n, err
}

// RefreshChangedQueueStats is Leader.RefreshChangedQueueStats on a pooled
// connection, for tests.
func (s *Store) RefreshChangedQueueStats(ctx context.Context, since StatsHorizon) (int, StatsHorizon, error) {
	return s.refreshQueueStats(ctx, s.pool, since)
}

// refreshQueueStats records when and from which transaction the pass
// begins, counts the queues (all, or those changed since), and records the
// complete pass.
func (s *Store) refreshQueueStats(ctx context.Context, db querier, since StatsHorizon) (int, StatsHorizon, error) {
	var began time.Time
	var next StatsHorizon
	bctx, cancel := s.bound(ctx)
	err := db.QueryRow(bctx, dbNowSQL, s.dbNow()).Scan(&began)
	if err == nil {
		err = db.QueryRow(bctx, statsHorizonSQL).Scan(&next.xmin)
	}
	cancel()
	if err != nil {
		return 0, since, err
	}
	var n int
	if since.xmin == 0 || next.xmin-since.xmin > statsHorizonReach {
		n, err = s.countAllQueues(ctx, db)
	} else {
		n, err = s.countChangedQueues(ctx, db, since)
	}
	if err != nil {
		return n, since, err
	}
	bctx, cancel = s.bound(ctx)
	defer cancel()
	if _, err := db.Exec(bctx, queueStatsPassSQL, began); err != nil {
		return n, since, err
	}
	return n, next, nil
}

// countAllQueues counts every queue, paging by id.
func (s *Store) countAllQueues(ctx context.Context, db querier) (int, error) {
	after, n := "00000000-0000-0000-0000-000000000000", 0
	for {
		ids, err := s.queueIDsAfter(ctx, db, after)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		if err := s.countQueues(ctx, db, ids); err != nil {
			return n, err
		}
		n += len(ids)
		after = ids[len(ids)-1]
	}
}

// countChangedQueues counts the queues changed since the horizon.
func (s *Store) countChangedQueues(ctx context.Context, db querier, since StatsHorizon) (int, error) {
	bctx, cancel := s.bound(ctx)
	rows, err := db.Query(bctx, changedQueuesSQL, since.xmin%(1<<32))
	var ids []string
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	cancel()
	if err != nil {
		return 0, err
	}
	for i := 0; i < len(ids); i += queueStatsChunk {
		if err := s.countQueues(ctx, db, ids[i:min(i+queueStatsChunk, len(ids))]); err != nil {
			return i, err
		}
	}
	return len(ids), nil
}

// countQueues runs refreshQueueStatsSQL for ids, in autocommit.
func (s *Store) countQueues(ctx context.Context, db querier, ids []string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := db.Exec(ctx, refreshQueueStatsSQL, ids, s.dbNow())
	return err
}

func (s *Store) queueIDsAfter(ctx context.Context, db querier, after string) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := db.Query(ctx, queueIDsAfterSQL, after, queueStatsChunk)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// QueueStats is the snapshot of a tenant's queues: each queue's counts as
// of its last refresh, the tenant's totals, and the oldest refresh among
// them.
type QueueStats struct {
	Queues []QueueInfo
	// Leases sums the queues' live leases; DLQ the dead letters (Total)
	// and the partitions holding them.
	Leases LeaseStats
	DLQ    DLQStats
	// Oldest is the oldest refresh of the queues listed; zero when none
	// was ever counted.
	Oldest time.Time
}

// queueStatsSQL lists the tenant's queues matching the filter with their
// snapshot (zeros for a queue created since the last refresh).
const queueStatsSQL = `SELECT ` + queueColumns + `,
	coalesce(st.partitions, 0), coalesce(st.messages, 0), coalesce(st.pending, 0), coalesce(st.processing, 0),
	coalesce(st.dlq, 0), coalesce(st.queue_dlq, 0), coalesce(st.dlq_partitions, 0),
	coalesce(st.leases, 0), coalesce(st.leased_partitions, 0), coalesce(st.lease_batch, 0), coalesce(st.lease_acked, 0),
	CASE WHEN st.queue_id IS NOT NULL THEN greatest(st.refreshed_at, (SELECT counted_since FROM queen.queue_stats_pass)) END
FROM queen.queues q LEFT JOIN queen.queue_stats st ON st.queue_id = q.id
WHERE q.tenant_id = $1 AND ($2 = '' OR q.namespace = $2) AND ($3 = '' OR q.task = $3) AND ($4 = '' OR q.name = $4)
ORDER BY q.created_at DESC, q.id DESC`

// SnapshotQueues lists the tenant's queues matching f (its Limit and
// Offset are ignored) with the counts of the snapshot, reading one row per
// queue whatever its partitions and backlog.
func (s *Store) SnapshotQueues(ctx context.Context, tenant string, f QueueFilter) (QueueStats, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, queueStatsSQL, tenant, f.Namespace, f.Task, f.Name)
	if err != nil {
		return QueueStats{}, err
	}
	defer rows.Close()
	var out QueueStats
	for rows.Next() {
		var info QueueInfo
		var dlqParts int64
		var l LeaseStats
		var at *time.Time
		dest := append(queueScanTargets(&info.Queue), &info.PartitionCount, &info.Messages, &info.Pending,
			&info.Processing, &info.DLQ, &info.QueueDLQ, &dlqParts, &l.Active, &l.Partitions, &l.BatchSize, &l.Acked, &at)
		if err := rows.Scan(dest...); err != nil {
			return QueueStats{}, err
		}
		out.Queues = append(out.Queues, info)
		out.DLQ.Total, out.DLQ.Partitions = out.DLQ.Total+info.DLQ, out.DLQ.Partitions+dlqParts
		out.Leases.Active, out.Leases.Partitions = out.Leases.Active+l.Active, out.Leases.Partitions+l.Partitions
		out.Leases.BatchSize, out.Leases.Acked = out.Leases.BatchSize+l.BatchSize, out.Leases.Acked+l.Acked
		if at != nil && (out.Oldest.IsZero() || at.Before(out.Oldest)) {
			out.Oldest = *at
		}
	}
	return out, rows.Err()
}
