package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/leader"
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
		p AS (INSERT INTO queen.partitions (id, queue_id, name, last_seq, appended)
			SELECT gen_random_uuid(), q.id, 'p' || i, $4, $4 FROM q, generate_series(1, $3) i RETURNING id)
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
		if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: q, Patch: p}); err != nil {
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

// growDLQ gives one queue's partitions n dead letters each.
func growDLQ(t *testing.T, pool *pgxpool.Pool, queue string, n int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, failed_at)
		SELECT m.id, m.partition_id, '__QUEUE_MODE__', now() FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND m.seq <= $2`, queue, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE queen.dead_letter_queue`); err != nil {
		t.Fatal(err)
	}
}

// The scale migration (010, no transaction) builds its index on a grown
// table while pushes go on, records itself, and on a rerun rebuilds an
// index an interrupted build left INVALID.
func TestScaleMigrationOnAGrownTable(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "grown"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "grown", 10, 5000, 0)
	growDLQ(t, pool, "grown", 5000)
	valid := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE c.relname = 'dead_letter_queue_partition'), false)`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, invalidate := range []bool{false, true} {
		if invalidate {
			// What an interrupted CREATE INDEX CONCURRENTLY leaves.
			if _, err := pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'queen.dead_letter_queue_partition'::regclass`); err != nil {
				t.Fatal(err)
			}
		} else if _, err := pool.Exec(ctx, `DROP INDEX queen.dead_letter_queue_partition`); err != nil {
			t.Fatal(err)
		}
		migrateWhilePushing(t, pool, s, "010_scale_indexes", "grown", fmt.Sprintf("during-%v", invalidate))
		if !valid() {
			t.Fatalf("after the migration (invalid before: %v) the index is missing or invalid", invalidate)
		}
	}
}

// migrateWhilePushing forgets migration version and runs the migrations
// again while pushes into queue's partition p1 go on, each of which must
// succeed; it answers how many pushes ran and the slowest.
func migrateWhilePushing(t *testing.T, pool *pgxpool.Pool, s *store.Store, version, queue, txPrefix string) (int, time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `DELETE FROM queen.schema_migrations WHERE version = $1`, version); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- store.Migrate(ctx, pool) }()
	var slowest time.Duration
	for pushes := 0; ; pushes++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			return pushes, slowest
		default:
		}
		began := time.Now()
		if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: queue, Partition: "p1", TransactionID: fmt.Sprintf("%s-%d", txPrefix, pushes)}}, ""); err != nil {
			t.Fatalf("a push during the migration: %v", err)
		}
		slowest = max(slowest, time.Since(began))
	}
}

// The queue list reads no dead letter: their counts come from
// queen.dlq_counts, for every listed queue in one statement. Before, each
// partition's count scanned the whole DLQ table (12.2 s for the list at
// 500,000 dead letters), and the list ran one statement per queue.
func TestQueueListReadsNoDeadLetter(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	for _, q := range []string{"dlq-heavy", "light"} {
		if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	growQueue(t, pool, "dlq-heavy", 10, 5000, 0)
	growDLQ(t, pool, "dlq-heavy", 5000)
	var qids []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(id::text) FROM queen.queues`).Scan(&qids); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+store.QueuePartitionsSQL, qids, nil).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "dead_letter_queue") {
		t.Fatalf("the queue list reads the dead letters: %s", plan)
	}
	infos, err := s.ListQueues(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.Name == "dlq-heavy" && (info.DLQ != 50000 || info.QueueDLQ != 50000 || info.PartitionCount != 11) {
			t.Fatalf("dlq-heavy: %d dead letters (%d queue mode) on %d partitions", info.DLQ, info.QueueDLQ, info.PartitionCount)
		}
	}
}

// The dead-letter counters follow every path that writes the DLQ: inserts
// (the ack that dead-letters, a tool's SQL), a DLQ retry's delete, and the
// cascades of a deleted message and a deleted partition.
func TestDLQCountsFollowEveryPath(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "dc", Patch: store.OptionPatch{RetryLimit: intp(0), DLQAfterMaxRetries: boolp(true)}}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "dc", 3, 20, 0)
	agree := func(when string) {
		t.Helper()
		var bad int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT partition_id, consumer_group, count(*) AS n FROM queen.dead_letter_queue GROUP BY 1, 2) d
			FULL JOIN (SELECT * FROM queen.dlq_counts WHERE n <> 0) c USING (partition_id, consumer_group)
			WHERE d.n IS DISTINCT FROM c.n`).Scan(&bad); err != nil {
			t.Fatal(err)
		}
		if bad > 0 {
			t.Fatalf("%s: %d (partition, group) counters disagree with the dead letters", when, bad)
		}
	}
	growDLQ(t, pool, "dc", 5) // SQL, as a tool would
	agree("after an insert by SQL")
	p, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "dc", Group: "g", Batch: 3})
	if err != nil || len(p.Messages) == 0 {
		t.Fatalf("pop: %+v %v", p, err)
	}
	var acks []store.AckItem
	for _, m := range p.Messages {
		acks = append(acks, store.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: "failed"})
	}
	if _, err := ack(ctx, s, tenant, "g", acks); err != nil {
		t.Fatal(err)
	}
	var byAck int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.dead_letter_queue WHERE consumer_group = 'g'`).Scan(&byAck); err != nil || byAck == 0 {
		t.Fatalf("the failed acks dead-lettered %d (%v)", byAck, err)
	}
	agree("after failed acks")
	if _, err := pool.Exec(ctx, `DELETE FROM queen.dead_letter_queue WHERE id = (SELECT min(id) FROM queen.dead_letter_queue)`); err != nil {
		t.Fatal(err)
	}
	agree("after a dead letter's delete")
	if _, err := pool.Exec(ctx, `DELETE FROM queen.messages WHERE id IN (SELECT message_id FROM queen.dead_letter_queue LIMIT 2)`); err != nil {
		t.Fatal(err)
	}
	agree("after deleting dead-lettered messages")
	if _, err := pool.Exec(ctx, `DELETE FROM queen.partitions WHERE id = (SELECT partition_id FROM queen.dead_letter_queue LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	agree("after deleting a partition")
	infos, err := s.ListQueues(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	var listed, stored int64
	for _, info := range infos {
		listed += info.DLQ
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.dead_letter_queue`).Scan(&stored); err != nil || listed != stored {
		t.Fatalf("the queue list shows %d dead letters, the table holds %d (%v)", listed, stored, err)
	}
}

// An ack's cursor update is HOT: it changes no indexed column, so the row
// is rewritten on its page without an index entry (migration 013 leaves
// the room). Counted inside the acking transaction, so no statistics
// delay can fail it. Before, the ack cleared worker_id, an indexed
// column, and no ack was ever HOT.
func TestAckUpdatesTheCursorInPlace(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "hot-ack", TransactionID: "a"}, {Queue: "hot-ack", TransactionID: "b"}}, ""); err != nil {
		t.Fatal(err)
	}
	res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "hot-ack", Batch: 2})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop: %v %d", err, len(res.Messages))
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	m := res.Messages
	rows, err := tx.Query(ctx, store.AckCompletedSQL, []string{m[0].PartitionID, m[1].PartitionID}, []string{m[0].TransactionID, m[1].TransactionID},
		[]string{m[0].LeaseID, m[1].LeaseID}, []string{store.QueueModeGroup, store.QueueModeGroup}, []string{tenant, tenant}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ord int64
		var verdict, q, p string
		var released bool
		if err := rows.Scan(&ord, &verdict, &q, &p, &released); err != nil || verdict != "ok" || released != (ord == 2) {
			t.Fatalf("ack row %d: %s released=%v (%v)", ord, verdict, released, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var updated, hot int64
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated(c), pg_stat_get_xact_tuples_hot_updated(c)
		FROM (SELECT 'queen.partition_consumers'::regclass::oid AS c) x`).Scan(&updated, &hot); err != nil {
		t.Fatal(err)
	}
	// The statement's FOR UPDATE of the cursor row counts as an update
	// in these counters too: two, and the rewrite one of them, HOT.
	if updated != 2 || hot != 1 {
		t.Errorf("the ack counted %d cursor row updates (its lock and its rewrite), %d of them HOT; want 2 and 1", updated, hot)
	}
}

// The queue list reads no stored message to count them: the counters of
// migration 014 (appended minus deleted) give the stored rows, and the
// backlog past a consumed cursor is an empty index range. Before, each
// partition's count read every index entry of its messages (3.6 s for the
// list at 10 million messages).
func TestQueueListCountsNoStoredMessage(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "stored-heavy"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "stored-heavy", 10, 20000, 0)
	if _, err := pool.Exec(ctx, `INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, last_consumed_seq)
		SELECT p.id, p.queue_id, '__QUEUE_MODE__', p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'stored-heavy' AND q.tenant_id = $1 ON CONFLICT DO NOTHING`, tenant); err != nil {
		t.Fatal(err)
	}
	var qid string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM queen.queues WHERE tenant_id = $1 AND name = 'stored-heavy'`, tenant).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	// A few index probes per partition, against the whole (partition, seq)
	// index that counting would read.
	limit := pages(t, pool, "queen.messages_partition_id_seq_key") / 3
	for name, sql := range map[string]string{"the queue's partitions": store.QueuePartitionsSQL, "the list's summary": store.QueueSummariesSQL} {
		if blocks, _ := buffers(t, pool, sql, []string{qid}, nil); blocks > limit {
			t.Fatalf("%s read %d blocks for 200,000 consumed messages (bound %d)", name, blocks, limit)
		}
	}
	q, err := s.GetQueue(ctx, tenant, "stored-heavy")
	if err != nil || q.Messages != 200000 || q.Pending != 0 {
		t.Fatalf("stored-heavy: %d stored, %d pending (%v)", q.Messages, q.Pending, err)
	}
}

// The stored counters follow every path that writes messages: the push
// (a duplicate inside a batch spends no count), the SQL surface's push,
// the message delete route, retention, a tool's SQL delete, and a deleted
// partition.
func TestStoredCountsFollowEveryPath(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "sc",
		Patch: store.OptionPatch{RetentionEnabled: boolp(true), RetentionSeconds: intp(60)}}); err != nil {
		t.Fatal(err)
	}
	agree := func(when string) { t.Helper(); storedCountsAgree(t, pool, when) }
	push := func(items ...store.PushItem) []store.PushResult {
		t.Helper()
		res, err := pushItems(ctx, s, tenant, items, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	push(store.PushItem{Queue: "sc", Partition: "a", TransactionID: "1"}, store.PushItem{Queue: "sc", Partition: "b", TransactionID: "2"})
	agree("after a push")
	push(store.PushItem{Queue: "sc", Partition: "a", TransactionID: "3"}, store.PushItem{Queue: "sc", Partition: "a", TransactionID: "1"},
		store.PushItem{Queue: "sc", Partition: "a", TransactionID: "4"})
	agree("after a push with a duplicate inside")
	if _, err := pool.Exec(ctx, `SELECT queen.push_messages_v3(jsonb_build_array(
		jsonb_build_object('_tenant', $1::text, 'queue', 'sc', 'partition', 'a', 'transactionId', '5'),
		jsonb_build_object('_tenant', $1::text, 'queue', 'sc', 'partition', 'a', 'transactionId', '3')))`, tenant); err != nil {
		t.Fatal(err)
	}
	agree("after the SQL surface's push")
	var pa string
	if err := pool.QueryRow(ctx, `SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND q.name = 'sc' AND p.name = 'a'`, tenant).Scan(&pa); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.DeleteMessage(ctx, tenant, pa, "4", 0); err != nil || !ok {
		t.Fatalf("delete message: %v %v", ok, err)
	}
	agree("after the delete route")
	growQueue(t, pool, "sc", 2, 10, 4)
	agree("after growing")
	if r, err := leader.RetentionPass(ctx, s, s.Pool(), 100); err != nil || r.Expired == 0 {
		t.Fatalf("retention: %+v %v", r, err)
	}
	agree("after retention")
	if _, err := pool.Exec(ctx, `DELETE FROM queen.messages WHERE transaction_id = '5'`); err != nil {
		t.Fatal(err)
	}
	agree("after a tool's delete")
	if _, err := pool.Exec(ctx, `DELETE FROM queen.partitions WHERE id = $1`, pa); err != nil {
		t.Fatal(err)
	}
	agree("after deleting a partition")
	q, err := s.GetQueue(ctx, tenant, "sc")
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND q.name = 'sc'`, tenant).Scan(&stored); err != nil || q.Messages != stored {
		t.Fatalf("the queue shows %d stored messages, the table holds %d (%v)", q.Messages, stored, err)
	}
}

// storedCountsAgree fails when a partition's stored counter (appended
// minus deleted) is not its count of messages.
func storedCountsAgree(t *testing.T, pool *pgxpool.Pool, when string) {
	t.Helper()
	var bad int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.partitions p
		LEFT JOIN queen.message_deletes d ON d.partition_id = p.id
		WHERE p.appended - coalesce(d.n, 0) <> (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id)`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%s: %d partitions' stored counters disagree with their messages", when, bad)
	}
}

// Migration 014 on a grown table: its backfill counts what is stored; and
// queen.recount_stored() repairs what a broker built before it appended
// without counting (a rolling upgrade).
func TestStoredCountsMigrationOnAGrownTable(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "grown-014"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "grown-014", 10, 5000, 0)
	if _, err := pool.Exec(ctx, `DROP TRIGGER message_deletes_delete ON queen.messages;
		DROP FUNCTION queen.message_deletes_on_delete(); DROP FUNCTION queen.recount_stored(); DROP TABLE queen.message_deletes;
		DROP INDEX queen.queues_tenant_created; ALTER TABLE queen.partitions DROP COLUMN appended;
		DELETE FROM queen.schema_migrations WHERE version = '014_stored_counts'`); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	storedCountsAgree(t, pool, "after the migration")
	// An append as a broker before 014 made it: the sequence moves, the
	// counter does not.
	if _, err := pool.Exec(ctx, `WITH p AS (UPDATE queen.partitions p SET last_seq = p.last_seq + 1 FROM queen.queues q
			WHERE q.id = p.queue_id AND q.name = 'grown-014' AND p.name = 'p1' RETURNING p.id, p.last_seq)
		INSERT INTO queen.messages (id, partition_id, seq, transaction_id, payload, created_at)
		SELECT gen_random_uuid(), p.id, p.last_seq, 'old-broker', '{}', now() FROM p`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT queen.recount_stored()`); err != nil {
		t.Fatal(err)
	}
	storedCountsAgree(t, pool, "after the recount")
}

// A page of one queue's DLQ reads each partition's newest failures, not
// every dead letter of the queue (sorted whole before: 74 ms at 100,000).
func TestDLQPageOfAQueueReadsThePage(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "dlq-page"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "dlq-page", 10, 5000, 0)
	growDLQ(t, pool, "dlq-page", 5000)
	blocks, rows := buffers(t, pool, store.DLQQueuePageSQL, tenant, "dlq-page", "", "", nil, nil, 10, 20)
	if limit := pages(t, pool, "queen.dead_letter_queue") / 10; blocks > limit || rows != 10 {
		t.Fatalf("a page of 10 at offset 20 read %d blocks (bound %d) for %d rows", blocks, limit, rows)
	}
	page, total, err := s.ListDLQ(ctx, store.DLQFilter{Tenant: tenant, Queue: "dlq-page", Limit: 10, Offset: 20})
	if err != nil || len(page) != 10 || total != 50000 {
		t.Fatalf("ListDLQ: %d rows of %d (%v)", len(page), total, err)
	}
	// The same page as the tenant-wide statement picks.
	all, _, err := s.ListDLQ(ctx, store.DLQFilter{Tenant: tenant, Limit: 30})
	if err != nil {
		t.Fatal(err)
	}
	for i := range page {
		if page[i].ID != all[20+i].ID || page[i].ConsumerGroup != all[20+i].ConsumerGroup {
			t.Fatalf("row %d: %s, the tenant-wide page has %s", i, page[i].ID, all[20+i].ID)
		}
	}
}
