-- Queen row model (Queen MQ's C++ schema names, kept so operators keep their SQL),
-- plus a per-partition sequence that makes appends visible in cursor order.

CREATE SCHEMA IF NOT EXISTS queen;

CREATE TABLE queen.queues (
    id                          uuid PRIMARY KEY,
    tenant_id                   uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    name                        text NOT NULL,
    namespace                   text,
    task                        text,
    priority                    integer NOT NULL DEFAULT 0,
    lease_time                  integer NOT NULL DEFAULT 300,
    retry_limit                 integer NOT NULL DEFAULT 3,
    retry_delay                 integer NOT NULL DEFAULT 1000,
    ttl                         integer NOT NULL DEFAULT 3600,
    dead_letter_queue           boolean NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean NOT NULL DEFAULT false,
    delayed_processing          integer NOT NULL DEFAULT 0,
    window_buffer               integer NOT NULL DEFAULT 0,
    retention_seconds           integer NOT NULL DEFAULT 0,
    completed_retention_seconds integer NOT NULL DEFAULT 0,
    retention_enabled           boolean NOT NULL DEFAULT false,
    encryption_enabled          boolean NOT NULL DEFAULT false,
    max_wait_time_seconds       integer NOT NULL DEFAULT 0,
    max_queue_size              integer NOT NULL DEFAULT 0,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
CREATE INDEX queues_ns_task ON queen.queues (tenant_id, namespace, task);

-- last_seq is the partition's append allocator. A push takes this row's lock
-- (UPDATE ... SET last_seq = last_seq + n) and holds it to COMMIT, so the
-- appends of one partition commit in seq order: a reader that sees seq k sees
-- every committed seq < k. This is what keeps a cursor from skipping a row
-- whose transaction committed late (the reference broker's stranded messages).
CREATE TABLE queen.partitions (
    id              uuid PRIMARY KEY,
    queue_id        uuid NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name            text NOT NULL DEFAULT 'Default',
    last_seq        bigint NOT NULL DEFAULT 0,
    last_message_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_activity   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

CREATE TABLE queen.messages (
    id             uuid PRIMARY KEY,
    partition_id   uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    seq            bigint NOT NULL,
    transaction_id text NOT NULL,
    trace_id       uuid,
    payload        jsonb,
    created_at     timestamptz NOT NULL,
    is_encrypted   boolean NOT NULL DEFAULT false,
    producer_sub   text,
    -- Exact deduplication: one row per (partition, transactionId), forever
    -- (until retention deletes the row).
    UNIQUE (partition_id, transaction_id),
    UNIQUE (partition_id, seq)
);
CREATE INDEX messages_partition_created ON queen.messages (partition_id, created_at);

-- One row per (partition, consumer group): the group's cursor and its lease.
-- last_consumed_seq = 0 is the sentinel "nothing consumed".
CREATE TABLE queen.partition_consumers (
    partition_id             uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    consumer_group           text NOT NULL,
    last_consumed_seq        bigint NOT NULL DEFAULT 0,
    last_consumed_id         uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    last_consumed_created_at timestamptz,
    lease_expires_at         timestamptz,
    lease_acquired_at        timestamptz,
    worker_id                text,
    batch_size               integer NOT NULL DEFAULT 0,
    -- The highest seq handed out under the current lease: an ack may only
    -- name a message at or below it, and the lease ends when the cursor
    -- reaches it.
    lease_max_seq            bigint NOT NULL DEFAULT 0,
    acked_count              integer NOT NULL DEFAULT 0,
    batch_retry_count        integer NOT NULL DEFAULT 0,
    total_messages_consumed  bigint NOT NULL DEFAULT 0,
    total_batches_consumed   bigint NOT NULL DEFAULT 0,
    last_consumed_at         timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
CREATE INDEX partition_consumers_worker ON queen.partition_consumers (worker_id) WHERE worker_id IS NOT NULL;

CREATE TABLE queen.consumer_groups_metadata (
    tenant_id              uuid NOT NULL,
    consumer_group         text NOT NULL,
    queue_name             text NOT NULL,
    partition_name         text NOT NULL DEFAULT '',
    namespace              text NOT NULL DEFAULT '',
    task                   text NOT NULL DEFAULT '',
    subscription_mode      text NOT NULL,
    subscription_timestamp timestamptz NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, consumer_group, queue_name, partition_name, namespace, task)
);

CREATE TABLE queen.dead_letter_queue (
    id                  bigserial PRIMARY KEY,
    message_id          uuid NOT NULL REFERENCES queen.messages (id) ON DELETE CASCADE,
    partition_id        uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    consumer_group      text NOT NULL,
    error_message       text,
    retry_count         integer NOT NULL DEFAULT 0,
    original_created_at timestamptz,
    failed_at           timestamptz NOT NULL,
    UNIQUE (message_id, consumer_group)
);
CREATE INDEX dead_letter_queue_failed ON queen.dead_letter_queue (failed_at DESC);

CREATE TABLE queen.system_state (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
