CREATE OR REPLACE FUNCTION queen.append_rows(uuid[], uuid[], text[], text[], text[], text[], timestamptz, boolean[], text, boolean) RETURNS TABLE (ord bigint, message_id text, queued boolean, advanced bigint, needs_seal boolean) LANGUAGE sql VOLATILE SET search_path = pg_catalog, queen, pg_temp AS $queen_statement$
WITH input AS (
	SELECT v.id, v.pid, v.txid, v.trace, v.payload, v.sub, v.enc, v.ord
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $8::boolean[])
		WITH ORDINALITY AS v(id, pid, txid, trace, payload, sub, enc, ord)
),
locked AS (
	SELECT p.id, p.last_seq, q.encryption_enabled AS seal FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	WHERE p.id IN (SELECT pid FROM input) AND (SELECT $9::text IS NULL OR set_config('lock_timeout', $9, true) <> '')
	ORDER BY p.id
	FOR NO KEY UPDATE OF p
),
unsealed AS (
	SELECT 1 FROM input i JOIN locked l ON l.id = i.pid WHERE $10::boolean AND l.seal AND NOT i.enc LIMIT 1
),
fresh AS (
	SELECT i.*, l.last_seq + row_number() OVER (PARTITION BY i.pid ORDER BY i.ord) AS seq
	FROM input i JOIN locked l ON l.id = i.pid
	WHERE NOT EXISTS (SELECT 1 FROM unsealed)
),
appended AS (
	INSERT INTO queen.messages (id, partition_id, seq, transaction_id, trace_id, payload, created_at, producer_sub, is_encrypted)
	SELECT id, pid, seq, txid, nullif(trace, '')::uuid, payload::jsonb, coalesce($7::timestamptz, now()), nullif(sub, ''), enc
	FROM fresh
	ON CONFLICT (partition_id, transaction_id) DO NOTHING
	RETURNING id, partition_id, seq
),
advanced AS (
	UPDATE queen.partitions p
	SET last_seq = a.seq, appended = p.appended + a.n,
		last_message_at = coalesce($7::timestamptz, now()), last_activity = coalesce($7::timestamptz, now())
	FROM (SELECT partition_id, max(seq) AS seq, count(*) AS n FROM appended GROUP BY partition_id) a
	WHERE p.id = a.partition_id
	RETURNING p.id
)
SELECT i.ord, i.id::text, a.id IS NOT NULL, (SELECT count(*) FROM advanced), coalesce($10::boolean AND l.seal AND NOT i.enc, false)
FROM input i LEFT JOIN appended a ON a.id = i.id LEFT JOIN locked l ON l.id = i.pid
ORDER BY i.ord$queen_statement$;
REVOKE EXECUTE ON FUNCTION queen.append_rows(uuid[], uuid[], text[], text[], text[], text[], timestamptz, boolean[], text, boolean) FROM PUBLIC;
CREATE OR REPLACE FUNCTION queen.append_duplicates(uuid[], text[]) RETURNS TABLE (ord bigint, message_id text) LANGUAGE sql STABLE SET search_path = pg_catalog, queen, pg_temp AS $queen_statement$
SELECT v.ord, m.id::text
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS v(pid, txid, ord)
JOIN queen.messages m ON m.partition_id = v.pid AND m.transaction_id = v.txid$queen_statement$;
REVOKE EXECUTE ON FUNCTION queen.append_duplicates(uuid[], text[]) FROM PUBLIC;
