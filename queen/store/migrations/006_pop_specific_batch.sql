-- queen.pop_specific_batch (contract-admin.md 7.3): pops named partitions
-- from SQL, under real leases the HTTP routes honour. Each request item:
-- idx, queue_name, partition_name (no wildcard), consumer_group (default
-- __QUEUE_MODE__), batch_size (default 10), lease_seconds (0: the queue's
-- leaseTime, else 60), worker_id (the lease id; default a fresh UUID),
-- sub_mode and sub_from (the HTTP pop's first-contact rules), and _tenant
-- (default: the default tenant). Items run in (queue_name, partition_name)
-- order and answer [{"idx", "result"}] in that order.
--
-- The claim keeps the broker's invariants: the group's cursor row is taken
-- FOR UPDATE and only when no live lease holds it; the messages read are
-- the prefix after the cursor that delayedProcessing does not hide; the
-- lease covers exactly them (batch_size is their count, lease_max_seq the
-- last), so an HTTP ack with leaseId = worker_id settles them, and a claim
-- that found nothing holds nothing. Payloads are returned as stored (an
-- encrypted queue's are sealed: only the broker holds the key).

CREATE OR REPLACE FUNCTION queen.pop_specific_batch(requests jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    r        record;
    q        record;
    p        record;
    c        record;
    res      jsonb;
    out      jsonb := '[]';
    tenant   uuid;
    grp      text;
    mode     text;
    from_raw text;
    from_ts  timestamptz;
    batch    int;
    lease    int;
    worker   text;
    hidden   bigint;
    msgs     jsonb;
    n        int;
    last     bigint;
    ts       timestamptz := now();
BEGIN
    IF requests IS NULL OR jsonb_typeof(requests) <> 'array' THEN
        RAISE EXCEPTION 'requests must be a JSON array' USING ERRCODE = '22023';
    END IF;
    FOR r IN
        SELECT e AS it, coalesce((e ->> 'idx')::int, (o - 1)::int) AS idx,
            coalesce(e ->> 'queue_name', '') AS qn, coalesce(e ->> 'partition_name', '') AS pn
        FROM jsonb_array_elements(requests) WITH ORDINALITY AS x(e, o)
        ORDER BY 3, 4, o
    LOOP
        tenant := coalesce(nullif(r.it ->> '_tenant', '')::uuid, '00000000-0000-0000-0000-000000000001');
        grp := coalesce(nullif(r.it ->> 'consumer_group', ''), '__QUEUE_MODE__');
        batch := greatest(coalesce((r.it ->> 'batch_size')::int, 10), 1);
        worker := coalesce(nullif(r.it ->> 'worker_id', ''), gen_random_uuid()::text);
        -- The queue row is locked as the broker's subscribe locks it, so a
        -- subscription and a partition's creation never miss each other.
        SELECT id, lease_time, delayed_processing, window_buffer INTO q
        FROM queen.queues WHERE tenant_id = tenant AND name = r.qn FOR UPDATE;
        SELECT id, last_seq, last_message_at INTO p FROM queen.partitions WHERE queue_id = q.id AND name = r.pn;
        IF p.id IS NULL THEN
            out := out || jsonb_build_array(jsonb_build_object('idx', r.idx, 'result',
                jsonb_build_object('success', false, 'error', 'partition_not_found', 'messages', '[]'::jsonb)));
            CONTINUE;
        END IF;
        res := jsonb_build_object('success', true, 'queue', r.qn, 'partition', r.pn, 'partitionId', p.id,
            'leaseId', worker, 'consumerGroup', grp);
        -- First contact subscribes the group, as an HTTP pop would: new,
        -- now or a timestamp start there; anything else reads from the start.
        mode := 'all';
        from_ts := NULL;
        from_raw := coalesce(r.it ->> 'sub_from', '');
        IF grp <> '__QUEUE_MODE__' THEN
            IF lower(trim(coalesce(r.it ->> 'sub_mode', ''))) IN ('new', 'new-only', 'new_only', 'newonly') THEN
                mode := 'new';
            END IF;
            IF lower(trim(from_raw)) = 'now' THEN
                mode := 'new';
            ELSIF from_raw <> '' THEN
                BEGIN
                    from_ts := from_raw::timestamptz;
                    mode := 'from';
                EXCEPTION WHEN others THEN
                    from_ts := NULL; -- unparsable: ignored, as the HTTP pop does
                END;
            END IF;
        END IF;
        INSERT INTO queen.consumer_groups_metadata
            (tenant_id, consumer_group, queue_name, subscription_mode, subscription_timestamp, created_at)
        VALUES (tenant, grp, r.qn, mode, coalesce(from_ts, ts), ts)
        ON CONFLICT DO NOTHING;
        INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, last_consumed_seq, created_at)
        SELECT x.id, x.queue_id, grp,
            CASE WHEN m.subscription_mode = 'all' THEN 0
            ELSE coalesce((SELECT max(y.seq) FROM queen.messages y
                WHERE y.partition_id = x.id AND y.created_at <= m.subscription_timestamp), 0) END,
            ts
        FROM queen.partitions x,
            (SELECT subscription_mode, subscription_timestamp FROM queen.consumer_groups_metadata
             WHERE tenant_id = tenant AND consumer_group = grp AND queue_name = r.qn
                AND partition_name = '' AND namespace = '' AND task = '') m
        WHERE x.queue_id = q.id
        ON CONFLICT DO NOTHING;
        IF q.window_buffer > 0 AND p.last_message_at > ts - make_interval(secs => q.window_buffer) THEN
            out := out || jsonb_build_array(jsonb_build_object('idx', r.idx, 'result',
                res || jsonb_build_object('leaseId', '', 'messages', '[]'::jsonb, 'windowBufferActive', true)));
            CONTINUE;
        END IF;
        SELECT * INTO c FROM queen.partition_consumers WHERE partition_id = p.id AND consumer_group = grp FOR UPDATE;
        IF c.lease_expires_at IS NOT NULL AND c.lease_expires_at > ts THEN
            out := out || jsonb_build_array(jsonb_build_object('idx', r.idx, 'result',
                jsonb_build_object('success', false, 'error', 'lease_held', 'messages', '[]'::jsonb)));
            CONTINUE;
        END IF;
        hidden := NULL;
        IF q.delayed_processing > 0 THEN
            SELECT min(h.seq) INTO hidden FROM queen.messages h
            WHERE h.partition_id = p.id AND h.seq > c.last_consumed_seq
                AND h.created_at > ts - make_interval(secs => q.delayed_processing);
        END IF;
        SELECT count(*), max(m.seq),
            coalesce(jsonb_agg(jsonb_build_object('id', m.id, 'transactionId', m.transaction_id, 'traceId', m.trace_id,
                'data', m.payload, 'producerSub', m.producer_sub,
                'createdAt', (extract(epoch FROM m.created_at) * 1000000)::bigint) ORDER BY m.seq), '[]')
        INTO n, last, msgs
        FROM (SELECT * FROM queen.messages m WHERE m.partition_id = p.id AND m.seq > c.last_consumed_seq
                AND (hidden IS NULL OR m.seq < hidden)
              ORDER BY m.seq LIMIT batch) m;
        IF n > 0 THEN
            lease := coalesce(nullif((r.it ->> 'lease_seconds')::int, 0), nullif(q.lease_time, 0), 60);
            UPDATE queen.partition_consumers SET lease_acquired_at = ts, worker_id = worker,
                lease_expires_at = ts + make_interval(secs => lease), batch_size = n, acked_count = 0, lease_max_seq = last
            WHERE partition_id = p.id AND consumer_group = grp;
        END IF;
        out := out || jsonb_build_array(jsonb_build_object('idx', r.idx, 'result', res || jsonb_build_object('messages', msgs)));
    END LOOP;
    RETURN out;
END $$;
