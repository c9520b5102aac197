-- queen:no-transaction
-- A Citus-ready schema (issue 32, design-shards.md): every per-queue table
-- gets a replica identity that holds the column a move's row-filtered
-- publication selects the queue's rows by. PostgreSQL 15 refuses every
-- UPDATE and DELETE, of every queue, on a published table whose row
-- filter names a column outside its replica identity, so without this a
-- move would stop pushes (partitions.last_seq), acks and retention on the
-- whole source shard.
--
-- The column per table: queue_id where the table has one, else
-- partition_id (a move lists the queue's partitions), else the queue's
-- (tenant_id, name). Tables whose key already holds it need nothing:
-- queues (id), partition_consumers, dlq_counts, message_deletes,
-- pop_marks, queue_stats, stats_queue_minutes, log_timers (tenant_id,
-- queue), consumer_groups_metadata and consumer_watermarks (tenant_id,
-- queue_name), queen_streams.state (partition_id). message_trace_names
-- holds no queue column: a move copies it apart (see queen/shards).
--
-- Replica identity costs nothing at wal_level=replica (it is logged only
-- for logical decoding) and, at wal_level=logical, only the key of a
-- deleted row, or of an updated row whose key changed: 24 bytes for a
-- message (partition_id, seq) instead of 16 (id). No column is added.
-- The indexes are built CONCURRENTLY, so a grown table keeps taking
-- writes. ALTER TABLE ... REPLICA IDENTITY rewrites nothing, but takes an
-- ACCESS EXCLUSIVE lock for its catalogue change: it waits for the
-- table's open transactions (pushes and acks are short) and new ones wait
-- behind it, at most DB_LOCK_TIMEOUT; then the migration fails, and the
-- next start runs it again from the top (each statement is idempotent).

-- An existing unique key over NOT NULL columns serves where there is one.
ALTER TABLE queen.partitions REPLICA IDENTITY USING INDEX partitions_queue_id_name_key;
ALTER TABLE queen.messages REPLICA IDENTITY USING INDEX messages_partition_id_seq_key;

-- Elsewhere a unique index (the filter column first). Where a plain
-- index already leads with the column, a unique one over the same columns
-- (plus the unique id) replaces it, so writes maintain no more indexes
-- than before: the dead letters' page index of 015 and the traces'
-- partition index of 005. The surrogate ids stay the primary keys.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_queue_partition_failed_key ON queen.dead_letter_queue (partition_id, failed_at DESC, id DESC);
ALTER TABLE queen.dead_letter_queue REPLICA IDENTITY USING INDEX dead_letter_queue_partition_failed_key;
DROP INDEX CONCURRENTLY IF EXISTS queen.dead_letter_queue_partition_failed;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS message_traces_partition_id_key ON queen.message_traces (partition_id, id);
ALTER TABLE queen.message_traces REPLICA IDENTITY USING INDEX message_traces_partition_id_key;
DROP INDEX CONCURRENTLY IF EXISTS queen.message_traces_partition;
-- Retention history is written once per queue per retention round: a new
-- index costs nothing that matters.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS retention_history_queue_id_key ON queen.retention_history (queue_id, id);
ALTER TABLE queen.retention_history REPLICA IDENTITY USING INDEX retention_history_queue_id_key;
