-- The streaming SDKs' server side (contract-streams.md section 4). A
-- query is registered by name per tenant; its state rows are keyed by
-- (query, source partition, key) and go with the query (the SDK test
-- runners delete queries by name and rely on the cascade). State has no
-- foreign key to queen.partitions on purpose: partition cleanup must never
-- delete stream state. Tables a Queen broker left in this database are
-- kept (and given the tenant column), not recreated.
CREATE SCHEMA IF NOT EXISTS queen_streams;

CREATE TABLE IF NOT EXISTS queen_streams.queries (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    name         text NOT NULL,
    source_queue text NOT NULL,
    sink_queue   text,
    config_hash  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE queen_streams.queries ADD COLUMN IF NOT EXISTS tenant_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001';
CREATE UNIQUE INDEX IF NOT EXISTS queries_tenant_name_uk ON queen_streams.queries (tenant_id, name);

CREATE TABLE IF NOT EXISTS queen_streams.state (
    query_id     uuid NOT NULL REFERENCES queen_streams.queries (id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    key          text NOT NULL,
    value        jsonb NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);
CREATE INDEX IF NOT EXISTS idx_streams_state_updated_at ON queen_streams.state (updated_at);

GRANT USAGE ON SCHEMA queen_streams TO PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA queen_streams TO PUBLIC;
