-- The SQL surface Queen's users and test suites call directly
-- (contract-admin.md section 7): push_messages_v3 and push_messages_v2 on
-- this schema. They keep the broker's invariants: queues and partitions are
-- created as the broker creates them (a new partition gets a cursor for
-- every subscribed group), partitions are locked in id order before their
-- sequence moves, a (partition, transactionId) already stored, or repeated
-- in the call, is a duplicate. Messages pushed here are popped over HTTP
-- like any other. An item may name its tenant as _tenant (default: the
-- default tenant).

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
        UPDATE queen.partitions SET last_seq = last_seq + 1, last_message_at = ts, last_activity = ts
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

-- v2 is v3 answering the items alone, as a top-level array, without
-- queueName.
CREATE OR REPLACE FUNCTION queen.push_messages_v2(items jsonb, check_duplicates boolean DEFAULT true,
    check_capacity boolean DEFAULT true) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT coalesce(jsonb_agg(e - 'queueName' ORDER BY (e ->> 'index')::int), '[]'::jsonb)
    FROM jsonb_array_elements(queen.push_messages_v3(items, check_duplicates, check_capacity) -> 'items') e
$$;
