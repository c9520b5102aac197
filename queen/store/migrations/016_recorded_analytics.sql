-- Recorded analytics (SPEC "Recorded analytics"): per-minute buckets of
-- what each broker did, written by each broker once a minute in one
-- statement (store.RecordMinutes). A row is the broker's whole minute and
-- a flush replaces it, so a flush retried after a lost answer counts once.
-- The statistics leader (advisory lock 737002) folds the per-broker rows of
-- a queue into one row (broker_id '') once they are old enough that no
-- broker still holds them, samples each queue's partitions and backlog
-- into that row, and deletes buckets older than QUEEN_ANALYTICS_RETENTION.
CREATE TABLE queen.stats_queue_minutes (
    queue_id      uuid NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    minute        timestamptz NOT NULL,
    broker_id     text NOT NULL,
    push_requests bigint NOT NULL DEFAULT 0,
    push_messages bigint NOT NULL DEFAULT 0,
    pop_requests  bigint NOT NULL DEFAULT 0,
    pop_messages  bigint NOT NULL DEFAULT 0,
    pop_empty     bigint NOT NULL DEFAULT 0,
    ack_requests  bigint NOT NULL DEFAULT 0,
    ack_success   bigint NOT NULL DEFAULT 0,
    ack_failed    bigint NOT NULL DEFAULT 0,
    dlq           bigint NOT NULL DEFAULT 0,
    -- The age of each popped message when it was popped.
    lag_sum_ms    bigint NOT NULL DEFAULT 0,
    lag_count     bigint NOT NULL DEFAULT 0,
    lag_max_ms    bigint NOT NULL DEFAULT 0,
    -- Sampled by the statistics leader after the minute (NULL: not sampled).
    partitions    integer,
    pending       bigint,
    PRIMARY KEY (queue_id, minute, broker_id)
);
CREATE INDEX stats_queue_minutes_minute ON queen.stats_queue_minutes (minute);

CREATE TABLE queen.stats_broker_minutes (
    minute         timestamptz NOT NULL,
    broker_id      text NOT NULL,
    hostname       text NOT NULL,
    port           integer NOT NULL,
    requests       bigint NOT NULL DEFAULT 0,
    server_errors  bigint NOT NULL DEFAULT 0,
    db_errors      bigint NOT NULL DEFAULT 0,
    push_requests  bigint NOT NULL DEFAULT 0,
    push_messages  bigint NOT NULL DEFAULT 0,
    pop_requests   bigint NOT NULL DEFAULT 0,
    pop_messages   bigint NOT NULL DEFAULT 0,
    ack_requests   bigint NOT NULL DEFAULT 0,
    ack_messages   bigint NOT NULL DEFAULT 0,
    latency_count  bigint NOT NULL DEFAULT 0,
    latency_sum_ms double precision NOT NULL DEFAULT 0,
    latency_p50_ms double precision NOT NULL DEFAULT 0,
    latency_p99_ms double precision NOT NULL DEFAULT 0,
    latency_max_ms double precision NOT NULL DEFAULT 0,
    cpu_user_us    bigint NOT NULL DEFAULT 0,
    cpu_sys_us     bigint NOT NULL DEFAULT 0,
    samples        integer NOT NULL DEFAULT 0,
    -- {"cpu":{"user_us":{avg,min,max,last},...},"memory":{...},"database":{...},"runtime":{...}}:
    -- each gauge over the minute's samples, in the shape system-metrics answers.
    gauges         jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (minute, broker_id)
);
