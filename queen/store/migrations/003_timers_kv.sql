-- Timers and KV (issue 10).

-- A timer is a message promised for later. The sweeper of any broker claims
-- due rows (claimed_until, claim_token: a lease on the claim) and fires each
-- by deleting it and pushing its message under txn in one transaction.
-- Queen's name and columns (log_timers), on this row model.
CREATE TABLE queen.log_timers (
    tenant_id     uuid NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    timer_key     text COLLATE "C" NOT NULL,
    partition     text NOT NULL DEFAULT 'Default',
    deliver_at    timestamptz NOT NULL,
    txn           text NOT NULL,
    message_id    uuid NOT NULL,
    payload       jsonb,
    encrypted     boolean NOT NULL DEFAULT false,
    producer_sub  text,
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    claimed_until timestamptz,
    claim_token   uuid,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue, timer_key)
);
-- When a row may next be claimed: its due time, or the end of a live claim.
CREATE INDEX log_timers_visible ON queen.log_timers
    ((greatest(deliver_at, coalesce(claimed_until, deliver_at))));
CREATE INDEX log_timers_claim ON queen.log_timers (claim_token) WHERE claim_token IS NOT NULL;

CREATE SEQUENCE queen.kv_version_seq;

-- KV rows; an expired row is invisible at once and pruned by the sweeper.
CREATE TABLE queen.kv (
    tenant_id  uuid NOT NULL,
    namespace  text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      jsonb NOT NULL,
    version    bigint NOT NULL DEFAULT nextval('queen.kv_version_seq'),
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, namespace, key)
);
CREATE INDEX kv_expires ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;
