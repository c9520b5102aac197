-- queen:no-transaction
-- Indexes the statements need as tables grow, built without blocking
-- pushes (each statement runs on its own; see store.migrateConcurrently).
--
-- The DLQ by partition: the queue list, the queue detail and every
-- Prometheus scrape count dead letters per partition or queue, and a
-- partition delete cascades into the table; without it each was a scan of
-- every dead letter (12.2 s for the queue list at 500,000 rows).
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_letter_queue_partition ON queen.dead_letter_queue (partition_id, consumer_group);
