-- Traces, retention history and consumer watermarks (contract-admin.md
-- sections 4.7, 5.3 and 7.4).

-- A trace is an event a consumer records against one message. It goes
-- with its message (retention, eviction, delete, queue delete).
CREATE TABLE queen.message_traces (
    id             uuid PRIMARY KEY,
    message_id     uuid REFERENCES queen.messages (id) ON DELETE CASCADE,
    partition_id   uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    transaction_id varchar(255) NOT NULL,
    consumer_group varchar(255) NOT NULL DEFAULT '__QUEUE_MODE__',
    event_type     varchar(100) NOT NULL DEFAULT 'info',
    data           jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    worker_id      text
);
CREATE INDEX message_traces_message ON queen.message_traces (message_id);
CREATE INDEX message_traces_txn ON queen.message_traces (transaction_id, partition_id);
CREATE INDEX message_traces_created ON queen.message_traces (created_at DESC);
CREATE INDEX message_traces_partition ON queen.message_traces (partition_id);

CREATE TABLE queen.message_trace_names (
    trace_id   uuid NOT NULL REFERENCES queen.message_traces (id) ON DELETE CASCADE,
    trace_name text NOT NULL,
    PRIMARY KEY (trace_id, trace_name)
);
CREATE INDEX message_trace_names_name ON queen.message_trace_names (trace_name);

-- What each retention round deleted, per queue and rule; pruned after
-- seven days by the retention pass itself.
CREATE TABLE queen.retention_history (
    id               bigserial PRIMARY KEY,
    queue_id         uuid NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    retention_type   text NOT NULL, -- retention | completed_retention | max_wait_time_eviction
    messages_deleted bigint NOT NULL,
    executed_at      timestamptz NOT NULL
);
CREATE INDEX retention_history_executed ON queen.retention_history (executed_at);

-- A wildcard pop that found nothing notes, per (queue name, group), when
-- it last saw the queue fully consumed. Keyed by name, without a foreign
-- key, as in Queen: tools and tests read and write it directly. This
-- broker writes it and never filters pops on it.
CREATE TABLE queen.consumer_watermarks (
    queue_name         varchar(255) NOT NULL,
    consumer_group     varchar(255) NOT NULL DEFAULT '__QUEUE_MODE__',
    last_empty_scan_at timestamptz NOT NULL DEFAULT 'epoch',
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, consumer_group)
);
