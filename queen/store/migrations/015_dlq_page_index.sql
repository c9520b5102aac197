-- queen:no-transaction
-- The DLQ list of one queue picks its page from each partition's newest
-- failures (dlqQueuePageSQL) instead of sorting every dead letter of the
-- queue; built without blocking writes (see store.migrateConcurrently).
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_queue_partition_failed ON queen.dead_letter_queue (partition_id, failed_at DESC, id DESC);
