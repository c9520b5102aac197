-- Stored messages counted on write, so that the queue list, the status
-- overview and a partition's stats read counters instead of counting every
-- stored row (10 million messages made the queue list take 3.6 s). A
-- partition counts the messages ever appended to it (appended, bumped by
-- the statement that appends them, in the partition row it already updates:
-- no extra row per push); deletes are counted apart, per partition, by a
-- statement trigger on messages (retention, the message delete route, a
-- tool's SQL), in their own table so that a retention pass neither waits for
-- pushes on the partition rows nor clears pop marks. Stored = appended minus
-- deleted. A writer that inserts into queen.messages itself must bump
-- appended too: the broker's push, the SQL surface below and the
-- benchmark's growth do.
--
-- The delete trigger is created first: it locks writes to messages out until
-- this transaction commits, so the backfill misses none. The backfill reads
-- every message once (an index-only count; seconds per ten million rows),
-- during which pushes wait.
ALTER TABLE queen.partitions ADD COLUMN appended bigint NOT NULL DEFAULT 0;

CREATE TABLE queen.message_deletes (
    partition_id uuid PRIMARY KEY REFERENCES queen.partitions (id) ON DELETE CASCADE,
    n            bigint NOT NULL
);

CREATE FUNCTION queen.message_deletes_on_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    -- In partition order, so two deleting statements never wait on each
    -- other's counters in a cycle. A cascade from a deleted partition finds
    -- no partition row and counts nothing.
    INSERT INTO queen.message_deletes AS d (partition_id, n)
    SELECT g.partition_id, count(*) FROM gone g
    WHERE EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = g.partition_id)
    GROUP BY 1 ORDER BY 1
    ON CONFLICT (partition_id) DO UPDATE SET n = d.n + EXCLUDED.n;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.message_deletes_on_delete() FROM PUBLIC;

CREATE TRIGGER message_deletes_delete AFTER DELETE ON queen.messages
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queen.message_deletes_on_delete();

-- recount_stored sets every counter from the rows: the backfill here, and
-- the repair after a rolling upgrade across this migration (a broker built
-- before it appends without counting): run it once the last such broker
-- has stopped. It locks pushes out while it reads every message.
CREATE FUNCTION queen.recount_stored() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    LOCK TABLE queen.messages IN SHARE MODE;
    DELETE FROM queen.message_deletes;
    UPDATE queen.partitions p SET appended = coalesce(c.n, 0)
    FROM queen.partitions p2 LEFT JOIN (SELECT partition_id, count(*) AS n FROM queen.messages GROUP BY 1) c ON c.partition_id = p2.id
    WHERE p.id = p2.id AND p.appended IS DISTINCT FROM coalesce(c.n, 0);
END
$$;
REVOKE EXECUTE ON FUNCTION queen.recount_stored() FROM PUBLIC;

SELECT queen.recount_stored();

-- The SQL surface's push bumps appended with each message it appends.
CREATE OR REPLACE FUNCTION queen.push_messages_v3(items jsonb, check_duplicates boolean DEFAULT true,
    check_capacity boolean DEFAULT true) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    n        int := coalesce(jsonb_array_length(items), 0);
    it       jsonb;
    tenants  uuid[] := '{}';
    qnames   text[] := '{}';
    pids     uuid[] := '{}';
    qid      uuid;
    pid      uuid;
    qname    text;
    pname    text;
    tenant   uuid;
    txid     text;
    mid      uuid;
    existing uuid;
    next_seq bigint;
    ts       timestamptz := now();
    out_items jsonb := '[]';
    updates  jsonb := '[]';
BEGIN
    IF items IS NULL OR jsonb_typeof(items) <> 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = '22023';
    END IF;
    -- Names first: queues and partitions, created when missing.
    FOR i IN 0 .. n - 1 LOOP
        it := items -> i;
        qname := it ->> 'queue';
        IF qname IS NULL THEN
            RAISE EXCEPTION 'items[%].queue is required', i USING ERRCODE = '22023';
        END IF;
        tenant := coalesce(nullif(it ->> '_tenant', '')::uuid, '00000000-0000-0000-0000-000000000001');
        pname := coalesce(nullif(it ->> 'partition', ''), 'Default');
        INSERT INTO queen.queues (id, tenant_id, name, namespace, task)
        VALUES (gen_random_uuid(), tenant, qname, split_part(qname, '.', 1),
            nullif(CASE WHEN position('.' IN qname) > 0 THEN substr(qname, position('.' IN qname) + 1) END, ''))
        ON CONFLICT (tenant_id, name) DO NOTHING;
        SELECT id INTO qid FROM queen.queues WHERE tenant_id = tenant AND name = qname;
        pid := NULL;
        INSERT INTO queen.partitions (id, queue_id, name, created_at, last_activity)
        VALUES (gen_random_uuid(), qid, pname, ts, ts)
        ON CONFLICT (queue_id, name) DO NOTHING
        RETURNING id INTO pid;
        IF pid IS NOT NULL THEN
            INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, created_at)
            SELECT pid, qid, g.consumer_group, ts FROM queen.consumer_groups_metadata g
            WHERE g.tenant_id = tenant AND g.queue_name = qname
            ON CONFLICT DO NOTHING;
        ELSE
            SELECT id INTO pid FROM queen.partitions WHERE queue_id = qid AND name = pname;
        END IF;
        tenants := tenants || tenant;
        qnames := qnames || qname;
        pids := pids || pid;
    END LOOP;
    -- The broker's lock order: partitions by id, held to commit.
    PERFORM 1 FROM queen.partitions WHERE id = ANY (pids) ORDER BY id FOR NO KEY UPDATE;
    FOR i IN 0 .. n - 1 LOOP
        it := items -> i;
        pid := pids[i + 1];
        qname := qnames[i + 1];
        txid := coalesce(nullif(it ->> 'transactionId', ''), gen_random_uuid()::text);
        SELECT m.id INTO existing FROM queen.messages m WHERE m.partition_id = pid AND m.transaction_id = txid;
        IF existing IS NOT NULL THEN
            out_items := out_items || jsonb_build_object('index', i, 'transaction_id', txid, 'status', 'duplicate',
                'message_id', existing, 'queueName', qname);
            CONTINUE;
        END IF;
        mid := coalesce(nullif(it ->> 'messageId', '')::uuid, gen_random_uuid());
        UPDATE queen.partitions SET last_seq = last_seq + 1, appended = appended + 1, last_message_at = ts, last_activity = ts
        WHERE id = pid RETURNING last_seq INTO next_seq;
        INSERT INTO queen.messages (id, partition_id, seq, transaction_id, trace_id, payload, created_at, is_encrypted, producer_sub)
        VALUES (mid, pid, next_seq, txid, nullif(it ->> 'traceId', '')::uuid, coalesce(it -> 'payload', '{}'::jsonb), ts,
            coalesce((it ->> 'is_encrypted')::boolean, false), nullif(it ->> 'producerSub', ''));
        out_items := out_items || jsonb_build_object('index', i, 'transaction_id', txid, 'status', 'queued',
            'message_id', mid, 'partition_id', pid, 'trace_id', nullif(it ->> 'traceId', ''), 'queueName', qname);
        updates := updates || jsonb_build_object('queue_name', qname, 'partition_id', pid, 'last_message_id', mid,
            'last_message_created_at', ts);
    END LOOP;
    RETURN jsonb_build_object('items', out_items, 'partition_updates', updates);
END
$$;
-- CREATE OR REPLACE resets what 009 set: run as the owner again.
ALTER FUNCTION queen.push_messages_v3(jsonb, boolean, boolean) SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp;

-- The queue list's page, newest first, without sorting the tenant's queues.
CREATE INDEX queues_tenant_created ON queen.queues (tenant_id, created_at DESC, id DESC);
