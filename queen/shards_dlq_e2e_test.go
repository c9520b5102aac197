package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// deadLetterOn pushes a message with transactionId txid to queue, pops it
// and acknowledges it failed (the queue's retryLimit is 0: it is dead
// lettered at once), and answers its partition id.
func deadLetterOn(t *testing.T, base, queue, txid string) string {
	t.Helper()
	if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p","transactionId":%q,"payload":{"tx":%q}}]}`, queue, txid, txid)); code != 201 {
		t.Fatalf("push %s: %d %s", txid, code, body)
	}
	pid, got := popOne(t, base, queue, "")
	if got != txid {
		t.Fatalf("popped %s of %s, want %s", got, queue, txid)
	}
	if code, body := post(t, base+"/api/v1/ack", fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"status":"failed","error":"boom %s"}`, pid, txid, txid)); code != 200 {
		t.Fatalf("ack %s failed: %d %s", txid, code, body)
	}
	return pid
}

// listed reads a list answer's total and the transactionIds of its
// items (key: the list's field).
func listed(t *testing.T, base, path, key string) (int, []string) {
	t.Helper()
	code, body := get(t, base+path)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var out map[string]json.RawMessage
	var items []struct {
		TransactionID string `json:"transactionId"`
	}
	var total int
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET %s: %s (%v)", path, body, err)
	}
	if err := json.Unmarshal(out[key], &items); err != nil {
		t.Fatalf("GET %s: %s (%v)", path, body, err)
	}
	if raw, ok := out["total"]; ok {
		if err := json.Unmarshal(raw, &total); err != nil {
			t.Fatal(err)
		}
	}
	txids := make([]string, len(items))
	for i, it := range items {
		txids[i] = it.TransactionID
	}
	return total, txids
}

// TestShardsDLQMessagesTracesAcrossShards: a-* queues on s0, b-* on s1,
// dead letters on both, failed alternately. The DLQ and message lists
// merge both shards newest first with their totals summed, and every page
// of them is the slice of the whole list (offsets falling inside either
// shard's rows); a queue filter reads its shard only. A message of s1 is
// read, retried and deleted by its partition; traces recorded on both
// shards are read per message, by name (paged) and as names counted over
// both. A shard that cannot be read fails a merged list with 503 naming
// it, never a list of the other shard alone.
func TestShardsDLQMessagesTracesAcrossShards(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	b := start(t, sh.config(t, "queue:b-*=s1"))
	base := "http://" + b.Addr()
	for _, q := range []string{"a-dead", "b-dead"} {
		if code, body := post(t, base+"/api/v1/configure", fmt.Sprintf(`{"queue":%q,"options":{"retryLimit":0,"dlqAfterMaxRetries":true}}`, q)); code != 200 {
			t.Fatalf("configure %s: %d %s", q, code, body)
		}
	}
	pids := map[string]string{} // transactionId -> partition id
	for i := range 3 {
		for _, q := range []string{"a-dead", "b-dead"} {
			txid := fmt.Sprintf("%c%d", q[0], i)
			pids[txid] = deadLetterOn(t, base, q, txid)
		}
	}
	if n, m := count(t, sh.s0, `SELECT count(*) FROM queen.dead_letter_queue`), count(t, sh.s1, `SELECT count(*) FROM queen.dead_letter_queue`); n != 3 || m != 3 {
		t.Fatalf("dead letters: %d on s0, %d on s1; want 3 each", n, m)
	}
	newest := []string{"b2", "a2", "b1", "a1", "b0", "a0"}

	// The merged lists, whole and paged.
	for _, l := range []struct{ path, key string }{{"/api/v1/dlq", "messages"}, {"/api/v1/messages", "messages"}} {
		total, all := listed(t, base, l.path+"?limit=100", l.key)
		if !slices.Equal(all, newest) || (l.path == "/api/v1/dlq" && total != 6) {
			t.Errorf("%s: total %d, %v; want 6, %v", l.path, total, all, newest)
		}
		for _, pg := range [][2]int{{0, 2}, {1, 3}, {3, 2}, {4, 5}, {6, 2}} {
			_, got := listed(t, base, fmt.Sprintf("%s?offset=%d&limit=%d", l.path, pg[0], pg[1]), l.key)
			if want := newest[pg[0]:min(6, pg[0]+pg[1])]; !slices.Equal(got, want) {
				t.Errorf("%s offset %d limit %d: %v, want %v", l.path, pg[0], pg[1], got, want)
			}
		}
		total, got := listed(t, base, l.path+"?queue=b-dead", l.key)
		if want := []string{"b2", "b1", "b0"}; !slices.Equal(got, want) || (l.path == "/api/v1/dlq" && total != 3) {
			t.Errorf("%s of b-dead: total %d, %v; want 3, %v", l.path, total, got, want)
		}
	}
	if code, body := get(t, base+"/api/v1/dlq?offset=9999&limit=2"); code != 400 || !strings.Contains(body, "offset") {
		t.Errorf("a page past the merge window: %d %s, want 400 naming offset", code, body)
	}

	// One transactionId in both shards' queues, found on both.
	for _, q := range []string{"a-dead", "b-dead"} {
		if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"transactionId":"twice","payload":1}]}`, q)); code != 201 {
			t.Fatalf("push twice to %s: %d %s", q, code, body)
		}
	}
	code, body := get(t, base+"/api/v1/messages/by-transaction?transactionId=twice")
	if code != 200 || strings.Count(body, `"transactionId":"twice"`) != 3 || strings.Index(body, `"queue":"b-dead"`) > strings.Index(body, `"queue":"a-dead"`) {
		t.Errorf("by-transaction twice: %d %s; want b-dead's then a-dead's", code, body)
	}

	// A message of s1: read, retried, deleted, by its partition.
	if code, body := get(t, base+"/api/v1/messages/"+pids["b1"]+"/b1"); code != 200 || !strings.Contains(body, `"queue":"b-dead"`) ||
		!strings.Contains(body, `"status":"dead_letter"`) {
		t.Errorf("get b1: %d %s", code, body)
	}
	// Frozen (as a move freezes it), b-dead refuses the retry's append, a
	// delete and a trace: 503 "queue is moving", nothing written.
	setEpoch(t, sh.s1, "b-dead", -1)
	if code, body := post(t, base+"/api/v1/messages/"+pids["b2"]+"/b2/retry", ""); code != 503 || !strings.Contains(body, `"queue is moving"`) {
		t.Errorf("retry b2 on the frozen b-dead: %d %s, want 503 queue is moving", code, body)
	}
	if n, m := messagesOf(t, sh.s1, "b-dead"), count(t, sh.s1, `SELECT count(*) FROM queen.dead_letter_queue`); n != 4 || m != 3 {
		t.Errorf("after the refused retry: %d messages, %d dead letters on s1; want 4 and 3", n, m)
	}
	if code, body := do(t, "DELETE", base+"/api/v1/messages/"+pids["b0"]+"/b0", "", ""); code != 503 || !strings.Contains(string(body), `"queue is moving"`) {
		t.Errorf("delete b0 of the frozen b-dead: %d %s, want 503 queue is moving", code, body)
	}
	if code, body := post(t, base+"/api/v1/traces", fmt.Sprintf(`{"transactionId":"b0","partitionId":%q,"data":1}`, pids["b0"])); code != 503 ||
		!strings.Contains(body, `"queue is moving"`) {
		t.Errorf("trace b0 of the frozen b-dead: %d %s, want 503 queue is moving", code, body)
	}
	if n, m := messagesOf(t, sh.s1, "b-dead"), count(t, sh.s1, `SELECT count(*) FROM queen.message_traces`); n != 4 || m != 0 {
		t.Errorf("after the refused delete and trace: %d messages, %d traces on s1; want 4 and 0", n, m)
	}
	setEpoch(t, sh.s1, "b-dead", 1)
	if code, body := post(t, base+"/api/v1/messages/"+pids["b2"]+"/b2/retry", ""); code != 200 || !strings.Contains(body, `"queue":"b-dead"`) {
		t.Errorf("retry b2: %d %s", code, body)
	}
	if n := messagesOf(t, sh.s1, "b-dead"); n != 5 { // b0-b2, twice, b2's replay
		t.Errorf("b-dead on s1: %d messages after the retry, want 5", n)
	}
	if code, body := do(t, "DELETE", base+"/api/v1/messages/"+pids["b0"]+"/b0", "", ""); code != 200 {
		t.Errorf("delete b0: %d %s", code, body)
	}
	if code, _ := get(t, base+"/api/v1/messages/"+pids["b0"]+"/b0"); code != 404 {
		t.Errorf("get b0 after its delete: %d, want 404", code)
	}
	if total, got := listed(t, base, "/api/v1/dlq", "messages"); total != 4 || !slices.Equal(got, []string{"a2", "b1", "a1", "a0"}) {
		t.Errorf("dlq after the retry and the delete: total %d, %v", total, got)
	}

	// Traces on both shards.
	for _, tr := range []struct{ txid, names string }{{"b1", `["flow"]`}, {"a1", `["flow","a-only"]`}} {
		if code, body := post(t, base+"/api/v1/traces", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"data":{"at":%q},"traceNames":%s}`,
			tr.txid, pids[tr.txid], tr.txid, tr.names)); code != 201 {
			t.Fatalf("trace %s: %d %s", tr.txid, code, body)
		}
	}
	if code, body := get(t, base+"/api/v1/traces/"+pids["b1"]+"/b1"); code != 200 || strings.Count(body, `"at":"b1"`) != 1 {
		t.Errorf("traces of b1: %d %s", code, body)
	}
	if total, got := listed(t, base, "/api/v1/traces/by-name/flow", "traces"); total != 2 || !slices.Equal(got, []string{"b1", "a1"}) {
		t.Errorf("traces named flow: total %d, %v; want 2, [b1 a1]", total, got)
	}
	if _, got := listed(t, base, "/api/v1/traces/by-name/flow?offset=1&limit=1", "traces"); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("traces named flow, the second page of one: %v", got)
	}
	var names struct {
		Names []struct {
			Name         string `json:"name"`
			TraceCount   int    `json:"trace_count"`
			MessageCount int    `json:"message_count"`
		} `json:"trace_names"`
	}
	code, body = get(t, base+"/api/v1/traces/names")
	if err := json.Unmarshal([]byte(body), &names); code != 200 || err != nil {
		t.Fatalf("trace names: %d %s (%v)", code, body, err)
	}
	var rows []string
	for _, n := range names.Names {
		rows = append(rows, fmt.Sprintf("%s %d %d", n.Name, n.TraceCount, n.MessageCount))
	}
	if want := []string{"a-only 1 1", "flow 2 2"}; !slices.Equal(rows, want) {
		t.Errorf("trace names (name, traces, messages) %q, want %q", rows, want)
	}

	// s1 unreachable: a merged list answers 503 naming it.
	restore := refuseConnections(t, sh.catalog, sh.s1)
	for _, path := range []string{"/api/v1/dlq", "/api/v1/messages", "/api/v1/traces/names", "/api/v1/traces/by-name/flow"} {
		if code, body := get(t, base+path); code != 503 || !strings.Contains(body, "shard s1") {
			t.Errorf("%s with s1 down: %d %s, want 503 naming s1", path, code, body)
		}
	}
	if total, got := listed(t, base, "/api/v1/dlq?queue=a-dead", "messages"); total != 3 || len(got) != 3 {
		t.Errorf("dlq of a-dead (s0) with s1 down: total %d, %v", total, got)
	}
	restore()
	if total, _ := listed(t, base, "/api/v1/dlq", "messages"); total != 4 {
		t.Errorf("dlq with s1 back: total %d, want 4", total)
	}
	shutdown(t, b)
}

// refuseConnections makes database dsn refuse new connections and ends
// its open ones (run on admin, another database of its cluster), and
// answers the function that lets it accept them again (run at the test's
// end too).
func refuseConnections(t *testing.T, admin, dsn string) func() {
	t.Helper()
	db := pgx.Identifier{dbName(t, dsn)}.Sanitize()
	exec := func(sql string, args ...any) error {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql, args...)
		return err
	}
	if err := exec(`ALTER DATABASE ` + db + ` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := exec(`ALTER DATABASE ` + db + ` ALLOW_CONNECTIONS true`); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	if err := exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName(t, dsn)); err != nil {
		t.Fatal(err)
	}
	return restore
}

// setEpoch sets every fenced row of queue on dsn's database to epoch (-1:
// frozen at epoch 1, as a move's freeze leaves it).
func setEpoch(t *testing.T, dsn, queue string, epoch int) {
	t.Helper()
	ctx := context.Background()
	conn := dbConn(t, dsn)
	defer conn.Close(ctx)
	for _, sql := range []string{
		`UPDATE queen.queues SET epoch = $2 WHERE name = $1`,
		`UPDATE queen.partitions p SET epoch = $2 FROM queen.queues q WHERE q.id = p.queue_id AND q.name = $1`,
		`UPDATE queen.partition_consumers pc SET epoch = $2 FROM queen.queues q WHERE q.id = pc.queue_id AND q.name = $1`,
	} {
		if _, err := conn.Exec(ctx, sql, queue, epoch); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
