package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// Cost tests grow a table as the broker would have written it and read a
// statement's buffer count from EXPLAIN (ANALYZE, BUFFERS): work, not
// time, so a busy machine cannot fail them. Each bound is a fraction of
// the table, which the statement before its fix read whole.

// buffers runs sql under EXPLAIN (ANALYZE, BUFFERS) and returns the shared
// blocks it touched (hit + read) and the rows of its top node.
func buffers(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (blocks, rows int64) {
	t.Helper()
	var raw []byte
	if err := pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
			Rows int64 `json:"Actual Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN output: %v %s", err, raw)
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read, plan[0].Plan.Rows
}

// pages is a relation's size in blocks.
func pages(t *testing.T, pool *pgxpool.Pool, rel string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT pg_relation_size($1::regclass) / current_setting('block_size')::int`, rel).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// growQueue adds n messages to each of parts partitions of a configured
// queue, the first due ones created an hour ago, the rest now, with
// sequences as the broker allocates them.
func growQueue(t *testing.T, pool *pgxpool.Pool, queue string, parts, n, due int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		WITH q AS (SELECT id FROM queen.queues WHERE tenant_id = $1 AND name = $2),
		p AS (INSERT INTO queen.partitions (id, queue_id, name, last_seq)
			SELECT gen_random_uuid(), q.id, 'p' || i, $4 FROM q, generate_series(1, $3) i RETURNING id)
		INSERT INTO queen.messages (id, partition_id, seq, transaction_id, payload, created_at)
		SELECT gen_random_uuid(), p.id, s, 'tx' || s, '{"n":1}',
			CASE WHEN s <= $5 THEN now() - interval '1 hour' ELSE now() END
		FROM p, generate_series(1, $4) s`, tenant, queue, parts, n, due); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE queen.messages; ANALYZE queen.partitions`); err != nil {
		t.Fatal(err)
	}
}

// A retention pass costs what it deletes, not the size of the queue: with
// 100,000 messages of which 20 are due, the expired and eviction rules
// read a small fraction of the table. Before, each rule seq-scanned every
// message of the queues it applied to.
func TestRetentionCostFollowsTheRowsItDeletes(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	now := time.Now()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { return &now }})
	ctx := context.Background()
	for q, p := range map[string]store.OptionPatch{
		"big-expiring": {RetentionEnabled: boolp(true), RetentionSeconds: intp(60)},
		"big-evicting": {MaxWaitTimeSeconds: intp(60)},
	} {
		if _, err := s.Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: q, Patch: p}); err != nil {
			t.Fatal(err)
		}
		growQueue(t, pool, q, 20, 5000, 1)
	}
	table := pages(t, pool, "queen.messages")
	for rule, kind := range map[string]string{"expired": "retention", "evicted": "max_wait_time_eviction"} {
		blocks, _ := buffers(t, pool, store.RetentionRuleSQL(rule), nil, 1000, kind)
		t.Logf("%s: %d blocks touched, the table has %d", rule, blocks, table)
		if blocks > table/4 {
			t.Errorf("the %s rule touched %d blocks of a %d-block table to delete 20 rows", rule, blocks, table)
		}
	}
	var left int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE created_at < now() - interval '30 minutes'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d due rows left (%v)", left, err)
	}
}

// A KV prefix read is a range on the key: finding 5 keys in a namespace of
// 100,000 touches a few index pages, not the namespace. Before, the
// left(key, n) = prefix filter read every row of it (92 ms for 5 rows).
func TestKVPrefixReadIsARange(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO queen.kv (tenant_id, namespace, key, value)
		SELECT $1, 'big', 'k' || lpad(i::text, 6, '0'), '1' FROM generate_series(1, 100000) i`, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE queen.kv`); err != nil {
		t.Fatal(err)
	}
	upper, _ := store.PrefixUpper("k09999")
	blocks, rows := buffers(t, pool, store.KVGetPrefixSQL, pgx.NamedArgs{"tenant": tenant, "ns": "big", "prefix": "k09999",
		"upper": upper, "after": "", "limit": 100, "now": nil})
	table := pages(t, pool, "queen.kv")
	t.Logf("getPrefix of %d rows: %d blocks touched, the table has %d", rows, blocks, table)
	if rows != 10 || blocks > 20 {
		t.Fatalf("getPrefix read %d rows touching %d blocks of a %d-block table", rows, blocks, table)
	}
}

// prefixUpper bounds exactly the strings a prefix starts: s starts with p
// if and only if p <= s < upper (byte order, the C collation's).
func TestPrefixUpperBoundsExactlyThePrefix(t *testing.T) {
	alphabet := []rune{'a', 'b', 0x7f, 0x80, 0xd7ff, 0xe000, 0xffff, utf8.MaxRune}
	str := rapid.Custom(func(t *rapid.T) string {
		return string(rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 4).Draw(t, "runes"))
	})
	rapid.Check(t, func(t *rapid.T) {
		p, s := str.Draw(t, "prefix"), str.Draw(t, "key")
		upper, ok := store.PrefixUpper(p)
		in := s >= p && (!ok || s < upper)
		if in != strings.HasPrefix(s, p) {
			t.Fatalf("prefix %q, key %q, upper %q (%v): in range %v", p, s, upper, ok, in)
		}
		if ok && !utf8.ValidString(upper) {
			t.Fatalf("upper %q of %q is not UTF-8", upper, p)
		}
	})
}
