package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store/storetest"
)

// pgURL is a storetest connection string as the postgres:// URL
// QUEEN_SHARDS and QUEEN_CATALOG_URL take.
func pgURL(t testing.TB, dsn string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cc.User, cc.Password), Host: fmt.Sprintf("%s:%d", cc.Host, cc.Port),
		Path: "/" + cc.Database, RawQuery: "sslmode=disable"}
	return u.String()
}

// sharded is a catalogue and two shards, three databases of the test
// cluster (the shards fresh and empty: the broker migrates them).
type sharded struct {
	catalog, s0, s1 string // their connection strings
}

func newSharded(t *testing.T) sharded {
	return sharded{catalog: storetest.EmptyDSN(t), s0: storetest.EmptyDSN(t), s1: storetest.EmptyDSN(t)}
}

// config is a broker's configuration on the shards with the placement
// rules given; PG_* names s0, which the broker must not use as such.
func (sh sharded) config(t *testing.T, rules string) config.Config {
	t.Helper()
	cfg := testConfig(t, sh.s0)
	var err error
	cfg.Shards, err = shards.Parse(pgURL(t, sh.catalog), "s0="+pgURL(t, sh.s0)+";s1="+pgURL(t, sh.s1), rules)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// dbConn is a connection to dsn's database; the caller closes it.
func dbConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// count runs a count(*) query on dsn's database.
func count(t *testing.T, dsn, sql string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	conn := dbConn(t, dsn)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// queuesOn are the names of the queues in dsn's database, sorted.
func queuesOn(t *testing.T, dsn string) []string {
	t.Helper()
	ctx := context.Background()
	conn := dbConn(t, dsn)
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT name FROM queen.queues ORDER BY name`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// messagesOf counts the messages of queue on dsn's database.
func messagesOf(t *testing.T, dsn, queue string) int {
	return count(t, dsn, `SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue)
}

// popOne pops one message of queue (of its partition, when given) and
// answers its partition and transaction ids.
func popOne(t *testing.T, base, queue, partition string) (pid, txid string) {
	t.Helper()
	path := base + "/api/v1/pop/queue/" + queue
	if partition != "" {
		path += "/partition/" + partition
	}
	code, body := get(t, path+"?batch=1&wait=false")
	if code != 200 {
		t.Fatalf("pop %s: %d %s", queue, code, body)
	}
	var out struct {
		Messages []struct {
			PartitionID   string `json:"partitionId"`
			TransactionID string `json:"transactionId"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Messages) != 1 {
		t.Fatalf("pop %s: %s (%v)", queue, body, err)
	}
	return out.Messages[0].PartitionID, out.Messages[0].TransactionID
}

// popLeased pops one message of queue and answers its partition,
// transaction and lease ids.
func popLeased(t *testing.T, base, queue string) (pid, txid, lease string) {
	t.Helper()
	code, body := get(t, base+"/api/v1/pop/queue/"+queue+"?batch=1&wait=false")
	var out struct {
		Messages []struct {
			PartitionID   string `json:"partitionId"`
			TransactionID string `json:"transactionId"`
			LeaseID       string `json:"leaseId"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil || len(out.Messages) != 1 {
		t.Fatalf("pop %s: %d %s (%v)", queue, code, body, err)
	}
	m := out.Messages[0]
	return m.PartitionID, m.TransactionID, m.LeaseID
}

// TestShardsServeQueuesOnTheirShard: with a catalogue and two shards,
// QUEEN_PLACEMENT puts a-* queues on s0 (the default) and b-* on s1; push,
// pop (of the queue and of a partition), ack (single and batch), lease
// extension, configure and delete run on the queue's shard, whose database alone holds its rows;
// a transaction spanning both answers 409 and writes nothing; a route that
// would read one shard only answers 501; and a restarted broker, even with
// other rules, finds the queues where they were placed.
func TestShardsServeQueuesOnTheirShard(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	b := start(t, sh.config(t, "queue:b-*=s1"))
	base := "http://" + b.Addr()
	for _, q := range []string{"a-orders", "b-orders"} {
		for i := range 2 {
			if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p1","payload":{"n":%d}}]}`, q, i)); code != 201 {
				t.Fatalf("push %s: %d %s", q, code, body)
			}
		}
	}
	if code, body := post(t, base+"/api/v1/configure", `{"queue":"b-conf","namespace":"ns"}`); code != 200 {
		t.Fatalf("configure: %d %s", code, body)
	}
	if got := queuesOn(t, sh.s0); !slices.Equal(got, []string{"a-orders"}) {
		t.Errorf("queues on s0: %v, want [a-orders]", got)
	}
	if got := queuesOn(t, sh.s1); !slices.Equal(got, []string{"b-conf", "b-orders"}) {
		t.Errorf("queues on s1: %v, want [b-conf b-orders]", got)
	}
	if n, m := messagesOf(t, sh.s0, "a-orders"), messagesOf(t, sh.s1, "b-orders"); n != 2 || m != 2 {
		t.Fatalf("messages: a-orders on s0 %d, b-orders on s1 %d; want 2 each", n, m)
	}
	if n := count(t, sh.catalog, `SELECT count(*) FROM queen_catalog.placements WHERE shard = 's1'`); n != 2 {
		t.Errorf("catalogue: %d queues on s1, want 2", n)
	}

	// Pop and ack each queue, by queue and by partition, single and batch.
	pid, txid := popOne(t, base, "a-orders", "")
	if code, body := post(t, base+"/api/v1/ack", fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"status":"completed"}`, pid, txid)); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("ack a-orders: %d %s", code, body)
	}
	pid, txid = popOne(t, base, "b-orders", "p1")
	if code, body := post(t, base+"/api/v1/ack/batch", fmt.Sprintf(`{"acknowledgments":[{"partitionId":%q,"transactionId":%q,"status":"completed"}]}`, pid, txid)); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("ack b-orders: %d %s", code, body)
	}
	for dsn, q := range map[string]string{sh.s0: "a-orders", sh.s1: "b-orders"} {
		if n := count(t, dsn, `SELECT count(*) FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND pc.last_consumed_seq > 0`, q); n != 1 {
			t.Errorf("%s: %d consumed cursors on its shard, want 1", q, n)
		}
	}

	// A transaction on both shards: 409 naming them, nothing written.
	code, body := post(t, base+"/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"a-orders","payload":1}]},
		{"type":"push","items":[{"queue":"b-orders","payload":2}]}]}`)
	if code != 409 || body != `{"error":"cross_shard_transaction","shards":["s0","s1"]}`+"\n" {
		t.Errorf("cross-shard transaction: %d %s", code, body)
	}
	if n, m := messagesOf(t, sh.s0, "a-orders"), messagesOf(t, sh.s1, "b-orders"); n != 2 || m != 2 {
		t.Errorf("after the refused transaction: a-orders %d, b-orders %d messages; want 2 each", n, m)
	}
	// One on s1 only runs there.
	if code, body := post(t, base+"/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"b-orders","payload":3}]}]}`); code != 200 {
		t.Errorf("transaction on s1: %d %s", code, body)
	}
	if m := messagesOf(t, sh.s1, "b-orders"); m != 3 {
		t.Errorf("b-orders on s1: %d messages after its transaction, want 3", m)
	}

	// An ack of s1's message beside a push to s0's queue: 409 too. (Its
	// lease, on s1, is extended first: the broker finds its shard.)
	pid, txid, lease := popLeased(t, base, "b-orders")
	if code, body := post(t, base+"/api/v1/lease/"+lease+"/extend", `{"seconds":120}`); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("extend a lease on s1: %d %s", code, body)
	}
	code, body = post(t, base+"/api/v1/transaction", fmt.Sprintf(`{"operations":[{"type":"push","items":[{"queue":"a-orders","payload":1}]},
		{"type":"ack","partitionId":%q,"transactionId":%q,"status":"completed"}]}`, pid, txid))
	if code != 409 || body != `{"error":"cross_shard_transaction","shards":["s0","s1"]}`+"\n" {
		t.Errorf("cross-shard push and ack: %d %s", code, body)
	}
	if n := messagesOf(t, sh.s0, "a-orders"); n != 2 {
		t.Errorf("after the refused push and ack: a-orders %d messages, want 2", n)
	}

	// A queue's detail and depth are read on its shard.
	if code, body := get(t, base+"/api/v1/resources/queues/b-orders"); code != 200 || !strings.Contains(body, `"name":"b-orders"`) {
		t.Errorf("detail of b-orders: %d %s", code, body)
	}
	if code, body := get(t, base+"/api/v1/resources/queues/b-orders/depth"); code != 200 || !strings.Contains(body, `"queue":"b-orders"`) {
		t.Errorf("depth of b-orders: %d %s", code, body)
	}

	// Deleting a queue deletes it on its shard.
	if code, body := do(t, "DELETE", base+"/api/v1/resources/queues/b-conf", "", ""); code != 200 {
		t.Errorf("delete b-conf: %d %s", code, body)
	}
	if got := queuesOn(t, sh.s1); !slices.Equal(got, []string{"b-orders"}) {
		t.Errorf("queues on s1 after deleting b-conf: %v", got)
	}

	// A route that would read one shard only: 501.
	if code, body := get(t, base+"/api/v1/status/analytics"); code != 501 ||
		body != `{"error":"not supported with shards yet","route":"GET /api/v1/status/analytics"}`+"\n" {
		t.Errorf("analytics: %d %s", code, body)
	}

	// Restarted with no rules (new queues on s0), the placements stay.
	shutdown(t, b)
	b = start(t, sh.config(t, ""))
	base = "http://" + b.Addr()
	popOne(t, base, "b-orders", "")
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"b-orders","payload":4},{"queue":"b-new","payload":5}]}`); code != 409 ||
		!strings.Contains(body, `"cross_shard_push"`) {
		t.Errorf("push to s1's b-orders and the new b-new (s0): %d %s", code, body)
	}
	if m := messagesOf(t, sh.s1, "b-orders"); m != 3 {
		t.Errorf("b-orders on s1: %d messages after the restart, want 3", m)
	}
	if got := queuesOn(t, sh.s1); !slices.Equal(got, []string{"b-orders"}) {
		t.Errorf("queues on s1 after the restart: %v", got)
	}
	shutdown(t, b)
}

// shutdown stops b gracefully.
func shutdown(t *testing.T, b *queen.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestShardStartupErrorsNameTheDatabase: a shard whose database does not
// exist, or a catalogue nobody listens for, fails the start with an error
// naming the shard or QUEEN_CATALOG_URL.
func TestShardStartupErrorsNameTheDatabase(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	missing := sh
	missing.s1 = strings.Replace(sh.s1, "dbname="+dbName(t, sh.s1), "dbname=queen_no_such_db", 1)
	if err := startErr(t, missing.config(t, "")); err == nil || !strings.Contains(err.Error(), "shard s1") ||
		!strings.Contains(err.Error(), "queen_no_such_db") {
		t.Errorf("start with a missing shard database: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	down := sh
	down.catalog = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=cat sslmode=disable", closed)
	if err := startErr(t, down.config(t, "")); err == nil || !strings.Contains(err.Error(), "catalogue "+shards.CatalogVar) {
		t.Errorf("start with the catalogue down: %v", err)
	}
}

// dbName is the database of a connection string.
func dbName(t *testing.T, dsn string) string {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cc.Database
}

// startErr starts a broker on cfg, giving it three seconds, and answers
// its start's error (stopping it if it started).
func startErr(t *testing.T, cfg config.Config) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := queen.New(queen.Options{Config: cfg, Listener: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = b.Start(ctx)
	if err == nil {
		b.Crash()
	}
	return err
}

// TestShardsServeCachedQueuesWithTheCatalogueDown: while the catalogue
// refuses connections, a queue whose placement the broker cached keeps
// being served on its shard; a new queue answers 503 naming it, and is
// placed once the catalogue is back.
func TestShardsServeCachedQueuesWithTheCatalogueDown(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	b := start(t, sh.config(t, "queue:b-*=s1"))
	defer b.Crash()
	base := "http://" + b.Addr()
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"b-orders","payload":1}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	setCatalog := func(allow bool) {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, storetest.AdminDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		db := dbName(t, sh.catalog)
		if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t`, db, allow)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, db); err != nil {
			t.Fatal(err)
		}
	}
	setCatalog(false)
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"b-orders","payload":2}]}`); code != 201 {
		t.Errorf("push to a cached queue with the catalogue down: %d %s", code, body)
	}
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"b-new","payload":3}]}`); code != 503 ||
		!strings.Contains(body, "placement unavailable") || !strings.Contains(body, "b-new") {
		t.Errorf("push to a new queue with the catalogue down: %d %s", code, body)
	}
	setCatalog(true)
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"b-new","payload":3}]}`); code != 201 {
		t.Errorf("push to a new queue with the catalogue back: %d %s", code, body)
	}
	if n, m := messagesOf(t, sh.s1, "b-orders"), messagesOf(t, sh.s1, "b-new"); n != 2 || m != 1 {
		t.Errorf("on s1: b-orders %d, b-new %d messages; want 2 and 1", n, m)
	}
	if got := queuesOn(t, sh.s0); len(got) != 0 {
		t.Errorf("queues on s0: %v, want none", got)
	}
}
