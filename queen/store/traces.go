package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Trace is an event a consumer records against one message
// (contract-admin.md section 5).
type Trace struct {
	ID, TransactionID, PartitionID string
	EventType, ConsumerGroup       string
	WorkerID                       string
	Data                           json.RawMessage
	CreatedAt                      time.Time
	Names                          []string
	// Set by TracesByName only.
	QueueName, PartitionName string
	MessagePayload           json.RawMessage
}

// TraceParams is one trace to record.
type TraceParams struct {
	Tenant, PartitionID, TransactionID string
	ConsumerGroup, EventType, WorkerID string
	Data                               json.RawMessage
	Names                              []string
	// Epoch is the placement epoch of the partition's queue (0: none,
	// without shards: nothing checked); a queue frozen or moved from it
	// fails the trace as a *MovedError.
	Epoch int64
}

// recordTraceSQL stores a trace against the tenant's message ($1
// partition, $2 transactionId, $3 tenant) and its names, in one statement;
// no row comes back when the message does not exist.
const recordTraceSQL = `
WITH m AS (` + recordTraceMessage + `
),` + recordTraceWrites

// recordTraceFencedSQL is recordTraceSQL routed at epoch $11 (shards): the
// message's partition row is read FOR SHARE, which a freeze's rewrite
// conflicts with, and at another epoch fails it as moved.
const recordTraceFencedSQL = `
WITH m AS (` + recordTraceMessage + `
	AND (p.epoch = $11 OR queen.fence_moved(p.queue_id)) FOR SHARE OF p
),` + recordTraceWrites

// recordTraceMessage finds the message of a trace.
const recordTraceMessage = `
	SELECT m.id, m.partition_id FROM queen.messages m
	JOIN queen.partitions p ON p.id = m.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
	WHERE m.partition_id = $1 AND m.transaction_id = $2 AND q.tenant_id = $3`

// recordTraceWrites inserts the trace of message m and its names.
const recordTraceWrites = `
t AS (
	INSERT INTO queen.message_traces (id, message_id, partition_id, transaction_id, consumer_group, event_type, data, created_at, worker_id)
	SELECT $4, m.id, m.partition_id, $2, $5, $6, $7, coalesce($8::timestamptz, now()), $9 FROM m
	RETURNING id
),
n AS (
	INSERT INTO queen.message_trace_names (trace_id, trace_name)
	SELECT t.id, x FROM t, unnest($10::text[]) x
	ON CONFLICT DO NOTHING
)
SELECT id::text FROM t`

// RecordTrace stores a trace and returns its id; ErrNotFound when the
// tenant has no such message.
func (s *Store) RecordTrace(ctx context.Context, p TraceParams) (string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var id string
	args := []any{p.PartitionID, p.TransactionID, p.Tenant, s.ids.New(),
		p.ConsumerGroup, p.EventType, p.Data, s.dbNow(), p.WorkerID, dedupNames(p.Names)}
	sql := recordTraceSQL
	if p.Epoch != 0 {
		sql, args = recordTraceFencedSQL, append(args, p.Epoch)
	}
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return id, movedOr(err)
}

func dedupNames(names []string) []string {
	seen, out := map[string]bool{}, []string{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// traceColumns are the columns every trace read returns, t being
// message_traces; names come from a lateral aggregate.
const traceColumns = `t.id::text, t.transaction_id, t.partition_id::text, t.event_type, t.consumer_group,
	coalesce(t.worker_id, ''), t.data, t.created_at,
	coalesce((SELECT array_agg(n.trace_name ORDER BY n.trace_name) FROM queen.message_trace_names n WHERE n.trace_id = t.id), '{}')`

func scanTrace(row pgx.Row, extra ...any) (Trace, error) {
	var t Trace
	err := row.Scan(append([]any{&t.ID, &t.TransactionID, &t.PartitionID, &t.EventType, &t.ConsumerGroup,
		&t.WorkerID, &t.Data, &t.CreatedAt, &t.Names}, extra...)...)
	return t, err
}

// tracesOfMessageSQL lists the traces of ($1 partition, $2 transactionId)
// under tenant $3, oldest first.
const tracesOfMessageSQL = `
SELECT ` + traceColumns + `
FROM queen.message_traces t
JOIN queen.partitions p ON p.id = t.partition_id
JOIN queen.queues q ON q.id = p.queue_id
WHERE t.partition_id = $1 AND t.transaction_id = $2 AND q.tenant_id = $3
ORDER BY t.created_at, t.id`

// TracesOf lists one message's traces, oldest first (none: empty).
func (s *Store) TracesOf(ctx context.Context, tenant, partitionID, txid string) ([]Trace, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, tracesOfMessageSQL, partitionID, txid, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Trace, error) { return scanTrace(r) })
}

// tracesByNameSQL pages through the traces named $2 under tenant $1,
// oldest first, with their queue, partition and the message payload as
// stored; the last column is the name's total.
const tracesByNameSQL = `
SELECT ` + traceColumns + `, q.name, p.name, m.payload, count(*) OVER ()
FROM queen.message_trace_names tn
JOIN queen.message_traces t ON t.id = tn.trace_id
JOIN queen.partitions p ON p.id = t.partition_id
JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN queen.messages m ON m.id = t.message_id
WHERE tn.trace_name = $2 AND q.tenant_id = $1
ORDER BY t.created_at, t.id
LIMIT $3 OFFSET $4`

// tracesByNameCountSQL counts tenant $1's traces named $2.
const tracesByNameCountSQL = `SELECT count(*) FROM queen.message_trace_names tn
			JOIN queen.message_traces t ON t.id = tn.trace_id JOIN queen.partitions p ON p.id = t.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE tn.trace_name = $2 AND q.tenant_id = $1`

// TracesByName pages through one name's traces and counts them all.
func (s *Store) TracesByName(ctx context.Context, tenant, name string, limit, offset int) ([]Trace, int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, tracesByNameSQL, tenant, name, limit, offset)
	if err != nil {
		return nil, 0, err
	}
	var total int64
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Trace, error) {
		var qname, pname string
		var payload json.RawMessage
		t, err := scanTrace(r, &qname, &pname, &payload, &total)
		t.QueueName, t.PartitionName, t.MessagePayload = qname, pname, payload
		return t, err
	})
	if err != nil {
		return nil, 0, err
	}
	if len(out) == 0 && offset > 0 {
		// Past the end: count without the page.
		err = s.pool.QueryRow(ctx, tracesByNameCountSQL, tenant, name).Scan(&total)
	}
	return out, total, err
}

// TraceName is one trace name's summary.
type TraceName struct {
	Name                     string
	TraceCount, MessageCount int64
	LastSeen                 time.Time
}

// traceNamesSQL summarises tenant $1's trace names, most recently seen
// first; the last column is the number of names.
const traceNamesSQL = `
SELECT tn.trace_name, count(*), count(DISTINCT t.message_id), max(t.created_at), count(*) OVER ()
FROM queen.message_trace_names tn
JOIN queen.message_traces t ON t.id = tn.trace_id
JOIN queen.partitions p ON p.id = t.partition_id
JOIN queen.queues q ON q.id = p.queue_id
WHERE q.tenant_id = $1
GROUP BY tn.trace_name
ORDER BY max(t.created_at) DESC, tn.trace_name
LIMIT $2 OFFSET $3`

// TraceNames pages through the tenant's trace names and counts them.
func (s *Store) TraceNames(ctx context.Context, tenant string, limit, offset int) ([]TraceName, int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, traceNamesSQL, tenant, limit, offset)
	if err != nil {
		return nil, 0, err
	}
	var total int64
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TraceName, error) {
		var n TraceName
		err := r.Scan(&n.Name, &n.TraceCount, &n.MessageCount, &n.LastSeen, &total)
		return n, err
	})
	return out, total, err
}

// traceNameCountsSQL is traceNamesSQL for the names $2 only, unpaged.
const traceNameCountsSQL = `
SELECT tn.trace_name, count(*), count(DISTINCT t.message_id), max(t.created_at)
FROM queen.message_trace_names tn
JOIN queen.message_traces t ON t.id = tn.trace_id
JOIN queen.partitions p ON p.id = t.partition_id
JOIN queen.queues q ON q.id = p.queue_id
WHERE q.tenant_id = $1 AND tn.trace_name = ANY($2::text[])
GROUP BY tn.trace_name`

// TraceNameCounts summarises the tenant's traces of the names given (a
// page of them: a broker with shards sums each name's counts over every
// shard). A name without traces here is absent.
func (s *Store) TraceNameCounts(ctx context.Context, tenant string, names []string) ([]TraceName, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, traceNameCountsSQL, tenant, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TraceName, error) {
		var n TraceName
		err := r.Scan(&n.Name, &n.TraceCount, &n.MessageCount, &n.LastSeen)
		return n, err
	})
}
