package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
)

// KVOp is one operation on a tenant's key-value rows. A row whose
// expires_at has passed is absent to every operation at once, whether or
// not the sweeper has pruned it yet.
type KVOp struct {
	Op      string // get getMany getPrefix put putIfAbsent incr delete
	NS, Key string
	Keys    []string // getMany
	Prefix  string   // getPrefix
	Limit   int      // getPrefix
	Value   json.RawMessage
	// TTLSeconds > 0 expires the row that long after the write; 0 keeps it
	// forever (put) or keeps the row's expiry (incr).
	TTLSeconds float64
	Expect     *int64  // put, delete: the version the row must have; 0: absent
	By         float64 // incr
	Required   bool    // a lost precondition aborts the whole call
}

// KVRow is one live row.
type KVRow struct {
	Key     string
	Value   json.RawMessage
	Version int64
}

// KVResult is one operation's outcome: Found/Value/Version for reads and
// for the row as it stands after a write; Applied for writes; Rows for the
// many-row reads.
type KVResult struct {
	Op      string
	Found   bool
	Value   json.RawMessage
	Version int64
	Applied bool
	Rows    []KVRow
	// Reason says why a write was not applied: version (expect did not
	// match), exists (putIfAbsent on a live row), absent, not_a_number.
	Reason string
}

// KVPrecondition is the error of a call whose required op lost its
// precondition: nothing of the call was written.
type KVPrecondition struct {
	Index  int
	Result KVResult
}

func (e *KVPrecondition) Error() string {
	return fmt.Sprintf("kv op %d (%s): precondition failed: %s", e.Index, e.Result.Op, e.Result.Reason)
}

// The KV statements take named arguments (pgx.NamedArgs): @tenant, @ns,
// @key (or @keys, @prefix), @value, @by, @ttl, @expect, @limit and @now, the
// injected now.
const kvLive = `(expires_at IS NULL OR expires_at > coalesce(@now::timestamptz, now()))`

const (
	kvGetSQL = `SELECT key, value, version FROM queen.kv
WHERE tenant_id = @tenant AND namespace = @ns AND key = ANY(@keys::text[]) AND ` + kvLive + ` ORDER BY key`

	kvGetPrefixSQL = `SELECT key, value, version FROM queen.kv
WHERE tenant_id = @tenant AND namespace = @ns AND left(key, length(@prefix::text)) = @prefix::text AND ` + kvLive + `
ORDER BY key LIMIT @limit`

	// kvPutSQL writes unconditionally (@expect NULL) or only over an
	// absent or expired row (@expect 0).
	kvPutSQL = `
INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, expires_at, created_at, updated_at)
VALUES (@tenant, @ns, @key, @value::jsonb,
	CASE WHEN @ttl::float8 > 0 THEN coalesce(@now::timestamptz, now()) + make_interval(secs => @ttl::float8) END,
	coalesce(@now::timestamptz, now()), coalesce(@now::timestamptz, now()))
ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at,
	version = nextval('queen.kv_version_seq'), updated_at = excluded.updated_at
WHERE @expect::bigint IS NULL OR NOT (k.expires_at IS NULL OR k.expires_at > coalesce(@now::timestamptz, now()))
RETURNING version`

	// kvReplaceSQL writes only over the live row of version @expect.
	kvReplaceSQL = `
UPDATE queen.kv SET value = @value::jsonb, version = nextval('queen.kv_version_seq'),
	updated_at = coalesce(@now::timestamptz, now()),
	expires_at = CASE WHEN @ttl::float8 > 0 THEN coalesce(@now::timestamptz, now()) + make_interval(secs => @ttl::float8) END
WHERE tenant_id = @tenant AND namespace = @ns AND key = @key AND version = @expect::bigint AND ` + kvLive + `
RETURNING version`

	// kvIncrSQL adds @by to a number (an absent or expired row counts as
	// 0); a live row holding something else is left alone.
	kvIncrSQL = `
INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, expires_at, created_at, updated_at)
VALUES (@tenant, @ns, @key, to_jsonb(@by::numeric),
	CASE WHEN @ttl::float8 > 0 THEN coalesce(@now::timestamptz, now()) + make_interval(secs => @ttl::float8) END,
	coalesce(@now::timestamptz, now()), coalesce(@now::timestamptz, now()))
ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
	value = to_jsonb(CASE WHEN k.expires_at IS NULL OR k.expires_at > coalesce(@now::timestamptz, now())
		THEN (k.value #>> '{}')::numeric ELSE 0 END + @by::numeric),
	expires_at = CASE WHEN @ttl::float8 > 0 THEN excluded.expires_at
		WHEN k.expires_at IS NULL OR k.expires_at > coalesce(@now::timestamptz, now()) THEN k.expires_at END,
	version = nextval('queen.kv_version_seq'), updated_at = excluded.updated_at
WHERE jsonb_typeof(k.value) = 'number' OR NOT (k.expires_at IS NULL OR k.expires_at > coalesce(@now::timestamptz, now()))
RETURNING value, version`

	kvDeleteSQL = `
DELETE FROM queen.kv WHERE tenant_id = @tenant AND namespace = @ns AND key = @key
	AND (@expect::bigint IS NULL OR version = @expect::bigint) AND ` + kvLive + `
RETURNING version`
)

// ErrKVReadTooLarge is the error of a call whose reads would return more
// than its maxRead bytes of values: nothing of the call was written.
var ErrKVReadTooLarge = errors.New("kv: the call reads more than QUEEN_KV_MAX_READ_BYTES")

// ApplyKV runs the operations in one transaction and answers one result
// each. When a Required op loses its precondition, nothing is written and
// the error is a *KVPrecondition; when the values read exceed maxRead bytes
// (0: no bound), nothing is written and the error is ErrKVReadTooLarge.
func (s *Store) ApplyKV(ctx context.Context, tenant string, ops []KVOp, maxRead int) ([]KVResult, error) {
	var out []KVResult
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, _ time.Time) error {
		var err error
		out, err = s.applyKV(ctx, tx, tenant, ops, maxRead)
		return err
	})
	return out, err
}

func (s *Store) applyKV(ctx context.Context, q querier, tenant string, ops []KVOp, maxRead int) ([]KVResult, error) {
	out := make([]KVResult, len(ops))
	read := 0
	for i, op := range ops {
		r, err := s.kvOp(ctx, q, tenant, op)
		if err != nil {
			return nil, fmt.Errorf("kv op %d (%s): %w", i, op.Op, err)
		}
		if op.Required && lostPrecondition(r) {
			return nil, &KVPrecondition{Index: i, Result: r}
		}
		read += len(r.Value)
		for _, row := range r.Rows {
			read += len(row.Value)
		}
		if maxRead > 0 && read > maxRead {
			return nil, ErrKVReadTooLarge
		}
		out[i] = r
	}
	return out, nil
}

func lostPrecondition(r KVResult) bool {
	switch r.Op {
	case "get":
		return !r.Found
	case "getMany", "getPrefix":
		return false
	}
	return !r.Applied
}

// kvArgs are an op's named arguments.
func (s *Store) kvArgs(tenant string, op KVOp) pgx.NamedArgs {
	keys := op.Keys
	if op.Op != "getMany" {
		keys = []string{op.Key}
	}
	value := string(op.Value)
	if op.Value == nil {
		value = "null"
	}
	return pgx.NamedArgs{"tenant": tenant, "ns": op.NS, "key": op.Key, "keys": keys, "prefix": op.Prefix,
		"value": value, "by": op.By, "ttl": op.TTLSeconds, "expect": op.Expect, "limit": op.Limit, "now": s.dbNow()}
}

func (s *Store) kvOp(ctx context.Context, q querier, tenant string, op KVOp) (KVResult, error) {
	r := KVResult{Op: op.Op}
	switch op.Op {
	case "get":
		rows, err := s.kvRows(ctx, q, kvGetSQL, s.kvArgs(tenant, op))
		if err != nil || len(rows) == 0 {
			return r, err
		}
		r.Found, r.Value, r.Version = true, rows[0].Value, rows[0].Version
	case "getMany":
		rows, err := s.kvRows(ctx, q, kvGetSQL, s.kvArgs(tenant, op))
		r.Rows = rows
		return r, err
	case "getPrefix":
		rows, err := s.kvRows(ctx, q, kvGetPrefixSQL, s.kvArgs(tenant, op))
		r.Rows = rows
		return r, err
	case "put", "putIfAbsent":
		if op.Op == "putIfAbsent" {
			zero := int64(0)
			op.Expect = &zero
		}
		sql := kvPutSQL
		if op.Expect != nil && *op.Expect != 0 {
			sql = kvReplaceSQL
		}
		err := q.QueryRow(ctx, sql, s.kvArgs(tenant, op)).Scan(&r.Version)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.kvNotApplied(ctx, q, tenant, op, r, "version")
		}
		if err != nil {
			return r, err
		}
		r.Applied, r.Found, r.Value = true, true, op.Value
	case "incr":
		var v []byte
		err := q.QueryRow(ctx, kvIncrSQL, s.kvArgs(tenant, op)).Scan(&v, &r.Version)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.kvNotApplied(ctx, q, tenant, op, r, "not_a_number")
		}
		if err != nil {
			return r, err
		}
		r.Applied, r.Found, r.Value = true, true, v
	case "delete":
		err := q.QueryRow(ctx, kvDeleteSQL, s.kvArgs(tenant, op)).Scan(&r.Version)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.kvNotApplied(ctx, q, tenant, op, r, "version")
		}
		if err != nil {
			return r, err
		}
		r.Applied = true
	default:
		return r, fmt.Errorf("unknown kv op %q", op.Op)
	}
	return r, nil
}

// kvNotApplied reports the row as it stands, and why the write missed.
func (s *Store) kvNotApplied(ctx context.Context, q querier, tenant string, op KVOp, r KVResult, why string) (KVResult, error) {
	get := op
	get.Op = "get"
	rows, err := s.kvRows(ctx, q, kvGetSQL, s.kvArgs(tenant, get))
	if err != nil {
		return r, err
	}
	r.Reason = why
	if len(rows) == 0 {
		r.Reason = "absent"
		return r, nil
	}
	r.Found, r.Value, r.Version = true, rows[0].Value, rows[0].Version
	if op.Op == "putIfAbsent" || (op.Expect != nil && *op.Expect == 0) {
		r.Reason = "exists"
	}
	return r, nil
}

func (s *Store) kvRows(ctx context.Context, q querier, sql string, args pgx.NamedArgs) ([]KVRow, error) {
	if canary.On("kv-ttl-ignored") {
		// Reads see expired rows until the sweeper prunes them.
		sql = strings.Replace(sql, kvLive, "true", 1)
	}
	res, err := q.Query(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	var out []KVRow
	for res.Next() {
		var r KVRow
		var v []byte
		if err := res.Scan(&r.Key, &v, &r.Version); err != nil {
			res.Close()
			return nil, err
		}
		r.Value = v
		out = append(out, r)
	}
	return out, res.Err()
}
