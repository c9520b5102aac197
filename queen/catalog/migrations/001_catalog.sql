-- The catalogue: which shards exist, which shard holds each queue (with the
-- epoch that fences its writers), and the moves between them
-- (../shared/design-shards.md). Its own schema, so a database can be a
-- shard and the catalogue at once (one database, today's deployment).

-- A shard by name only. Its connection URL is not stored: it carries a
-- password, every broker already has it in QUEEN_SHARDS, and brokers may
-- reach one shard by different addresses; the name is what placements and
-- moves refer to. draining: a least-loaded rule passes it over for a
-- listed shard that is not draining (moves taking its queues away come
-- later).
CREATE TABLE IF NOT EXISTS queen_catalog.shards (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,63}$'),
    draining   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A queue's shard. epoch rises by one with every activation of a move
-- (compare-and-set, placement.set); a shard's fenced rows carry it.
CREATE TABLE IF NOT EXISTS queen_catalog.placements (
    tenant_id  uuid NOT NULL,
    queue      text NOT NULL CHECK (queue <> ''),
    shard      text NOT NULL REFERENCES queen_catalog.shards (name),
    epoch      bigint NOT NULL DEFAULT 1 CHECK (epoch > 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue)
);

-- The least-loaded rule counts queues per shard.
CREATE INDEX IF NOT EXISTS placements_shard ON queen_catalog.placements (shard);

-- A move of one queue, a state machine the mover persists at every step;
-- epoch is the placement epoch it activates (the current one plus one).
-- failed always says why.
CREATE TABLE IF NOT EXISTS queen_catalog.moves (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid NOT NULL,
    queue      text NOT NULL CHECK (queue <> ''),
    from_shard text NOT NULL REFERENCES queen_catalog.shards (name),
    to_shard   text NOT NULL REFERENCES queen_catalog.shards (name),
    state      text NOT NULL DEFAULT 'plan'
               CHECK (state IN ('plan', 'copy', 'freeze', 'activate', 'cleanup', 'done', 'failed')),
    reason     text NOT NULL DEFAULT '',
    epoch      bigint NOT NULL CHECK (epoch > 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (from_shard <> to_shard),
    CHECK (state <> 'failed' OR reason <> '')
);

-- One unfinished move per queue: a second plan for it fails on this index.
CREATE UNIQUE INDEX IF NOT EXISTS moves_one_unfinished ON queen_catalog.moves (tenant_id, queue)
    WHERE state NOT IN ('done', 'failed');
