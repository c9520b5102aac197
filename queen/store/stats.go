package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Recorded analytics (migration 016): each broker's per-minute buckets,
// written once a minute by the broker in one statement, folded, sampled
// and pruned by the statistics leader, read by the analytics and status
// routes.

// StatsLock is the advisory lock id of the statistics leader.
const StatsLock = 737002

// QueueMinute is what one broker did on one queue in one minute.
type QueueMinute struct {
	Minute                     time.Time
	Tenant, Queue              string
	PushRequests, PushMessages int64
	PopRequests, PopMessages   int64
	PopEmpty                   int64
	AckRequests, AckSuccess    int64
	AckFailed, DLQ             int64
	AutoAcked                  int64 // completed by autoAck pops
	// LagSumMs, LagCount and LagMaxMs describe the age of each message
	// popped, at the pop.
	LagSumMs, LagCount, LagMaxMs int64
}

// BrokerMinute is one broker's own minute: its requests, their latency,
// its CPU and its gauges (sampled several times a minute, each as
// {avg,min,max,last} in Gauges).
type BrokerMinute struct {
	Minute                           time.Time
	Broker, Hostname                 string
	Port                             int
	Requests, ServerErrors, DBErrors int64
	PushRequests, PushMessages       int64
	PopRequests, PopMessages         int64
	AckRequests, AckMessages         int64
	LatencyCount                     int64
	LatencySumMs, LatencyP50Ms       float64
	LatencyP99Ms, LatencyMaxMs       float64
	CPUUserUs, CPUSysUs              int64
	Samples                          int
	Gauges                           json.RawMessage
}

// recordMinutesSQL writes one broker's ($1) closed minutes: its queue rows
// (by tenant and name; a queue deleted since is skipped) and its own rows.
// A row is the broker's whole minute, so a conflict replaces it: a flush
// retried after a lost answer counts once.
const recordMinutesSQL = `
WITH q AS (
	INSERT INTO queen.stats_queue_minutes AS s (queue_id, minute, broker_id, push_requests, push_messages,
		pop_requests, pop_messages, pop_empty, ack_requests, ack_success, ack_failed, dlq, lag_sum_ms, lag_count, lag_max_ms, auto_acked)
	SELECT qq.id, v.minute, $1, v.push_requests, v.push_messages, v.pop_requests, v.pop_messages, v.pop_empty,
		v.ack_requests, v.ack_success, v.ack_failed, v.dlq, v.lag_sum_ms, v.lag_count, v.lag_max_ms, v.auto_acked
	FROM unnest($2::timestamptz[], $3::uuid[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[],
		$10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $38::bigint[])
		AS v(minute, tenant, queue, push_requests, push_messages, pop_requests, pop_messages, pop_empty,
			ack_requests, ack_success, ack_failed, dlq, lag_sum_ms, lag_count, lag_max_ms, auto_acked)
	JOIN queen.queues qq ON qq.tenant_id = v.tenant AND qq.name = v.queue
	ON CONFLICT (queue_id, minute, broker_id) DO UPDATE SET push_requests = EXCLUDED.push_requests,
		push_messages = EXCLUDED.push_messages, pop_requests = EXCLUDED.pop_requests, pop_messages = EXCLUDED.pop_messages,
		pop_empty = EXCLUDED.pop_empty, ack_requests = EXCLUDED.ack_requests, ack_success = EXCLUDED.ack_success,
		ack_failed = EXCLUDED.ack_failed, dlq = EXCLUDED.dlq, lag_sum_ms = EXCLUDED.lag_sum_ms,
		lag_count = EXCLUDED.lag_count, lag_max_ms = EXCLUDED.lag_max_ms, auto_acked = EXCLUDED.auto_acked
	RETURNING 1
)
INSERT INTO queen.stats_broker_minutes AS b (minute, broker_id, hostname, port, requests, server_errors, db_errors,
	push_requests, push_messages, pop_requests, pop_messages, ack_requests, ack_messages,
	latency_count, latency_sum_ms, latency_p50_ms, latency_p99_ms, latency_max_ms, cpu_user_us, cpu_sys_us, samples, gauges)
SELECT v.minute, $1, v.hostname, v.port, v.requests, v.server_errors, v.db_errors, v.push_requests, v.push_messages,
	v.pop_requests, v.pop_messages, v.ack_requests, v.ack_messages, v.latency_count, v.latency_sum_ms, v.latency_p50_ms,
	v.latency_p99_ms, v.latency_max_ms, v.cpu_user_us, v.cpu_sys_us, v.samples, v.gauges
FROM unnest($17::timestamptz[], $18::text[], $19::int[], $20::bigint[], $21::bigint[], $22::bigint[], $23::bigint[], $24::bigint[],
	$25::bigint[], $26::bigint[], $27::bigint[], $28::bigint[], $29::bigint[], $30::float8[], $31::float8[], $32::float8[],
	$33::float8[], $34::bigint[], $35::bigint[], $36::int[], $37::jsonb[])
	AS v(minute, hostname, port, requests, server_errors, db_errors, push_requests, push_messages, pop_requests, pop_messages,
		ack_requests, ack_messages, latency_count, latency_sum_ms, latency_p50_ms, latency_p99_ms, latency_max_ms,
		cpu_user_us, cpu_sys_us, samples, gauges)
ON CONFLICT (minute, broker_id) DO UPDATE SET hostname = EXCLUDED.hostname, port = EXCLUDED.port,
	requests = EXCLUDED.requests, server_errors = EXCLUDED.server_errors, db_errors = EXCLUDED.db_errors,
	push_requests = EXCLUDED.push_requests, push_messages = EXCLUDED.push_messages, pop_requests = EXCLUDED.pop_requests,
	pop_messages = EXCLUDED.pop_messages, ack_requests = EXCLUDED.ack_requests, ack_messages = EXCLUDED.ack_messages,
	latency_count = EXCLUDED.latency_count, latency_sum_ms = EXCLUDED.latency_sum_ms, latency_p50_ms = EXCLUDED.latency_p50_ms,
	latency_p99_ms = EXCLUDED.latency_p99_ms, latency_max_ms = EXCLUDED.latency_max_ms, cpu_user_us = EXCLUDED.cpu_user_us,
	cpu_sys_us = EXCLUDED.cpu_sys_us, samples = EXCLUDED.samples, gauges = EXCLUDED.gauges`

// RecordMinutes writes one broker's closed minutes in one statement.
func (s *Store) RecordMinutes(ctx context.Context, broker string, qs []QueueMinute, bs []BrokerMinute) error {
	if len(qs) == 0 && len(bs) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	q := func(f func(QueueMinute) int64) []int64 { return column(qs, f) }
	b := func(f func(BrokerMinute) int64) []int64 { return column(bs, f) }
	bf := func(f func(BrokerMinute) float64) []float64 { return column(bs, f) }
	// In the order of the statement's parameters, $1 to $38.
	args := []any{broker,
		column(qs, func(r QueueMinute) time.Time { return r.Minute }),
		column(qs, func(r QueueMinute) string { return r.Tenant }),
		column(qs, func(r QueueMinute) string { return r.Queue }),
		q(func(r QueueMinute) int64 { return r.PushRequests }), q(func(r QueueMinute) int64 { return r.PushMessages }),
		q(func(r QueueMinute) int64 { return r.PopRequests }), q(func(r QueueMinute) int64 { return r.PopMessages }),
		q(func(r QueueMinute) int64 { return r.PopEmpty }), q(func(r QueueMinute) int64 { return r.AckRequests }),
		q(func(r QueueMinute) int64 { return r.AckSuccess }), q(func(r QueueMinute) int64 { return r.AckFailed }),
		q(func(r QueueMinute) int64 { return r.DLQ }), q(func(r QueueMinute) int64 { return r.LagSumMs }),
		q(func(r QueueMinute) int64 { return r.LagCount }), q(func(r QueueMinute) int64 { return r.LagMaxMs }),
		column(bs, func(r BrokerMinute) time.Time { return r.Minute }),
		column(bs, func(r BrokerMinute) string { return r.Hostname }),
		column(bs, func(r BrokerMinute) int32 { return int32(r.Port) }),
		b(func(r BrokerMinute) int64 { return r.Requests }), b(func(r BrokerMinute) int64 { return r.ServerErrors }),
		b(func(r BrokerMinute) int64 { return r.DBErrors }), b(func(r BrokerMinute) int64 { return r.PushRequests }),
		b(func(r BrokerMinute) int64 { return r.PushMessages }), b(func(r BrokerMinute) int64 { return r.PopRequests }),
		b(func(r BrokerMinute) int64 { return r.PopMessages }), b(func(r BrokerMinute) int64 { return r.AckRequests }),
		b(func(r BrokerMinute) int64 { return r.AckMessages }), b(func(r BrokerMinute) int64 { return r.LatencyCount }),
		bf(func(r BrokerMinute) float64 { return r.LatencySumMs }), bf(func(r BrokerMinute) float64 { return r.LatencyP50Ms }),
		bf(func(r BrokerMinute) float64 { return r.LatencyP99Ms }), bf(func(r BrokerMinute) float64 { return r.LatencyMaxMs }),
		b(func(r BrokerMinute) int64 { return r.CPUUserUs }), b(func(r BrokerMinute) int64 { return r.CPUSysUs }),
		column(bs, func(r BrokerMinute) int32 { return int32(r.Samples) }),
		column(bs, func(r BrokerMinute) string {
			if len(r.Gauges) == 0 {
				return "{}"
			}
			return string(r.Gauges)
		}),
		q(func(r QueueMinute) int64 { return r.AutoAcked }),
	}
	_, err := s.pool.Exec(ctx, recordMinutesSQL, args...)
	return err
}

// column is one field of every row, a statement's array parameter.
func column[R, V any](rows []R, f func(R) V) []V {
	out := make([]V, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}

// foldStatsSQL merges the per-broker queue rows of minutes before $1 into
// one row per (queue, minute), broker ” (the sampled gauges stay).
const foldStatsSQL = `
WITH gone AS (
	DELETE FROM queen.stats_queue_minutes WHERE broker_id <> '' AND minute < $1
	RETURNING *
)
INSERT INTO queen.stats_queue_minutes AS s (queue_id, minute, broker_id, push_requests, push_messages, pop_requests,
	pop_messages, pop_empty, ack_requests, ack_success, ack_failed, dlq, lag_sum_ms, lag_count, lag_max_ms, auto_acked)
SELECT queue_id, minute, '', sum(push_requests), sum(push_messages), sum(pop_requests), sum(pop_messages), sum(pop_empty),
	sum(ack_requests), sum(ack_success), sum(ack_failed), sum(dlq), sum(lag_sum_ms), sum(lag_count), max(lag_max_ms), sum(auto_acked)
FROM gone GROUP BY queue_id, minute
ON CONFLICT (queue_id, minute, broker_id) DO UPDATE SET push_requests = s.push_requests + EXCLUDED.push_requests,
	push_messages = s.push_messages + EXCLUDED.push_messages, pop_requests = s.pop_requests + EXCLUDED.pop_requests,
	pop_messages = s.pop_messages + EXCLUDED.pop_messages, pop_empty = s.pop_empty + EXCLUDED.pop_empty,
	ack_requests = s.ack_requests + EXCLUDED.ack_requests, ack_success = s.ack_success + EXCLUDED.ack_success,
	ack_failed = s.ack_failed + EXCLUDED.ack_failed, dlq = s.dlq + EXCLUDED.dlq,
	lag_sum_ms = s.lag_sum_ms + EXCLUDED.lag_sum_ms, lag_count = s.lag_count + EXCLUDED.lag_count,
	lag_max_ms = greatest(s.lag_max_ms, EXCLUDED.lag_max_ms), auto_acked = s.auto_acked + EXCLUDED.auto_acked`

// sampleGaugesSQL records, in the folded row of minute $1, each queue
// active in it or the two before (a broker flushes a minute just after it
// closes): its partitions and its queue-mode backlog (from the sequence:
// no message is read).
const sampleGaugesSQL = `
INSERT INTO queen.stats_queue_minutes AS s (queue_id, minute, broker_id, partitions, pending)
SELECT a.queue_id, $1, '', count(p.id),
	coalesce(sum(greatest(p.last_seq - coalesce(pc.last_consumed_seq, 0), 0)), 0)
FROM (SELECT DISTINCT queue_id FROM queen.stats_queue_minutes WHERE minute BETWEEN $1::timestamptz - interval '2 minutes' AND $1) a
JOIN queen.partitions p ON p.queue_id = a.queue_id
LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id AND pc.consumer_group = '__QUEUE_MODE__'
GROUP BY a.queue_id
ON CONFLICT (queue_id, minute, broker_id) DO UPDATE SET partitions = EXCLUDED.partitions, pending = EXCLUDED.pending`

// StatsResult is what one statistics leader pass did.
type StatsResult struct {
	Folded, Sampled, Pruned int64
}

// StatsPass samples the gauges of minute sample, folds the per-broker
// rows of minutes before foldBefore, and deletes buckets before
// pruneBefore, on the leader's session. Each step is idempotent.
func (lead *Leader) StatsPass(ctx context.Context, sample, foldBefore, pruneBefore time.Time) (StatsResult, error) {
	var p StatsResult
	ctx, cancel := lead.s.bound(ctx)
	defer cancel()
	tag, err := lead.conn.Exec(ctx, sampleGaugesSQL, sample)
	if err != nil {
		return p, err
	}
	p.Sampled = tag.RowsAffected()
	if tag, err = lead.conn.Exec(ctx, foldStatsSQL, foldBefore); err != nil {
		return p, err
	}
	p.Folded = tag.RowsAffected()
	for _, sql := range []string{`DELETE FROM queen.stats_queue_minutes WHERE minute < $1`, `DELETE FROM queen.stats_broker_minutes WHERE minute < $1`} {
		if tag, err = lead.conn.Exec(ctx, sql, pruneBefore); err != nil {
			return p, err
		}
		p.Pruned += tag.RowsAffected()
	}
	return p, nil
}

// StatsFilter picks a tenant's recorded queue buckets.
type StatsFilter struct {
	Tenant, Queue, Namespace, Task string // "" matches any
	From, To                       time.Time
	BucketMinutes                  int
}

// QueueBucket is one queue's recorded minutes in one bucket. Partitions
// and Pending are the largest sample of the bucket (-1: none sampled).
type QueueBucket struct {
	Bucket                     time.Time
	Queue                      string
	PushRequests, PushMessages int64
	PopRequests, PopMessages   int64
	PopEmpty                   int64
	AckRequests, AckSuccess    int64
	AckFailed, DLQ             int64
	AutoAcked                  int64
	LagSumMs, LagCount         int64
	LagMaxMs                   int64
	Partitions, Pending        int64
}

// queueBucketsSQL buckets a tenant's queue rows by queue, oldest first.
const queueBucketsSQL = `
SELECT to_timestamp(floor(extract(epoch FROM s.minute) / ($7 * 60)) * ($7 * 60)) AS bucket, q.name,
	sum(s.push_requests)::bigint, sum(s.push_messages)::bigint, sum(s.pop_requests)::bigint, sum(s.pop_messages)::bigint,
	sum(s.pop_empty)::bigint, sum(s.ack_requests)::bigint, sum(s.ack_success)::bigint, sum(s.ack_failed)::bigint,
	sum(s.dlq)::bigint, sum(s.lag_sum_ms)::bigint, sum(s.lag_count)::bigint, max(s.lag_max_ms)::bigint,
	coalesce(max(s.partitions), -1)::bigint, coalesce(max(s.pending), -1)::bigint, sum(s.auto_acked)::bigint
FROM queen.queues q JOIN queen.stats_queue_minutes s ON s.queue_id = q.id AND s.minute >= $5 AND s.minute < $6
WHERE q.tenant_id = $1 AND ($2 = '' OR q.name = $2) AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)
GROUP BY 1, 2 ORDER BY 1, 2`

// QueueBuckets reads the recorded queue buckets of a window.
func (s *Store) QueueBuckets(ctx context.Context, f StatsFilter) ([]QueueBucket, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, queueBucketsSQL, f.Tenant, f.Queue, f.Namespace, f.Task, f.From, f.To, max(f.BucketMinutes, 1))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueBucket, error) {
		var b QueueBucket
		err := r.Scan(&b.Bucket, &b.Queue, &b.PushRequests, &b.PushMessages, &b.PopRequests, &b.PopMessages, &b.PopEmpty,
			&b.AckRequests, &b.AckSuccess, &b.AckFailed, &b.DLQ, &b.LagSumMs, &b.LagCount, &b.LagMaxMs, &b.Partitions, &b.Pending, &b.AutoAcked)
		b.Bucket = b.Bucket.UTC()
		return b, err
	})
}

// brokerMinutesSQL lists the stats minutes in [$1, $2) of broker $3
// (empty: every one).
const brokerMinutesSQL = `SELECT minute, broker_id, hostname, port, requests, server_errors, db_errors,
			push_requests, push_messages, pop_requests, pop_messages, ack_requests, ack_messages, latency_count,
			latency_sum_ms, latency_p50_ms, latency_p99_ms, latency_max_ms, cpu_user_us, cpu_sys_us, samples, gauges
		FROM queen.stats_broker_minutes WHERE minute >= $1 AND minute < $2 AND ($3 = '' OR broker_id = $3)
		ORDER BY minute, broker_id`

// BrokerMinutes reads every broker's minutes in [from, to) (broker "" for
// all), oldest first.
func (s *Store) BrokerMinutes(ctx context.Context, broker string, from, to time.Time) ([]BrokerMinute, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, brokerMinutesSQL, from, to, broker)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BrokerMinute, error) {
		var b BrokerMinute
		err := r.Scan(&b.Minute, &b.Broker, &b.Hostname, &b.Port, &b.Requests, &b.ServerErrors, &b.DBErrors,
			&b.PushRequests, &b.PushMessages, &b.PopRequests, &b.PopMessages, &b.AckRequests, &b.AckMessages,
			&b.LatencyCount, &b.LatencySumMs, &b.LatencyP50Ms, &b.LatencyP99Ms, &b.LatencyMaxMs, &b.CPUUserUs, &b.CPUSysUs,
			&b.Samples, &b.Gauges)
		b.Minute = b.Minute.UTC()
		return b, err
	})
}
