-- The fence (issue 32, invariant 1: one writer per placement, enforced on
-- the shard). The rows the write paths already lock carry the epoch of the
-- queue's placement: the partition row (a push's append lock), the cursor
-- row (pop claim, ack, lease extend) and the shard-local queue row
-- (partition creation). A statement routed with epoch E checks the row it
-- locks; a broker without shards passes NULL and checks nothing.
--
-- Encoding: a live placement is E > 0; a frozen one is -E. The freeze is an
-- UPDATE to -E, not a lock, so a writer that waited behind it is
-- re-evaluated against the new row version (READ COMMITTED's recheck of the
-- locking scan's WHERE) and fails; -E matches no routed epoch (routed
-- epochs are positive), and E stays readable, so a restarted freeze or
-- activation knows where it stands without another column.
--
-- A constant DEFAULT is metadata only on PostgreSQL 11 and later: no table
-- rewrite, no scan, on a grown table (a brief ACCESS EXCLUSIVE lock each).
--
-- Named 020_fence_epochs so that it runs before the generated step
-- 020_surface_statements, whose append_rows body reads partitions.epoch
-- and calls queen.fence_moved (a LANGUAGE sql body is checked when it is
-- created); on a database migrated before, the ledger lacks it and it runs.
ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 1;
ALTER TABLE queen.partitions ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 1;
ALTER TABLE queen.partition_consumers ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 1;

-- fence_moved raises "moved" (SQLSTATE QF001, the queue's id in DETAIL) and
-- never returns: a statement calls it only where a locked row's epoch is not
-- the one it was routed with, so the statement fails and writes nothing.
CREATE OR REPLACE FUNCTION queen.fence_moved(queue uuid) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'queue moved or frozen' USING ERRCODE = 'QF001', DETAIL = queue::text;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.fence_moved(uuid) FROM PUBLIC;

-- The surface's append_rows gains the epochs argument (020_surface_statements
-- creates it with 11): the old 10-argument one would be an overload.
DROP FUNCTION IF EXISTS queen.append_rows(uuid[], uuid[], text[], text[], text[], text[], timestamptz, boolean[], text, boolean);
