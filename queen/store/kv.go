package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// KVOp is one operation on a tenant's key-value rows. A row whose
// expires_at has passed is absent to every operation at once, whether or
// not the sweeper has pruned it yet.
type KVOp struct {
	Op       string // get getMany getPrefix put putIfAbsent incr delete
	NS, Key  string
	Keys     []string // getMany
	Prefix   string   // getPrefix
	After    string   // getPrefix: keys strictly after this one ("" from the start)
	Limit    int      // getPrefix
	KeysOnly bool     // getMany, getPrefix: rows without their values
	Value    json.RawMessage
	// TTLSeconds > 0 expires the row that long after the write; 0 keeps it
	// forever. An incr applies it only when it creates the row (an absent
	// or expired one): a live counter keeps its expiry, so a fixed window
	// closes even while it is incremented.
	TTLSeconds float64
	Expect     *int64   // put, delete: the version the row must have; 0: absent
	Delta      float64  // incr
	Min, Max   *float64 // incr: bounds the result may not cross (nil: none)
	Required   bool     // a lost precondition aborts the whole call
}

// KVRow is one live row.
type KVRow struct {
	Key       string
	Value     json.RawMessage // nil for a keys-only read
	Version   int64
	ExpiresAt *time.Time // nil: forever
	UpdatedAt time.Time
}

// KVResult is one operation's outcome: Found/Value/Version for reads and
// for the row as it stands after a write; Applied for writes; Rows for the
// many-row reads.
type KVResult struct {
	Op        string
	Key       string
	Found     bool
	Value     json.RawMessage
	Version   int64
	ExpiresAt *time.Time
	UpdatedAt time.Time
	Applied   bool
	Rows      []KVRow
	Missing   []string // getMany: keys with no live row
	// Truncated: getPrefix has more rows after NextAfter, or the call's
	// read budget cut a many-row read short (keys cut from a getMany are
	// neither in Rows nor in Missing).
	Truncated bool
	NextAfter string
	// Reason says why a write was not applied: version (expect did not
	// match), exists (putIfAbsent on a live row), absent, type (incr on a
	// value that is not a number), limit (incr would cross min or max).
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
// @key (or @keys, @prefix and @after), @value, @delta, @min, @max, @ttl,
// @expect, @limit and @now, the injected now.
const kvLive = `(expires_at IS NULL OR expires_at > coalesce(@now::timestamptz, now()))`

const (
	kvGetSQL = `SELECT key, value, version, expires_at, updated_at FROM queen.kv
WHERE tenant_id = @tenant AND namespace = @ns AND key = ANY(@keys::text[]) AND ` + kvLive + ` ORDER BY key`

	// kvGetPrefixSQL reads one more row than the page, which tells
	// whether the page is the last.
	//
	// The prefix is a range on the C-collated key, [prefix, upper), where
	// upper is the least string past every string the prefix starts
	// (prefixUpper): the primary key serves it, reading only the page.
	// Before, left(key, length(prefix)) = prefix read the whole namespace.
	kvGetPrefixSQL = `SELECT key, value, version, expires_at, updated_at FROM queen.kv
WHERE tenant_id = @tenant AND namespace = @ns AND key >= @prefix::text AND key < @upper::text
	AND key > @after::text AND ` + kvLive + `
ORDER BY key LIMIT @limit::int + 1`

	// kvGetPrefixOpenSQL is kvGetPrefixSQL for a prefix with no upper
	// bound (empty, or made of U+10FFFF only): every key from it on
	// starts with it.
	kvGetPrefixOpenSQL = `SELECT key, value, version, expires_at, updated_at FROM queen.kv
WHERE tenant_id = @tenant AND namespace = @ns AND key >= @prefix::text
	AND key > @after::text AND ` + kvLive + `
ORDER BY key LIMIT @limit::int + 1`

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
RETURNING version, expires_at, updated_at`

	// kvReplaceSQL writes only over the live row of version @expect.
	kvReplaceSQL = `
UPDATE queen.kv SET value = @value::jsonb, version = nextval('queen.kv_version_seq'),
	updated_at = coalesce(@now::timestamptz, now()),
	expires_at = CASE WHEN @ttl::float8 > 0 THEN coalesce(@now::timestamptz, now()) + make_interval(secs => @ttl::float8) END
WHERE tenant_id = @tenant AND namespace = @ns AND key = @key AND version = @expect::bigint AND ` + kvLive + `
RETURNING version, expires_at, updated_at`

	// kvIncrNext is a live number plus @delta; NULL for any other value
	// (the CASE keeps the cast away from a non-number).
	kvIncrNext = `(CASE WHEN jsonb_typeof(k.value) = 'number' THEN (k.value #>> '{}')::numeric END + @delta::numeric)`

	// kvIncrUpdateSQL adds @delta to a live counter unless the result would
	// cross @min or @max. The counter keeps its expiry, so a fixed window
	// closes while it is hit. A concurrent writer's commit makes PostgreSQL
	// re-check the row, so the bounds hold for the value actually updated.
	kvIncrUpdateSQL = `
UPDATE queen.kv AS k SET value = to_jsonb(` + kvIncrNext + `), version = nextval('queen.kv_version_seq'),
	updated_at = coalesce(@now::timestamptz, now())
WHERE k.tenant_id = @tenant AND k.namespace = @ns AND k.key = @key
	AND (k.expires_at IS NULL OR k.expires_at > coalesce(@now::timestamptz, now()))
	AND ` + kvIncrNext + ` IS NOT NULL
	AND (@min::numeric IS NULL OR ` + kvIncrNext + ` >= @min::numeric)
	AND (@max::numeric IS NULL OR ` + kvIncrNext + ` <= @max::numeric)
RETURNING value, version, expires_at, updated_at`

	// kvIncrCreateSQL starts a counter at @delta with @ttl where there is
	// none, or only an expired row; no row comes back when a live one is
	// there (created meanwhile). The caller checked @delta's bounds.
	kvIncrCreateSQL = `
INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, expires_at, created_at, updated_at)
VALUES (@tenant, @ns, @key, to_jsonb(@delta::numeric),
	CASE WHEN @ttl::float8 > 0 THEN coalesce(@now::timestamptz, now()) + make_interval(secs => @ttl::float8) END,
	coalesce(@now::timestamptz, now()), coalesce(@now::timestamptz, now()))
ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at,
	version = nextval('queen.kv_version_seq'), updated_at = excluded.updated_at
WHERE NOT (k.expires_at IS NULL OR k.expires_at > coalesce(@now::timestamptz, now()))
RETURNING value, version, expires_at, updated_at`

	kvDeleteSQL = `
DELETE FROM queen.kv WHERE tenant_id = @tenant AND namespace = @ns AND key = @key
	AND (@expect::bigint IS NULL OR version = @expect::bigint) AND ` + kvLive + `
RETURNING version`
)

// ErrKVReadTooLarge is the error of a call whose single-key reads alone
// exceed its read budget: nothing of the call was written. Many-row reads
// are cut short at the budget instead (Truncated).
var ErrKVReadTooLarge = errors.New("kv: the call reads more than QUEEN_KV_MAX_READ_BYTES")

// ApplyKV runs the operations in one transaction and answers one result
// each. When a Required op loses its precondition, nothing is written and
// the error is a *KVPrecondition. maxRead bounds the value bytes the call
// reads (0: no bound): a getMany or getPrefix stops at it and says
// Truncated; a get past it fails the call with ErrKVReadTooLarge.
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
	budget := kvBudget{left: maxRead, bounded: maxRead > 0}
	for i, op := range ops {
		r, err := s.kvOp(ctx, q, tenant, op, &budget)
		if err != nil {
			return nil, fmt.Errorf("kv op %d (%s): %w", i, op.Op, err)
		}
		if op.Required && lostPrecondition(r) {
			return nil, &KVPrecondition{Index: i, Result: r}
		}
		if readsValue(op, r) && !budget.take(len(r.Value)) {
			return nil, ErrKVReadTooLarge
		}
		out[i] = r
	}
	return out, nil
}

// readsValue tells whether r's value was read (a get, or the row as it
// stands after a write that did not apply) rather than written; only
// reads count against the budget. Many-row reads count their rows as they
// are trimmed.
func readsValue(op KVOp, r KVResult) bool {
	return op.Op == "get" || !r.Applied && r.Found && op.Op != "getMany" && op.Op != "getPrefix"
}

// kvBudget is what is left of a call's read budget.
type kvBudget struct {
	left    int
	bounded bool
}

// take spends n bytes; false when they are not there.
func (b *kvBudget) take(n int) bool {
	if !b.bounded {
		return true
	}
	b.left -= n
	return b.left >= 0
}

// trim keeps the rows whose values fit the budget, spending it; false
// when some were cut.
func (b *kvBudget) trim(rows []KVRow) ([]KVRow, bool) {
	for i, row := range rows {
		if !b.take(len(row.Value)) {
			b.left += len(row.Value)
			return rows[:i], false
		}
	}
	return rows, true
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
	return pgx.NamedArgs{"tenant": tenant, "ns": op.NS, "key": op.Key, "keys": keys, "prefix": op.Prefix, "after": op.After,
		"value": value, "delta": op.Delta, "min": op.Min, "max": op.Max, "ttl": op.TTLSeconds, "expect": op.Expect,
		"limit": op.Limit, "now": s.dbNow()}
}

func (s *Store) kvOp(ctx context.Context, q querier, tenant string, op KVOp, budget *kvBudget) (KVResult, error) {
	r := KVResult{Op: op.Op, Key: op.Key}
	switch op.Op {
	case "get":
		rows, err := s.kvRows(ctx, q, "kv.get", s.kvArgs(tenant, op))
		if err != nil || len(rows) == 0 {
			return r, err
		}
		r.found(rows[0])
	case "getMany":
		return s.kvGetMany(ctx, q, tenant, op, budget)
	case "getPrefix":
		name, args := "kv.getPrefixOpen", s.kvArgs(tenant, op)
		if upper, ok := prefixUpper(op.Prefix); ok {
			name, args["upper"] = "kv.getPrefix", upper
		}
		rows, err := s.kvRows(ctx, q, name, args)
		if err != nil {
			return r, err
		}
		if len(rows) > op.Limit {
			rows, r.Truncated = rows[:op.Limit], true
		}
		rows = keysOnly(rows, op.KeysOnly)
		var whole bool
		if r.Rows, whole = budget.trim(rows); !whole {
			if len(r.Rows) == 0 { // a page without a row would never advance
				return r, ErrKVReadTooLarge
			}
			r.Truncated = true
		}
		if r.Truncated {
			r.NextAfter = r.Rows[len(r.Rows)-1].Key
		}
		return r, nil
	case "put", "putIfAbsent":
		if op.Op == "putIfAbsent" {
			zero := int64(0)
			op.Expect = &zero
		}
		sql := kvPutSQL
		if op.Expect != nil && *op.Expect != 0 {
			sql = kvReplaceSQL
		}
		err := q.QueryRow(ctx, sql, s.kvArgs(tenant, op)).Scan(&r.Version, &r.ExpiresAt, &r.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.kvNotApplied(ctx, q, tenant, op, r, "version")
		}
		if err != nil {
			return r, err
		}
		r.Applied, r.Found, r.Value = true, true, op.Value
	case "incr":
		return s.kvIncr(ctx, q, tenant, op, r)
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

// kvIncr adds op.Delta to a live counter, or starts one where there is
// none; a result that would cross op.Min or op.Max writes nothing
// (reason limit), and so does a live value that is not a number (type).
// A counter created or changed by a concurrent call between the steps
// sends it round again.
func (s *Store) kvIncr(ctx context.Context, q querier, tenant string, op KVOp, r KVResult) (KVResult, error) {
	args := s.kvArgs(tenant, op)
	for try := 0; ; try++ {
		if ok, err := s.kvIncrStep(ctx, q, kvIncrUpdateSQL, args, &r); ok || err != nil {
			return r, err
		}
		rows, err := s.kvRows(ctx, q, "kv.get", s.kvArgs(tenant, KVOp{Op: "get", NS: op.NS, Key: op.Key}))
		if err != nil {
			return r, err
		}
		if len(rows) > 0 {
			// A live row refused the update, unless it appeared after it.
			if try == 2 || !incrFits(rows[0].Value, op) {
				return s.kvNotApplied(ctx, q, tenant, op, r, "limit")
			}
			continue
		}
		if !incrFits(json.RawMessage("0"), op) { // an absent counter counts as 0
			r.Reason = "limit"
			return r, nil
		}
		if ok, err := s.kvIncrStep(ctx, q, kvIncrCreateSQL, args, &r); ok || err != nil {
			return r, err
		}
	}
}

// incrFits tells whether a counter holding v (a JSON number) may take
// op's delta within its bounds.
func incrFits(v json.RawMessage, op KVOp) bool {
	n, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	if err != nil || !isJSONNumber(v) {
		return false
	}
	n += op.Delta
	return (op.Min == nil || n >= *op.Min) && (op.Max == nil || n <= *op.Max)
}

// kvIncrStep runs one incr statement; false when it changed no row.
func (s *Store) kvIncrStep(ctx context.Context, q querier, sql string, args pgx.NamedArgs, r *KVResult) (bool, error) {
	var v []byte
	err := q.QueryRow(ctx, sql, args).Scan(&v, &r.Version, &r.ExpiresAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.Applied, r.Found, r.Value = true, true, v
	return true, nil
}

// found fills a single-key result from its row.
func (r *KVResult) found(row KVRow) {
	r.Found, r.Value, r.Version, r.ExpiresAt, r.UpdatedAt = true, row.Value, row.Version, row.ExpiresAt, row.UpdatedAt
}

// kvGetMany reads the keys' live rows and names the keys that have none.
// Rows the read budget cuts are in neither list.
func (s *Store) kvGetMany(ctx context.Context, q querier, tenant string, op KVOp, budget *kvBudget) (KVResult, error) {
	r := KVResult{Op: op.Op}
	rows, err := s.kvRows(ctx, q, "kv.getMany", s.kvArgs(tenant, op))
	if err != nil {
		return r, err
	}
	live := make(map[string]bool, len(rows))
	for _, row := range rows {
		live[row.Key] = true
	}
	seen := map[string]bool{}
	for _, k := range op.Keys {
		if !live[k] && !seen[k] {
			r.Missing = append(r.Missing, k)
		}
		seen[k] = true
	}
	var whole bool
	r.Rows, whole = budget.trim(keysOnly(rows, op.KeysOnly))
	r.Truncated = !whole
	return r, nil
}

// keysOnly drops the rows' values when asked to.
func keysOnly(rows []KVRow, only bool) []KVRow {
	if only {
		for i := range rows {
			rows[i].Value = nil
		}
	}
	return rows
}

// kvNotApplied reports the row as it stands, and why the write missed.
func (s *Store) kvNotApplied(ctx context.Context, q querier, tenant string, op KVOp, r KVResult, why string) (KVResult, error) {
	get := op
	get.Op = "get"
	rows, err := s.kvRows(ctx, q, "kv.get", s.kvArgs(tenant, get))
	if err != nil {
		return r, err
	}
	r.Reason = why
	if len(rows) == 0 {
		if op.Op != "incr" { // an incr on nothing fails only its bounds
			r.Reason = "absent"
		}
		return r, nil
	}
	r.found(rows[0])
	switch {
	case op.Op == "incr" && !isJSONNumber(r.Value):
		r.Reason = "type"
	case op.Op == "putIfAbsent" || (op.Expect != nil && *op.Expect == 0):
		r.Reason = "exists"
	}
	return r, nil
}

// prefixUpper is the least string greater than every string that starts
// with prefix, in code point order (which is the byte order of UTF-8, the
// order of the C collation): the prefix with its last code point below
// U+10FFFF incremented (skipping the surrogates) and the rest dropped. No
// such string exists for an empty prefix or one of U+10FFFF only.
func prefixUpper(prefix string) (string, bool) {
	r := []rune(prefix)
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] < utf8.MaxRune {
			r[i]++
			if r[i] == 0xD800 {
				r[i] = 0xE000
			}
			return string(r[:i+1]), true
		}
	}
	return "", false
}

// isJSONNumber tells whether v (valid JSON) is a number.
func isJSONNumber(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9')
}

// kvRows runs the read statement named name (kv.get, kv.getMany,
// kv.getPrefix or kv.getPrefixOpen) and collects its rows.
func (s *Store) kvRows(ctx context.Context, q querier, name string, args pgx.NamedArgs) ([]KVRow, error) {
	res, err := q.Query(ctx, text(name), args)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(res, func(row pgx.CollectableRow) (KVRow, error) {
		var r KVRow
		var v []byte
		err := row.Scan(&r.Key, &v, &r.Version, &r.ExpiresAt, &r.UpdatedAt)
		r.Value = v
		return r, err
	})
}
