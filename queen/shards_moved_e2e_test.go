package queen_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store"
)

// mover is a move's steps as a test runs them by hand: the source's
// freeze, a copy of the queue's rows (shards.PerQueueTables, COPY out of
// the source and into the destination, where logical replication would
// stream them), the destination's activation and the catalogue's new
// placement.
type mover struct {
	t        *testing.T
	cfg      config.Config
	src, dst *pgxpool.Pool
	cat      *pgxpool.Pool
}

func newMover(t *testing.T, sh sharded, cfg config.Config) *mover {
	pool := func(dsn string) *pgxpool.Pool {
		p, err := pgxpool.New(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	return &mover{t: t, cfg: cfg, src: pool(sh.s0), dst: pool(sh.s1), cat: pool(sh.catalog)}
}

// freeze freezes queue on the source at epoch 1.
func (m *mover) freeze(queue string) {
	m.t.Helper()
	if _, err := store.New(m.src, store.Options{}).Freeze(context.Background(), m.src, config.DefaultTenant, queue, 1); err != nil {
		m.t.Fatal(err)
	}
}

// move moves queue from s0 at epoch 1 to s1 at epoch 2.
func (m *mover) move(queue string) {
	m.t.Helper()
	ctx := context.Background()
	m.freeze(queue)
	q := shards.QueueRows{Tenant: config.DefaultTenant, Name: queue}
	if err := m.src.QueryRow(ctx, `SELECT q.id::text, array_agg(p.id::text) FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
		WHERE q.tenant_id = $1 AND q.name = $2 GROUP BY q.id`, q.Tenant, queue).Scan(&q.QueueID, &q.Partitions); err != nil {
		m.t.Fatal(err)
	}
	filters, err := shards.Filters(ctx, m.src, q)
	if err != nil {
		m.t.Fatal(err)
	}
	src, err := m.src.Acquire(ctx)
	if err != nil {
		m.t.Fatal(err)
	}
	defer src.Release()
	dst, err := m.dst.Acquire(ctx)
	if err != nil {
		m.t.Fatal(err)
	}
	defer dst.Release()
	for i, table := range shards.PerQueueTables {
		var buf bytes.Buffer
		if _, err := src.Conn().PgConn().CopyTo(ctx, &buf, fmt.Sprintf("COPY (SELECT * FROM %s WHERE %s) TO STDOUT", table.Name, filters[i])); err != nil {
			m.t.Fatalf("copy %s out: %v", table.Name, err)
		}
		if _, err := dst.Conn().PgConn().CopyFrom(ctx, &buf, fmt.Sprintf("COPY %s FROM STDIN", table.Name)); err != nil {
			m.t.Fatalf("copy %s in: %v", table.Name, err)
		}
	}
	if _, err := store.New(m.dst, store.Options{}).Activate(ctx, m.dst, config.DefaultTenant, queue, 1, 2); err != nil {
		m.t.Fatal(err)
	}
	if _, err := catalog.New(m.cat, m.cfg.Shards).SetPlacement(ctx, config.DefaultTenant, queue, 1, "s1"); err != nil {
		m.t.Fatal(err)
	}
}

// send sends a request and answers its status, Retry-After and body.
func send(t *testing.T, method, url, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), out.String()
}

// consumed counts queue's cursors on dsn that moved past the start.
func consumed(t *testing.T, dsn, queue string) int {
	return count(t, dsn, `SELECT count(*) FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.name = $1 AND pc.last_consumed_seq > 0`, queue)
}

// leasedOn counts queue's cursors on dsn holding a lease.
func leasedOn(t *testing.T, dsn, queue string) int {
	return count(t, dsn, `SELECT count(*) FROM queen.partition_consumers pc JOIN queen.queues q ON q.id = pc.queue_id
		WHERE q.name = $1 AND pc.lease_expires_at IS NOT NULL`, queue)
}

// TestShardsRouteAMovedQueue: a broker whose placement cache still names a
// queue's old shard (s0, epoch 1) after the queue moved to s1 (epoch 2)
// serves its push, pop (of the queue and of a partition), ack and ack
// batch on s1 with no error to the client: s0's frozen rows answer moved,
// the broker forgets the placement and routes again. A queue frozen on s0
// and not moved yet answers each 503 "queue is moving" with Retry-After,
// writing nothing.
func TestShardsRouteAMovedQueue(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg := sh.config(t, "queue:mv-*=s0")
	b := start(t, cfg)
	defer shutdown(t, b)
	base := "http://" + b.Addr()
	queues := []string{"mv-push", "mv-pop", "mv-part", "mv-ack", "mv-batch", "mv-txn", "mv-frozen"}
	for _, q := range queues {
		if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p1","payload":1}]}`, q)); code != 201 {
			t.Fatalf("push %s: %d %s", q, code, body)
		}
	}
	type leased struct{ pid, txid, lease string }
	held := map[string]leased{}
	for _, q := range []string{"mv-ack", "mv-batch", "mv-frozen"} {
		pid, txid, lease := popLeased(t, base, q)
		held[q] = leased{pid, txid, lease}
	}
	m := newMover(t, sh, cfg)
	for _, q := range queues[:6] {
		m.move(q)
	}
	m.freeze("mv-frozen")

	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"mv-push","partition":"p1","payload":2}]}`); code != 201 {
		t.Errorf("push to the moved queue: %d %s", code, body)
	}
	if s0, s1 := messagesOf(t, sh.s0, "mv-push"), messagesOf(t, sh.s1, "mv-push"); s0 != 1 || s1 != 2 {
		t.Errorf("mv-push: %d messages on s0, %d on s1; want 1 (frozen) and 2", s0, s1)
	}
	if code, body := post(t, base+"/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"mv-txn","partition":"p1","payload":2}]}]}`); code != 200 {
		t.Errorf("transaction on the moved queue: %d %s", code, body)
	}
	if s0, s1 := messagesOf(t, sh.s0, "mv-txn"), messagesOf(t, sh.s1, "mv-txn"); s0 != 1 || s1 != 2 {
		t.Errorf("mv-txn: %d messages on s0, %d on s1; want 1 (frozen) and 2", s0, s1)
	}
	popOne(t, base, "mv-pop", "")
	popOne(t, base, "mv-part", "p1")
	ack := func(q string) string {
		return fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"completed"}`, held[q].pid, held[q].txid, held[q].lease)
	}
	if code, body := post(t, base+"/api/v1/lease/"+held["mv-ack"].lease+"/extend", `{"seconds":120}`); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("extend a lease of the moved queue: %d %s", code, body)
	}
	if code, body := post(t, base+"/api/v1/ack", ack("mv-ack")); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("ack of the moved queue: %d %s", code, body)
	}
	if code, body := post(t, base+"/api/v1/ack/batch", `{"acknowledgments":[`+ack("mv-batch")+`]}`); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("ack batch of the moved queue: %d %s", code, body)
	}
	for _, q := range []string{"mv-pop", "mv-part"} {
		if s0, s1 := leasedOn(t, sh.s0, q), leasedOn(t, sh.s1, q); s0 != 0 || s1 != 1 {
			t.Errorf("%s: %d leased cursors on s0, %d on s1; want 0 and 1", q, s0, s1)
		}
	}
	for _, q := range []string{"mv-ack", "mv-batch"} {
		if s0, s1 := consumed(t, sh.s0, q), consumed(t, sh.s1, q); s0 != 0 || s1 != 1 {
			t.Errorf("%s: %d consumed cursors on s0, %d on s1; want 0 and 1", q, s0, s1)
		}
	}

	moving := `{"error":"queue is moving","queue":"mv-frozen"}` + "\n"
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/v1/push", `{"items":[{"queue":"mv-frozen","partition":"p1","payload":2}]}`},
		{"GET", "/api/v1/pop/queue/mv-frozen?batch=1&wait=false", ""},
		{"GET", "/api/v1/pop/queue/mv-frozen/partition/p1?batch=1&wait=false", ""},
		{"POST", "/api/v1/ack", ack("mv-frozen")},
		{"POST", "/api/v1/ack/batch", `{"acknowledgments":[` + ack("mv-frozen") + `]}`},
		{"POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"mv-frozen","partition":"p1","payload":3}]}]}`},
	} {
		if code, after, body := send(t, r.method, base+r.path, r.body); code != 503 || after != "1" || body != moving {
			t.Errorf("%s %s of the frozen queue: %d Retry-After %q %s; want 503, 1, %s", r.method, r.path, code, after, body, moving)
		}
	}
	if code, after, body := send(t, "POST", base+"/api/v1/lease/"+held["mv-frozen"].lease+"/extend", `{"seconds":120}`); code != 503 || after != "1" ||
		!strings.HasPrefix(body, `{"error":"queue is moving"`) {
		t.Errorf("extend a lease of the frozen queue: %d Retry-After %q %s", code, after, body)
	}
	if n, c := messagesOf(t, sh.s0, "mv-frozen"), consumed(t, sh.s0, "mv-frozen"); n != 1 || c != 0 {
		t.Errorf("mv-frozen on s0: %d messages, %d consumed cursors; want 1 and 0 (nothing written)", n, c)
	}
}

// A long poll parked on an empty queue that then freezes for a move does
// not spin on the moved answer: its next try is routed again, finds the
// same placement, and answers 503 "queue is moving" long before its
// timeout. The order is fixed: the freeze comes after the poll's first
// (empty) try wrote its pop mark.
func TestShardsLongPollOnAFreezingQueue(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg := sh.config(t, "queue:mv-*=s0")
	b := start(t, cfg)
	defer shutdown(t, b)
	base := "http://" + b.Addr()
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"mv-wait","partition":"p1","payload":1}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	pid, txid := popOne(t, base, "mv-wait", "")
	if code, body := post(t, base+"/api/v1/ack", fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"status":"completed"}`, pid, txid)); code != 200 {
		t.Fatalf("ack: %d %s", code, body)
	}
	type answer struct {
		code       int
		after, raw string
		took       time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		began := time.Now()
		code, after, raw := send(t, "GET", base+"/api/v1/pop/queue/mv-wait?wait=true&timeout=30000", "")
		done <- answer{code, after, raw, time.Since(began)}
	}()
	for count(t, sh.s0, `SELECT count(*) FROM queen.pop_marks m JOIN queen.queues q ON q.id = m.queue_id WHERE q.name = 'mv-wait'`) == 0 {
		select {
		case a := <-done:
			t.Fatalf("the long poll ended before it parked: %+v", a)
		case <-time.After(10 * time.Millisecond):
		}
	}
	newMover(t, sh, cfg).freeze("mv-wait")
	a := <-done
	if a.code != 503 || a.after != "1" || a.raw != `{"error":"queue is moving","queue":"mv-wait"}`+"\n" || a.took > 15*time.Second {
		t.Fatalf("the long poll on the frozen queue: %d Retry-After %q %s after %v; want 503 at its next try", a.code, a.after, a.raw, a.took)
	}
}

// TestShardsFenceGeneralAndTransactionAcks: a failed ack (the general ack
// path) and a transaction's ack of a queue that moved to s1 are served on
// s1 by a broker whose cache still names s0; of a queue frozen on s0 they
// answer 503 "queue is moving", nothing written on s0 (the lease kept, no
// cursor moved). Unfenced, both wrote on the frozen source: a lease
// released or a cursor moved there never reaches the destination.
func TestShardsFenceGeneralAndTransactionAcks(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg := sh.config(t, "queue:fa-*=s0")
	b := start(t, cfg)
	defer shutdown(t, b)
	base := "http://" + b.Addr()
	type leased struct{ pid, txid, lease string }
	held := map[string]leased{}
	for _, q := range []string{"fa-fail", "fa-txn", "fa-ffail", "fa-ftxn"} {
		if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p1","payload":1}]}`, q)); code != 201 {
			t.Fatalf("push %s: %d %s", q, code, body)
		}
		pid, txid, lease := popLeased(t, base, q)
		held[q] = leased{pid, txid, lease}
	}
	m := newMover(t, sh, cfg)
	m.move("fa-fail")
	m.move("fa-txn")
	m.freeze("fa-ffail")
	m.freeze("fa-ftxn")
	failed := func(q string) string {
		return fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"failed"}`, held[q].pid, held[q].txid, held[q].lease)
	}
	txnAck := func(q string) string {
		return fmt.Sprintf(`{"operations":[{"type":"ack","partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"completed"}]}`,
			held[q].pid, held[q].txid, held[q].lease)
	}
	if code, body := post(t, base+"/api/v1/ack", failed("fa-fail")); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("failed ack of the moved queue: %d %s", code, body)
	}
	if s0, s1 := leasedOn(t, sh.s0, "fa-fail"), leasedOn(t, sh.s1, "fa-fail"); s0 != 1 || s1 != 0 {
		t.Errorf("fa-fail: %d leased cursors on s0, %d on s1; want 1 (frozen, untouched) and 0 (released by the failed ack)", s0, s1)
	}
	if code, body := post(t, base+"/api/v1/transaction", txnAck("fa-txn")); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("transaction ack of the moved queue: %d %s", code, body)
	}
	if s0, s1 := consumed(t, sh.s0, "fa-txn"), consumed(t, sh.s1, "fa-txn"); s0 != 0 || s1 != 1 {
		t.Errorf("fa-txn: %d consumed cursors on s0, %d on s1; want 0 and 1", s0, s1)
	}
	for _, r := range []struct{ queue, path, body string }{
		{"fa-ffail", "/api/v1/ack", failed("fa-ffail")},
		{"fa-ffail", "/api/v1/ack/batch", `{"acknowledgments":[` + failed("fa-ffail") + `]}`},
		{"fa-ftxn", "/api/v1/transaction", txnAck("fa-ftxn")},
	} {
		moving := `{"error":"queue is moving","queue":"` + r.queue + `"}` + "\n"
		if code, after, body := send(t, "POST", base+r.path, r.body); code != 503 || after != "1" || body != moving {
			t.Errorf("POST %s of the frozen queue: %d Retry-After %q %s; want 503, 1, %s", r.path, code, after, body, moving)
		}
	}
	for _, q := range []string{"fa-ffail", "fa-ftxn"} {
		if l, c := leasedOn(t, sh.s0, q), consumed(t, sh.s0, q); l != 1 || c != 0 {
			t.Errorf("%s on s0: %d leased, %d consumed cursors; want 1 and 0 (nothing written)", q, l, c)
		}
	}
}

// TestShardsAckDuringTheSourcesCleanup: a move's cleanup deletes the
// source's cursor rows before its messages, so for a while an ack routed
// to the source finds the message and no cursor row, no fence to say
// moved. Such an ack must not be refused as a final "Invalid or expired
// lease" (the client would drop it, and the message comes back when the
// live lease on the destination ends): with the destination unreachable,
// the source's leftovers are not where the ack goes (503, to retry); once
// the destination answers, the ack completes there.
func TestShardsAckDuringTheSourcesCleanup(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg := sh.config(t, "")
	b := start(t, cfg)
	defer shutdown(t, b)
	base := "http://" + b.Addr()
	for i := range 2 {
		if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":"cl","partition":"p1","payload":%d}]}`, i)); code != 201 {
			t.Fatalf("push: %d %s", code, body)
		}
	}
	pid, txid, lease := popLeased(t, base, "cl")
	newMover(t, sh, cfg).move("cl")
	// The broker learns the placement on s1 by the fence (its push goes there).
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"cl","partition":"p2","payload":2}]}`); code != 201 {
		t.Fatalf("push after the move: %d %s", code, body)
	}
	if n := count(t, sh.s0, `WITH gone AS (DELETE FROM queen.partition_consumers WHERE partition_id = $1::uuid RETURNING 1)
		SELECT count(*) FROM gone`, pid); n != 1 {
		t.Fatalf("deleted %d cursor rows on s0", n)
	}
	s1 := dbName(t, sh.s1)
	admin := func(sql string) { count(t, sh.catalog, `SELECT count(*) FROM (`+sql+`) x`) }
	ack := fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"completed"}`, pid, txid, lease)
	execOn(t, sh.catalog, `ALTER DATABASE `+pgx.Identifier{s1}.Sanitize()+` ALLOW_CONNECTIONS false`)
	admin(fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'`, s1))
	if code, body := post(t, base+"/api/v1/ack/batch", `{"acknowledgments":[`+ack+`]}`); code != 503 {
		t.Errorf("ack with s1 down and s0 cleaning up: %d %s, want 503", code, body)
	}
	execOn(t, sh.catalog, `ALTER DATABASE `+pgx.Identifier{s1}.Sanitize()+` ALLOW_CONNECTIONS true`)
	code, body := 503, ""
	for try := 0; code == 503 && try < 50; try++ { // the broker's pool meets its terminated connections first
		code, body = post(t, base+"/api/v1/ack/batch", `{"acknowledgments":[`+ack+`]}`)
	}
	if code != 200 || !strings.Contains(body, `"success":true`) {
		t.Errorf("ack with s1 back: %d %s", code, body)
	}
}

// execOn runs one statement on dsn's database.
func execOn(t *testing.T, dsn, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
