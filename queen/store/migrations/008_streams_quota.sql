-- Per-tenant streams grants (contract-streams.md section 3.7, Rust's
-- tenancy model). With tenancy on, a tenant other than the default one may
-- register a new query only with an enabled row here, and only below
-- max_queries when that is set (NULL: unlimited). A control plane writes
-- these rows; the broker only reads them. A table a Queen broker left here
-- is kept.
CREATE TABLE IF NOT EXISTS queen_streams.quota (
    tenant_id   uuid PRIMARY KEY,
    enabled     boolean NOT NULL DEFAULT true,
    max_queries bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE, DELETE ON queen_streams.quota TO PUBLIC;
