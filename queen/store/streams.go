package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Streams: the server side of Queen's streaming SDKs (contract-streams.md).
// A query is registered by name; each cycle (queen/streams composes it of
// the statements below) commits the query's state changes for one source
// partition, its sink pushes and the source ack in one transaction.

// StreamQuery is a registered query.
type StreamQuery struct {
	ID, Name, ConfigHash string
	Fresh, Reset         bool
}

// ErrConfigHashMismatch: the query exists with another operator chain and
// the caller did not consent to a reset. The query's id comes with it.
type ErrConfigHashMismatch struct{ QueryID string }

func (e *ErrConfigHashMismatch) Error() string { return "config_hash mismatch" }

// RegisterParams is one registration.
type RegisterParams struct {
	Tenant, Name, SourceQueue, ConfigHash string
	SinkQueue                             string // "" is none
	Reset                                 bool
}

// ErrStreamsDenied: the tenant may not register another query (no
// enabled grant, or its cap is reached). Only fresh registrations by a
// tenant other than the default one are gated.
type ErrStreamsDenied struct{ Reason string }

func (e *ErrStreamsDenied) Error() string { return e.Reason }

// registerFindSQL reads tenant $1's query named $2 and locks it, so a
// re-registration and a reset of one query run one at a time.
const registerFindSQL = `
SELECT id::text, config_hash FROM queen_streams.queries WHERE tenant_id = $1 AND name = $2 FOR UPDATE`

// registerGrantSQL reads tenant $1's grant and locks it, so fresh
// registrations of one tenant pass the cap one at a time.
const registerGrantSQL = `
SELECT enabled, max_queries FROM queen_streams.quota WHERE tenant_id = $1 FOR UPDATE`

// registerCountSQL counts tenant $1's queries. It runs after the grant's
// lock is held, as its own statement: a statement's snapshot is taken when
// it starts, so a count in the locking statement would miss a query a
// concurrent registration committed while this one waited.
const registerCountSQL = `SELECT count(*) FROM queen_streams.queries WHERE tenant_id = $1`

// registerInsertSQL creates the query unless the tenant has one by that
// name; no row comes back when a concurrent registration created it first.
const registerInsertSQL = `
INSERT INTO queen_streams.queries (id, tenant_id, name, source_queue, sink_queue, config_hash, created_at, updated_at)
VALUES ($1, $2, $3, $4, nullif($5, ''), $6, coalesce($7::timestamptz, now()), coalesce($7::timestamptz, now()))
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING id::text`

// registerWipeSQL deletes query $1's state (a reset).
const registerWipeSQL = `DELETE FROM queen_streams.state WHERE query_id = $1`

// registerUpdateSQL re-attaches query $1 with the caller's queues and hash.
const registerUpdateSQL = `
UPDATE queen_streams.queries SET source_queue = $2, sink_queue = nullif($3, ''), config_hash = $4,
	updated_at = coalesce($5::timestamptz, now())
WHERE id = $1`

// RegisterQuery registers the tenant's query, or re-attaches to it: the
// same name always keeps its id. A new config hash needs Reset, which wipes
// the query's state; without it nothing changes and the answer is
// *ErrConfigHashMismatch. A fresh query of a tenant other than the default
// one needs that tenant's grant (*ErrStreamsDenied); re-attaching never does.
func (s *Store) RegisterQuery(ctx context.Context, p RegisterParams) (StreamQuery, error) {
	q := StreamQuery{Name: p.Name, ConfigHash: p.ConfigHash}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var hash string
		err := tx.QueryRow(ctx, registerFindSQL, p.Tenant, p.Name).Scan(&q.ID, &hash)
		if errors.Is(err, pgx.ErrNoRows) {
			if p.Tenant != DefaultTenant {
				if err := checkStreamsGrant(ctx, tx, p.Tenant); err != nil {
					return err
				}
			}
			err = tx.QueryRow(ctx, registerInsertSQL, s.ids.New(), p.Tenant, p.Name, p.SourceQueue, p.SinkQueue, p.ConfigHash, s.dbNow()).Scan(&q.ID)
			if err == nil {
				q.Fresh = true
				return nil
			}
			if errors.Is(err, pgx.ErrNoRows) { // created meanwhile: re-attach to it
				err = tx.QueryRow(ctx, registerFindSQL, p.Tenant, p.Name).Scan(&q.ID, &hash)
			}
		}
		if err != nil {
			return err
		}
		if hash != p.ConfigHash {
			if !p.Reset {
				return &ErrConfigHashMismatch{QueryID: q.ID}
			}
			if _, err := tx.Exec(ctx, registerWipeSQL, q.ID); err != nil {
				return err
			}
			q.Reset = true
		}
		_, err = tx.Exec(ctx, registerUpdateSQL, q.ID, p.SourceQueue, p.SinkQueue, p.ConfigHash, s.dbNow())
		return err
	})
	return q, err
}

// checkStreamsGrant refuses a fresh query of a tenant without an enabled
// grant, or at its cap.
func checkStreamsGrant(ctx context.Context, tx pgx.Tx, tenant string) error {
	var enabled bool
	var max *int64
	var count int64
	err := tx.QueryRow(ctx, registerGrantSQL, tenant).Scan(&enabled, &max)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && !enabled:
		return &ErrStreamsDenied{Reason: "streams not granted for this tenant"}
	case err != nil:
		return err
	case max == nil:
		return nil
	}
	if err := tx.QueryRow(ctx, registerCountSQL, tenant).Scan(&count); err != nil {
		return err
	}
	if count >= *max {
		return &ErrStreamsDenied{Reason: fmt.Sprintf("streams query quota exceeded (max %d)", *max)}
	}
	return nil
}

// cycleCheckSQL finds the tenant's source partition's queue name ($1
// partition, $2 tenant) and whether the tenant's query $3 exists, then
// serialises cycles of one (query, partition) until commit.
const cycleCheckSQL = `
SELECT (SELECT q.name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = $1 AND q.tenant_id = $2),
	EXISTS (SELECT 1 FROM queen_streams.queries WHERE id = $3 AND tenant_id = $2),
	(SELECT true FROM (SELECT pg_advisory_xact_lock(hashtextextended($3::text || ':' || $1::text, 0))) l)`

// stateUpsertSQL writes the final value of each upserted key.
const stateUpsertSQL = `
INSERT INTO queen_streams.state (query_id, partition_id, key, value, updated_at)
SELECT $1, $2, k, v::jsonb, coalesce($5::timestamptz, now()) FROM unnest($3::text[], $4::text[]) AS x(k, v)
ON CONFLICT (query_id, partition_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`

// stateDeleteSQL removes the deleted keys of one (query, partition).
const stateDeleteSQL = `
DELETE FROM queen_streams.state WHERE query_id = $1 AND partition_id = $2 AND key = ANY ($3::text[])`

// cycleAckCheckSQL reads the acked message ($1 partition, $2
// transactionId) and judges group $3's lease $4 at $5: held, live, and
// covering the message. It locks the cursor row.
const cycleAckCheckSQL = `
WITH m AS (SELECT id, seq, created_at FROM queen.messages WHERE partition_id = $1 AND transaction_id = $2),
pc AS (SELECT worker_id, lease_expires_at, lease_max_seq FROM queen.partition_consumers
	WHERE partition_id = $1 AND consumer_group = $3 FOR UPDATE)
SELECT (SELECT seq FROM m),
	coalesce((SELECT pc.worker_id = $4 AND pc.lease_expires_at > coalesce($5::timestamptz, now())
		AND (SELECT seq FROM m) <= pc.lease_max_seq FROM pc), false)`

// cycleAckSQL moves group $3's cursor in partition $1 to the message $2
// (completed) or keeps it (nack), adds $4 to the consumed count, and gives
// the lease back when $5 (a nack always does). lease_acquired_at stays:
// it orders the partitions' claims.
const cycleAckSQL = `
UPDATE queen.partition_consumers pc SET
	last_consumed_seq = CASE WHEN $6 THEN greatest(pc.last_consumed_seq, m.seq) ELSE pc.last_consumed_seq END,
	last_consumed_id = CASE WHEN $6 AND m.seq > pc.last_consumed_seq THEN m.id ELSE pc.last_consumed_id END,
	last_consumed_created_at = CASE WHEN $6 AND m.seq > pc.last_consumed_seq THEN m.created_at ELSE pc.last_consumed_created_at END,
	last_consumed_at = CASE WHEN $6 THEN coalesce($7::timestamptz, now()) ELSE pc.last_consumed_at END,
	total_messages_consumed = pc.total_messages_consumed + CASE WHEN $6 THEN $4 ELSE 0 END,
	total_batches_consumed = pc.total_batches_consumed + CASE WHEN $6 AND $5 THEN 1 ELSE 0 END,
	worker_id = CASE WHEN $5 THEN NULL ELSE pc.worker_id END,
	lease_expires_at = CASE WHEN $5 THEN NULL ELSE pc.lease_expires_at END,
	batch_size = CASE WHEN $5 THEN 0 ELSE pc.batch_size END,
	acked_count = CASE WHEN $5 THEN 0 ELSE pc.acked_count END,
	batch_retry_count = CASE WHEN $5 AND $6 THEN 0 ELSE pc.batch_retry_count END
FROM queen.messages m
WHERE m.partition_id = $1 AND m.transaction_id = $2 AND pc.partition_id = $1 AND pc.consumer_group = $3`

// CycleCheckParams are cycleCheckSQL's arguments, $1 to $3.
type CycleCheckParams struct {
	PartitionID, Tenant, QueryID string
}

// CycleCheck runs cycleCheckSQL in tx: the name of the queue of the
// tenant's partition (nil: no such partition of the tenant's) and whether
// the tenant's query exists. Cycles of one (query, partition) wait for one
// another from here until tx ends.
func (s *Store) CycleCheck(ctx context.Context, tx pgx.Tx, p CycleCheckParams) (queue *string, queryOK bool, err error) {
	var locked bool
	err = tx.QueryRow(ctx, text("streams.cycleCheck"), argsOf(p)...).Scan(&queue, &queryOK, &locked)
	return queue, queryOK, err
}

// StateUpsertParams are stateUpsertSQL's arguments, $1 to $5; UpsertState
// sets Now.
type StateUpsertParams struct {
	QueryID, PartitionID string
	Keys, Values         []string // JSON values, one per key
	Now                  *time.Time
}

// UpsertState runs stateUpsertSQL in tx.
func (s *Store) UpsertState(ctx context.Context, tx pgx.Tx, p StateUpsertParams) error {
	p.Now = s.dbNow()
	_, err := tx.Exec(ctx, text("streams.stateUpsert"), argsOf(p)...)
	return err
}

// StateDeleteParams are stateDeleteSQL's arguments, $1 to $3.
type StateDeleteParams struct {
	QueryID, PartitionID string
	Keys                 []string
}

// DeleteState runs stateDeleteSQL in tx.
func (s *Store) DeleteState(ctx context.Context, tx pgx.Tx, p StateDeleteParams) error {
	_, err := tx.Exec(ctx, text("streams.stateDelete"), argsOf(p)...)
	return err
}

// CycleAckCheckParams are cycleAckCheckSQL's arguments, $1 to $5;
// CycleAckCheck sets Now.
type CycleAckCheckParams struct {
	PartitionID, TransactionID, Group, LeaseID string
	Now                                        *time.Time
}

// CycleAckCheck runs cycleAckCheckSQL in tx: the acked message's seq (nil:
// no such message) and whether the lease is held, live and covers it. It
// locks the group's cursor row.
func (s *Store) CycleAckCheck(ctx context.Context, tx pgx.Tx, p CycleAckCheckParams) (seq *int64, held bool, err error) {
	p.Now = s.dbNow()
	err = tx.QueryRow(ctx, text("streams.cycleAckCheck"), argsOf(p)...).Scan(&seq, &held)
	return seq, held, err
}

// CycleAckParams are cycleAckSQL's arguments, $1 to $7; CycleAckMove sets
// Now.
type CycleAckParams struct {
	PartitionID, TransactionID, Group string
	Count                             int
	Release, Completed                bool
	Now                               *time.Time
}

// CycleAckMove runs cycleAckSQL in tx.
func (s *Store) CycleAckMove(ctx context.Context, tx pgx.Tx, p CycleAckParams) error {
	p.Now = s.dbNow()
	_, err := tx.Exec(ctx, text("streams.cycleAck"), argsOf(p)...)
	return err
}

// partitionOwnedSQL tells whether partition $1 exists and belongs to a
// queue of tenant $2.
const partitionOwnedSQL = `
SELECT EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = $1 AND q.tenant_id = $2)`

// PartitionOwned tells whether the tenant owns the partition. With tenancy
// on, the streams routes answer 404 for a partition that is not the
// caller's before they open a transaction.
func (s *Store) PartitionOwned(ctx context.Context, tenant, partitionID string) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var owned bool
	err := s.pool.QueryRow(ctx, partitionOwnedSQL, partitionID, tenant).Scan(&owned)
	return owned, err
}

// StateRow is one state row.
type StateRow struct {
	Key       string
	Value     json.RawMessage
	UpdatedAt time.Time
}

// StateFilter narrows a state read within (query, partition).
type StateFilter struct {
	Keys      []string // exact keys (none: all)
	KeyPrefix string   // a literal prefix ("" none)
	RipeAt    *float64 // value.windowEnd, a JSON number, at or before this
}

// stateGetSQL reads tenant $1's query $2's rows for partition $3, sorted
// by key, with the filters ANDed.
const stateGetSQL = `
SELECT s.key, s.value, s.updated_at
FROM queen_streams.state s
JOIN queen_streams.queries q ON q.id = s.query_id
WHERE q.tenant_id = $1 AND s.query_id = $2 AND s.partition_id = $3
	AND (cardinality($4::text[]) = 0 OR s.key = ANY ($4::text[]))
	AND ($5 = '' OR left(s.key, length($5)) = $5)
	AND ($6::float8 IS NULL OR (jsonb_typeof(s.value -> 'windowEnd') = 'number'
		AND (s.value ->> 'windowEnd')::numeric <= $6::float8::numeric))
ORDER BY s.key`

// StateGet reads state rows; an unknown query or partition has none.
func (s *Store) StateGet(ctx context.Context, tenant, queryID, partitionID string, f StateFilter) ([]StateRow, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys := f.Keys
	if keys == nil {
		keys = []string{}
	}
	rows, err := s.pool.Query(ctx, stateGetSQL, tenant, queryID, partitionID, keys, f.KeyPrefix, f.RipeAt)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateRow, error) {
		var row StateRow
		err := r.Scan(&row.Key, &row.Value, &row.UpdatedAt)
		return row, err
	})
}
