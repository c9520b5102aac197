-- The queue-statistics refresh rewrote every queue's row on every pass
-- (STATS_INTERVAL_MS), changed or not: at 10,000 queues a pass wrote 10,000
-- row versions, 1 MB of WAL, and on grown tables it was the largest
-- per-message cost of a consume benchmark (9-13 buffer hits and 95-135 B of
-- WAL per message). The refresh now writes only the rows whose counts
-- changed; this row says when the last complete pass began, so a row left
-- unchanged is known to hold as of then (queueStatsAge).
CREATE TABLE queen.queue_stats_pass (
    one           boolean PRIMARY KEY DEFAULT true CHECK (one),
    counted_since timestamptz NOT NULL
);
