package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetentionBucket is what retention deleted in one time bucket.
type RetentionBucket struct {
	Bucket                                time.Time
	Retention, Completed, Eviction, Total int64
	Events                                int64 // history rows (one per queue per round)
}

// retentionSeriesSQL buckets tenant $1's retention history (queue $2, ""
// for all) in [$3, $4) by $5 minutes, oldest first.
const retentionSeriesSQL = `
SELECT to_timestamp(floor(extract(epoch FROM h.executed_at) / ($5 * 60)) * ($5 * 60)) AS bucket,
	coalesce(sum(h.messages_deleted) FILTER (WHERE h.retention_type = 'retention'), 0)::bigint,
	coalesce(sum(h.messages_deleted) FILTER (WHERE h.retention_type = 'completed_retention'), 0)::bigint,
	coalesce(sum(h.messages_deleted) FILTER (WHERE h.retention_type = 'max_wait_time_eviction'), 0)::bigint,
	sum(h.messages_deleted)::bigint, count(*)
FROM queen.retention_history h
JOIN queen.queues q ON q.id = h.queue_id
WHERE q.tenant_id = $1 AND ($2 = '' OR q.name = $2) AND h.executed_at >= $3 AND h.executed_at < $4
GROUP BY 1
ORDER BY 1`

// RetentionSeries reads the retention history of a window.
func (s *Store) RetentionSeries(ctx context.Context, tenant, queue string, from, to time.Time, bucketMinutes int) ([]RetentionBucket, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, retentionSeriesSQL, tenant, queue, from, to, bucketMinutes)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetentionBucket, error) {
		var b RetentionBucket
		err := r.Scan(&b.Bucket, &b.Retention, &b.Completed, &b.Eviction, &b.Total, &b.Events)
		return b, err
	})
}

// ratio is a hit ratio in percent of hits h over reads r, two decimals.
const ratio = `round(CASE WHEN (%[1]s) + (%[2]s) = 0 THEN 0 ELSE (%[1]s)::numeric / ((%[1]s) + (%[2]s)) * 100 END, 2)`

// postgresStatsSQL reads PostgreSQL's own statistics views for this
// database and the queen schema into one document, with the field names
// Queen's broker answers and its dashboard reads (contract-admin.md 4.7,
// postgres-stats): cacheHitRatio, diskReads and cacheHits per table and
// index, cacheSummary.tables and .indexes, deadPercentage, totalUpdates and
// hotUpdatePercentage, sharedBuffersSize, tableSize and indexSize (sizes
// pretty-printed, with the bytes beside them). database is the database's
// name; databaseStats and replication hold what this broker adds.
// pg_buffercache is not assumed, so bufferUsage is empty.
var postgresStatsSQL = `
SELECT jsonb_build_object(
	'timestamp', to_char(coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
	'database', current_database(),
	'databaseStats', (SELECT jsonb_build_object('name', d.datname, 'sizeBytes', pg_database_size(d.datid),
		'size', pg_size_pretty(pg_database_size(d.datid)), 'connections', d.numbackends,
		'commits', d.xact_commit, 'rollbacks', d.xact_rollback, 'deadlocks', d.deadlocks, 'conflicts', d.conflicts,
		'tuplesReturned', d.tup_returned, 'tuplesFetched', d.tup_fetched, 'tuplesInserted', d.tup_inserted,
		'tuplesUpdated', d.tup_updated, 'tuplesDeleted', d.tup_deleted, 'tempFiles', d.temp_files, 'tempBytes', d.temp_bytes)
		FROM pg_stat_database d WHERE d.datname = current_database()),
	'databaseCache', (SELECT jsonb_build_object('database', d.datname, 'diskReads', d.blks_read, 'cacheHits', d.blks_hit,
		'cacheHitRatio', ` + fmt.Sprintf(ratio, "d.blks_hit", "d.blks_read") + `)
		FROM pg_stat_database d WHERE d.datname = current_database()),
	'tableCache', coalesce((SELECT jsonb_agg(jsonb_build_object('schema', t.schemaname, 'table', t.relname,
		'diskReads', t.heap_blks_read, 'cacheHits', t.heap_blks_hit,
		'cacheHitRatio', ` + fmt.Sprintf(ratio, "t.heap_blks_hit", "t.heap_blks_read") + `) ORDER BY t.heap_blks_read DESC, t.relname)
		FROM pg_statio_user_tables t WHERE t.schemaname = 'queen'), '[]'),
	'indexCache', coalesce((SELECT jsonb_agg(jsonb_build_object('schema', i.schemaname, 'index', i.indexrelname, 'table', i.relname,
		'diskReads', i.idx_blks_read, 'cacheHits', i.idx_blks_hit,
		'cacheHitRatio', ` + fmt.Sprintf(ratio, "i.idx_blks_hit", "i.idx_blks_read") + `) ORDER BY i.idx_blks_read DESC, i.indexrelname)
		FROM pg_statio_user_indexes i WHERE i.schemaname = 'queen'), '[]'),
	'cacheSummary', jsonb_build_object(
		'tables', (SELECT jsonb_build_object('diskReads', coalesce(sum(t.heap_blks_read), 0), 'cacheHits', coalesce(sum(t.heap_blks_hit), 0),
			'hitRatio', ` + fmt.Sprintf(ratio, "coalesce(sum(t.heap_blks_hit), 0)", "coalesce(sum(t.heap_blks_read), 0)") + `)
			FROM pg_statio_user_tables t WHERE t.schemaname = 'queen'),
		'indexes', (SELECT jsonb_build_object('diskReads', coalesce(sum(i.idx_blks_read), 0), 'cacheHits', coalesce(sum(i.idx_blks_hit), 0),
			'hitRatio', ` + fmt.Sprintf(ratio, "coalesce(sum(i.idx_blks_hit), 0)", "coalesce(sum(i.idx_blks_read), 0)") + `)
			FROM pg_statio_user_indexes i WHERE i.schemaname = 'queen')),
	'deadTuples', coalesce((SELECT jsonb_agg(jsonb_build_object('schema', t.schemaname, 'table', t.relname, 'liveTuples', t.n_live_tup,
		'deadTuples', t.n_dead_tup, 'deadPercentage', round(CASE WHEN t.n_live_tup = 0 THEN 0 ELSE t.n_dead_tup::numeric / t.n_live_tup * 100 END, 2),
		'lastVacuum', t.last_vacuum, 'lastAutovacuum', t.last_autovacuum) ORDER BY t.n_dead_tup DESC, t.relname)
		FROM pg_stat_user_tables t WHERE t.schemaname = 'queen'), '[]'),
	'hotUpdates', coalesce((SELECT jsonb_agg(jsonb_build_object('schema', t.schemaname, 'table', t.relname, 'totalUpdates', t.n_tup_upd,
		'hotUpdates', t.n_tup_hot_upd,
		'hotUpdatePercentage', round(CASE WHEN t.n_tup_upd = 0 THEN 0 ELSE t.n_tup_hot_upd::numeric / t.n_tup_upd * 100 END, 2))
		ORDER BY t.n_tup_upd DESC, t.relname)
		FROM pg_stat_user_tables t WHERE t.schemaname = 'queen'), '[]'),
	'activeQueries', coalesce((SELECT jsonb_agg(jsonb_build_object('pid', a.pid, 'state', a.state,
		'applicationName', a.application_name, 'waitEventType', a.wait_event_type, 'waitEvent', a.wait_event,
		'duration', extract(epoch FROM coalesce($1::timestamptz, now()) - a.query_start),
		'durationMs', round(extract(epoch FROM coalesce($1::timestamptz, now()) - a.query_start) * 1000), 'query', left(a.query, 200)) ORDER BY a.query_start)
		FROM pg_stat_activity a WHERE a.datname = current_database() AND a.state IS DISTINCT FROM 'idle'
			AND a.pid <> pg_backend_pid()), '[]'),
	'autovacuumStatus', coalesce((SELECT jsonb_agg(jsonb_build_object('table', t.relname, 'lastAutovacuum', t.last_autovacuum,
		'lastAutoanalyze', t.last_autoanalyze, 'deadTuples', t.n_dead_tup, 'autovacuumCount', t.autovacuum_count,
		'autoanalyzeCount', t.autoanalyze_count) ORDER BY t.n_dead_tup DESC, t.relname)
		FROM pg_stat_user_tables t WHERE t.schemaname = 'queen'), '[]'),
	'bufferConfig', jsonb_build_object('sharedBuffers', (SELECT setting FROM pg_settings WHERE name = 'shared_buffers'),
		'sharedBuffersSize', current_setting('shared_buffers'),
		'effectiveCacheSize', current_setting('effective_cache_size'), 'workMem', current_setting('work_mem'),
		'maintenanceWorkMem', current_setting('maintenance_work_mem')),
	'bufferUsage', '[]'::jsonb,
	'tableSizes', coalesce((SELECT jsonb_agg(jsonb_build_object('table', c.relname,
		'totalSize', pg_size_pretty(pg_total_relation_size(c.oid)), 'totalSizeBytes', pg_total_relation_size(c.oid),
		'tableSize', pg_size_pretty(pg_relation_size(c.oid)), 'tableSizeBytes', pg_relation_size(c.oid),
		'indexSize', pg_size_pretty(pg_indexes_size(c.oid)), 'indexSizeBytes', pg_indexes_size(c.oid))
		ORDER BY pg_total_relation_size(c.oid) DESC, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen' AND c.relkind = 'r'), '[]'),
	'replication', ` + replicationSQL + `)`

// replicationSQL is postgres-stats' replication object: this server's role
// (primary, or standby while in recovery); on a primary (or a cascading
// standby) each standby it streams to, from pg_stat_replication, with its
// lag in seconds and how many WAL bytes it has still to receive and to
// replay; on a standby, its WAL receiver (pg_stat_wal_receiver) and how far
// its replay trails what it received. The WAL position compared against is
// pg_current_wal_lsn() on a primary, which a standby cannot call, and the
// received position on a standby. A role without pg_read_all_stats sees
// the standbys' rows with their figures null.
const replicationSQL = `jsonb_build_object(
		'role', CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END,
		'standbys', coalesce((SELECT jsonb_agg(jsonb_build_object('applicationName', r.application_name,
			'clientAddr', host(r.client_addr), 'state', r.state, 'syncState', r.sync_state,
			'writeLagSeconds', extract(epoch FROM r.write_lag), 'flushLagSeconds', extract(epoch FROM r.flush_lag),
			'replayLagSeconds', extract(epoch FROM r.replay_lag),
			'sentBytesBehind', pg_wal_lsn_diff(w.lsn, r.sent_lsn), 'bytesBehind', pg_wal_lsn_diff(w.lsn, r.replay_lsn),
			'replyAt', r.reply_time) ORDER BY r.application_name, r.pid)
			FROM pg_stat_replication r,
				(SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END AS lsn) w), '[]'),
		'walReceiver', (SELECT jsonb_build_object('status', w.status, 'senderHost', w.sender_host, 'senderPort', w.sender_port,
			'slotName', w.slot_name, 'lastMessageAt', w.last_msg_receipt_time, 'latestEndAt', w.latest_end_time,
			'replayBytesBehind', pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()),
			'sinceLastReplaySeconds', extract(epoch FROM coalesce($1::timestamptz, now()) - pg_last_xact_replay_timestamp()))
			FROM pg_stat_wal_receiver w))`

// PostgresStats reads the database's statistics views as one document.
func (s *Store) PostgresStats(ctx context.Context) (json.RawMessage, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var doc json.RawMessage
	err := s.pool.QueryRow(ctx, postgresStatsSQL, s.dbNow()).Scan(&doc)
	return doc, err
}
