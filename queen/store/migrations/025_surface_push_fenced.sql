-- The SQL surface's push meets the fence (issue 32; migration 020,
-- queen/store/fence.go). Before, push_messages_v3 created partitions and
-- cursor rows at the default epoch, 1, without reading the queue row: on a
-- queue frozen for a move (-E) it created live rows, and it appended with no
-- epoch, so its messages landed on a frozen source after the freeze had
-- committed and never reached the destination. Now:
--   - the queue's epoch is read with its id (no extra statement); a frozen
--     queue (epoch <= 0: frozen for a move, or the tombstone a move away
--     left) fails the call as moved (queen.fence_moved, SQLSTATE QF001),
--     nothing written;
--   - a partition it creates, and that partition's cursor rows, take the
--     queue's epoch read under FOR SHARE of the queue row, as the broker's
--     createPartitionsSQL and createConsumersSQL do: the share lock conflicts
--     with a freeze's FOR UPDATE (fenceLockSQL), so a creation that waited
--     for a freeze reads the epoch the freeze wrote (and fails), and a freeze
--     that came later waits for this call and rewrites its rows;
--   - each row is appended with its queue's epoch as read (append_rows's
--     epochs): a partition row frozen since, locked by the append, fails the
--     call as moved.
-- Without shards every row is at epoch 1: the answers are the same.
CREATE OR REPLACE FUNCTION queen.push_messages_v3(items jsonb, check_duplicates boolean DEFAULT true,
    check_capacity boolean DEFAULT true) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp AS $$
DECLARE
    n         int := coalesce(jsonb_array_length(items), 0);
    it        jsonb;
    qnames    text[] := '{}';
    pids      uuid[] := '{}';
    qid       uuid;
    qepoch    bigint;
    epochs    bigint[] := '{}';
    pid       uuid;
    qname     text;
    pname     text;
    tenant    uuid;
    txid      text;
    k         text;
    j         int;
    -- Per item, its row: the distinct (partition, transactionId) it is.
    item_row  int[] := '{}';
    -- Per row, append_rows's arguments, the item that is its first
    -- occurrence, and whether the append inserted it.
    r_ids     uuid[] := '{}';
    r_pids    uuid[] := '{}';
    r_txids   text[] := '{}';
    r_traces  text[] := '{}';
    r_bodies  text[] := '{}';
    r_subs    text[] := '{}';
    r_enc     boolean[] := '{}';
    r_epochs  bigint[] := '{}';
    r_first   int[] := '{}';
    r_queued  boolean[];
    seen      jsonb := '{}';
    raced     int[];
    d         record;
    ts        timestamptz := now();
    out_items jsonb := '[]';
    updates   jsonb := '[]';
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
        SELECT id, epoch INTO qid, qepoch FROM queen.queues WHERE tenant_id = tenant AND name = qname;
        IF qepoch <= 0 THEN
            PERFORM queen.fence_moved(qid);
        END IF;
        SELECT id INTO pid FROM queen.partitions WHERE queue_id = qid AND name = pname;
        IF pid IS NULL THEN
            -- Created rows take the queue's epoch, read under FOR SHARE of
            -- its row (the header says why).
            SELECT epoch INTO qepoch FROM queen.queues WHERE id = qid FOR SHARE;
            IF qepoch <= 0 THEN
                PERFORM queen.fence_moved(qid);
            END IF;
            INSERT INTO queen.partitions (id, queue_id, name, created_at, last_activity, epoch)
            VALUES (gen_random_uuid(), qid, pname, ts, ts, qepoch)
            ON CONFLICT (queue_id, name) DO NOTHING
            RETURNING id INTO pid;
            IF pid IS NOT NULL THEN
                INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, created_at, epoch)
                SELECT pid, qid, g.consumer_group, ts, qepoch FROM queen.consumer_groups_metadata g
                WHERE g.tenant_id = tenant AND g.queue_name = qname
                ON CONFLICT DO NOTHING;
            ELSE
                SELECT id INTO pid FROM queen.partitions WHERE queue_id = qid AND name = pname;
            END IF;
        END IF;
        qnames := array_append(qnames, qname);
        pids := array_append(pids, pid);
        epochs := array_append(epochs, qepoch);
    END LOOP;
    -- Rows: the first occurrence of each (partition, transactionId), with
    -- the call's defaults. (A partition id's text has no space, so the key
    -- is unambiguous.)
    FOR i IN 0 .. n - 1 LOOP
        it := items -> i;
        txid := coalesce(nullif(it ->> 'transactionId', ''), gen_random_uuid()::text);
        k := pids[i + 1]::text || ' ' || txid;
        IF seen ? k THEN
            item_row := array_append(item_row, (seen ->> k)::int);
            CONTINUE;
        END IF;
        j := coalesce(array_length(r_ids, 1), 0) + 1;
        seen := seen || jsonb_build_object(k, j);
        item_row := array_append(item_row, j);
        r_first := array_append(r_first, i);
        r_ids := array_append(r_ids, coalesce(nullif(it ->> 'messageId', '')::uuid, gen_random_uuid()));
        r_pids := array_append(r_pids, pids[i + 1]);
        r_txids := array_append(r_txids, txid);
        r_traces := array_append(r_traces, it ->> 'traceId');
        r_bodies := array_append(r_bodies, coalesce(it -> 'payload', '{}'::jsonb)::text);
        r_subs := array_append(r_subs, it ->> 'producerSub');
        r_enc := array_append(r_enc, coalesce((it ->> 'is_encrypted')::boolean, false));
        r_epochs := array_append(r_epochs, epochs[i + 1]);
    END LOOP;
    -- The broker's append: partitions locked in id order, seqs under the
    -- lock, rows already stored skipped. Created at now() (NULL), the
    -- session's lock_timeout (NULL), no seal check (false), each row at its
    -- queue's epoch as read (the fence).
    SELECT coalesce(array_agg(a.queued ORDER BY a.ord), '{}') INTO r_queued
    FROM queen.append_rows(r_ids, r_pids, r_txids, r_traces, r_bodies, r_subs, NULL, r_enc, NULL, false, r_epochs) a;
    -- A row not inserted is stored already (perhaps by a push that
    -- committed while this one waited): answer the stored id, read by a new
    -- statement, as the broker does.
    SELECT array_agg(o ORDER BY o) INTO raced FROM generate_subscripts(r_queued, 1) o WHERE NOT r_queued[o];
    IF raced IS NOT NULL THEN
        FOR d IN SELECT x.ord, x.message_id FROM queen.append_duplicates(
                ARRAY(SELECT r_pids[o] FROM unnest(raced) WITH ORDINALITY u(o, w) ORDER BY w),
                ARRAY(SELECT r_txids[o] FROM unnest(raced) WITH ORDINALITY u(o, w) ORDER BY w)) x LOOP
            r_ids[raced[d.ord]] := d.message_id::uuid;
            raced[d.ord] := NULL;
        END LOOP;
        j := (SELECT o FROM unnest(raced) o WHERE o IS NOT NULL LIMIT 1);
        IF j IS NOT NULL THEN
            RAISE EXCEPTION 'partition % was deleted while pushing into it', r_pids[j] USING ERRCODE = '23503';
        END IF;
    END IF;
    FOR i IN 0 .. n - 1 LOOP
        it := items -> i;
        j := item_row[i + 1];
        IF r_first[j] = i AND r_queued[j] THEN
            out_items := out_items || jsonb_build_object('index', i, 'transaction_id', r_txids[j], 'status', 'queued',
                'message_id', r_ids[j], 'partition_id', r_pids[j], 'trace_id', nullif(it ->> 'traceId', ''), 'queueName', qnames[i + 1]);
            updates := updates || jsonb_build_object('queue_name', qnames[i + 1], 'partition_id', r_pids[j],
                'last_message_id', r_ids[j], 'last_message_created_at', ts);
        ELSE
            out_items := out_items || jsonb_build_object('index', i, 'transaction_id', r_txids[j], 'status', 'duplicate',
                'message_id', r_ids[j], 'queueName', qnames[i + 1]);
        END IF;
    END LOOP;
    RETURN jsonb_build_object('items', out_items, 'partition_updates', updates);
END
$$;
