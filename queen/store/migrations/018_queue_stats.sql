-- The queue statistics snapshot (SPEC "Queue statistics"): per queue, what
-- status, the namespace and task lists and the Prometheus scrape show,
-- refreshed by the queue-statistics leader (advisory lock 737003) every
-- STATS_INTERVAL_MS. Those routes answer for a whole tenant; counted live
-- they read every partition and every pending message's index entry on
-- each request (status took 0.73 s on 100,000 partitions), and status's
-- lease and dead-letter totals every cursor row and partition. Read here,
-- they cost one row per queue, at most one interval old (statsAge says how
-- old).
CREATE TABLE queen.queue_stats (
    queue_id     uuid PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
    partitions   integer NOT NULL,
    messages     bigint NOT NULL,
    pending      bigint NOT NULL,
    processing   bigint NOT NULL,
    dlq          bigint NOT NULL,
    queue_dlq    bigint NOT NULL,
    -- Messages pushed past the queue-mode cursor, by the sequence (what the
    -- scrape's queen_queue_depth has always reported).
    depth        bigint NOT NULL,
    -- Partitions holding a dead letter.
    dlq_partitions integer NOT NULL,
    -- Live leases (distinct lease tokens), the partitions they hold, and
    -- their batch sizes and acks so far.
    leases            integer NOT NULL,
    leased_partitions integer NOT NULL,
    lease_batch       bigint NOT NULL,
    lease_acked       bigint NOT NULL,
    refreshed_at timestamptz NOT NULL
);
