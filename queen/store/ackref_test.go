package store

// The combined completions statement as it stood before the lease rule
// moved into queen.ack_verdict (migration 019), with the rule in its own
// SQL CASE. It is kept here, in the test build only, as the reference the
// property test TestAckCompletedMatchesTheOldRule holds the new statement
// to. The other statement of the rule, Go's applyAck, is kept beside the
// state machine that replaced it (queen/consume's ackref_test.go).

const refAckCompletedSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[])
		WITH ORDINALITY AS v(pid, txid, lease, grp, tenant, ord)
),
found AS (
	SELECT i.ord, i.pid, i.lease, i.grp, m.id, m.seq, m.created_at, p.name AS pname, q.name AS qname,
		q.tenant_id = i.tenant AS owned
	FROM input i
	JOIN queen.messages m ON m.partition_id = i.pid AND m.transaction_id = i.txid
	JOIN queen.partitions p ON p.id = m.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
),
cur AS (
	SELECT pc.partition_id, pc.consumer_group, pc.last_consumed_seq, pc.worker_id, pc.lease_expires_at, pc.lease_max_seq
	FROM queen.partition_consumers pc
	WHERE (pc.partition_id, pc.consumer_group) IN (SELECT pid, grp FROM found WHERE owned)
		AND (SELECT $8::text IS NULL OR set_config('lock_timeout', $8, true) <> '')
	ORDER BY pc.partition_id, pc.consumer_group
	FOR UPDATE
),
clock AS (SELECT coalesce($6::timestamptz, now()) AS now),
judged AS (
	SELECT f.*, CASE
		WHEN NOT f.owned THEN 'not_owned'
		WHEN c.partition_id IS NULL THEN 'invalid_lease'
		WHEN f.seq <= c.last_consumed_seq THEN 'committed'
		WHEN $7::bool THEN 'ok'
		WHEN c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at <= clock.now THEN 'invalid_lease'
		WHEN f.lease <> '' AND f.lease <> c.worker_id THEN 'invalid_lease'
		WHEN f.seq > c.lease_max_seq THEN 'invalid_lease'
		ELSE 'ok' END AS verdict
	FROM found f LEFT JOIN cur c ON c.partition_id = f.pid AND c.consumer_group = f.grp, clock
),
accepted AS (
	SELECT pid, grp, max(seq) AS seq, count(*) AS n, (array_agg(id ORDER BY seq DESC))[1] AS id,
		(array_agg(created_at ORDER BY seq DESC))[1] AS created_at
	FROM judged WHERE verdict = 'ok' GROUP BY pid, grp
),
moved AS (
	UPDATE queen.partition_consumers pc SET
		last_consumed_seq = a.seq, last_consumed_id = a.id, last_consumed_created_at = a.created_at,
		acked_count = pc.acked_count + a.n,
		lease_expires_at = CASE WHEN a.seq >= pc.lease_max_seq THEN NULL ELSE pc.lease_expires_at END,
		batch_retry_count = CASE WHEN a.seq >= pc.lease_max_seq THEN 0 ELSE pc.batch_retry_count END,
		total_messages_consumed = pc.total_messages_consumed + a.n,
		total_batches_consumed = pc.total_batches_consumed + CASE WHEN a.seq >= pc.lease_max_seq THEN 1 ELSE 0 END,
		last_consumed_at = clock.now
	FROM accepted a, clock
	WHERE pc.partition_id = a.pid AND pc.consumer_group = a.grp
	RETURNING pc.partition_id, pc.consumer_group, a.seq AS top, pc.lease_expires_at IS NULL AS released
)
SELECT i.ord, coalesce(j.verdict, 'not_found'), coalesce(j.qname, ''), coalesce(j.pname, ''),
	coalesce(mv.released AND j.seq = mv.top, false)
FROM input i
LEFT JOIN judged j ON j.ord = i.ord
LEFT JOIN moved mv ON mv.partition_id = j.pid AND mv.consumer_group = j.grp
ORDER BY i.ord`
