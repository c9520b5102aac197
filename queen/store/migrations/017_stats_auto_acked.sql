-- Messages an autoAck pop completed (no ack request): counted apart from
-- ack_success, so that acks per ack request (batchEfficiency) stays true,
-- and added to it where completions are shown.
ALTER TABLE queen.stats_queue_minutes ADD COLUMN auto_acked bigint NOT NULL DEFAULT 0;
