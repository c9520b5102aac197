package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// popped is one message of a pop's answer.
type popped struct {
	Queue         string `json:"queue"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	LeaseID       string `json:"leaseId"`
}

// popAll pops url until it answers 204 and answers every message popped,
// each acked with its lease.
func popAll(t *testing.T, base, url string) []popped {
	t.Helper()
	var all []popped
	for range 20 {
		code, body := get(t, url)
		if code == 204 {
			return all
		}
		var out struct {
			Messages []popped `json:"messages"`
		}
		if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil || len(out.Messages) == 0 {
			t.Fatalf("%s: %d %s (%v)", url, code, body, err)
		}
		for _, m := range out.Messages {
			ack := fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"completed"}`, m.PartitionID, m.TransactionID, m.LeaseID)
			if code, body := post(t, base+"/api/v1/ack", ack); code != 200 || !strings.Contains(body, `"success":true`) {
				t.Fatalf("ack %s of %s: %d %s", m.TransactionID, m.Queue, code, body)
			}
		}
		all = append(all, out.Messages...)
	}
	t.Fatalf("%s: still answering after 20 pops", url)
	return nil
}

// queuesPopped are the queues of msgs, sorted, once each message; ok is
// false when a message came twice.
func queuesPopped(msgs []popped) ([]string, bool) {
	var qs []string
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.TransactionID] {
			return nil, false
		}
		seen[m.TransactionID] = true
		qs = append(qs, m.Queue)
	}
	slices.Sort(qs)
	return qs, true
}

// consumedOn counts the messages group consumed of queue in dsn's
// database (the sum of its cursors' positions).
func consumedOn(t *testing.T, dsn, queue, group string) int {
	return count(t, dsn, `SELECT coalesce(sum(pc.last_consumed_seq), 0)::int FROM queen.partition_consumers pc
		JOIN queen.partitions p ON p.id = pc.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND pc.consumer_group = $2`, queue, group)
}

// pushN pushes n messages to queue's partition p.
func pushN(t *testing.T, base, queue string, n int) {
	t.Helper()
	for i := range n {
		if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p","payload":{"n":%d}}]}`, queue, i)); code != 201 {
			t.Fatalf("push %s: %d %s", queue, code, body)
		}
	}
}

// TestShardsPopByNamespaceAndTask: with queues of one namespace and task
// on both shards (a-* on s0, b-* on s1), a pop by namespace and one by
// task deliver the messages of both shards, each once, their leases acked
// on their shard; a tombstone of b-1 on s0 (what a move leaves) in the
// same namespace does not disturb them; and a long poll on the namespace,
// parked with nothing on either shard, ends with the message a push to
// s1's queue brings.
func TestShardsPopByNamespaceAndTask(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	b := start(t, sh.config(t, "queue:b-*=s1"))
	base := "http://" + b.Addr()
	for _, q := range []string{"a-1", "b-1", "b-2"} {
		if code, out := post(t, base+"/api/v1/configure", fmt.Sprintf(`{"queue":%q,"namespace":"n","task":"t"}`, q)); code != 200 {
			t.Fatalf("configure %s: %d %s", q, code, out)
		}
	}
	tombstone(t, sh.s1, sh.s0, "b-1")
	pushN(t, base, "a-1", 2)
	pushN(t, base, "b-1", 2)

	got, once := queuesPopped(popAll(t, base, base+"/api/v1/pop?namespace=n&batch=10&wait=false"))
	if want := []string{"a-1", "a-1", "b-1", "b-1"}; !once || !slices.Equal(got, want) {
		t.Errorf("pop by namespace: %v (each once: %v), want %v", got, once, want)
	}
	if a, b := consumedOn(t, sh.s0, "a-1", "__QUEUE_MODE__"), consumedOn(t, sh.s1, "b-1", "__QUEUE_MODE__"); a != 2 || b != 2 {
		t.Errorf("acked: a-1 on s0 %d, b-1 on s1 %d; want 2 each", a, b)
	}

	pushN(t, base, "a-1", 1)
	pushN(t, base, "b-2", 1)
	got, once = queuesPopped(popAll(t, base, base+"/api/v1/pop?task=t&batch=10&wait=false"))
	if want := []string{"a-1", "b-2"}; !once || !slices.Equal(got, want) {
		t.Errorf("pop by task: %v (each once: %v), want %v", got, once, want)
	}

	// A long poll with nothing on either shard ends with s1's message,
	// which its autoAck completes on s1.
	done := make(chan popResult, 1)
	go func() {
		code, body := getErr(base + "/api/v1/pop?namespace=n&batch=10&wait=true&timeout=60000&autoAck=true")
		done <- popResult{code, body}
	}()
	time.Sleep(300 * time.Millisecond) // not needed for the outcome: a push first is popped at once too
	pushN(t, base, "b-2", 1)
	res := <-done
	if res.code != 200 || !strings.Contains(res.body, `"queue":"b-2"`) {
		t.Errorf("long poll on namespace n: %d %s", res.code, res.body)
	}
	if n := consumedOn(t, sh.s1, "b-2", "__QUEUE_MODE__"); n != 2 {
		t.Errorf("b-2 consumed to %d on s1 after the autoAck long poll, want 2", n)
	}
	shutdown(t, b)
}

// popResult is a pop's answer read in another goroutine.
type popResult struct {
	code int
	body string
}

// getErr is get for another goroutine: a failure is code 0.
func getErr(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// tombstone writes on to's database a frozen copy of from's queue in its
// namespace and task (what a move leaves on its source).
func tombstone(t *testing.T, from, to, queue string) {
	t.Helper()
	ctx := context.Background()
	src, err := pgx.Connect(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	var id, tenant, ns, task string
	var created time.Time
	if err := src.QueryRow(ctx, `SELECT id::text, tenant_id::text, namespace, task, created_at FROM queen.queues WHERE name = $1`, queue).
		Scan(&id, &tenant, &ns, &task, &created); err != nil {
		t.Fatal(err)
	}
	dst, err := pgx.Connect(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close(ctx)
	if _, err := dst.Exec(ctx, `INSERT INTO queen.queues (id, tenant_id, name, namespace, task, created_at, epoch) VALUES ($1, $2, $3, $4, $5, $6, -1)`,
		id, tenant, queue, ns, task, created); err != nil {
		t.Fatal(err)
	}
}

// TestShardsGroupWrites: a consumer group consuming a queue on each shard
// (a-1 on s0, b-1 on s1) is sought, subscribed and deleted on the shard
// of each queue: a seek of b-1 to the end moves s1's cursor (its next pop
// is empty), one of b-1's partition finds it on s1, a subscription change
// reaches both shards' subscriptions, a delete of the group on b-1 deletes
// s1's cursors only, and a delete of the group deletes s0's too. With s1
// refusing connections, the group's writes to every shard and a pop by
// namespace answer 503 naming s1.
func TestShardsGroupWrites(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	b := start(t, sh.config(t, "queue:b-*=s1"))
	base := "http://" + b.Addr()
	for _, q := range []string{"a-1", "b-1"} {
		if code, out := post(t, base+"/api/v1/configure", fmt.Sprintf(`{"queue":%q,"namespace":"n"}`, q)); code != 200 {
			t.Fatalf("configure %s: %d %s", q, code, out)
		}
		pushN(t, base, q, 3)
	}
	// The group takes one message of each queue (and so a cursor on each).
	for _, q := range []string{"a-1", "b-1"} {
		if code, body := get(t, base+"/api/v1/pop/queue/"+q+"?consumerGroup=g&batch=1&wait=false&autoAck=true&subscriptionFrom=2000-01-01T00:00:00Z"); code != 200 {
			t.Fatalf("pop %s for g: %d %s", q, code, body)
		}
	}
	if code, body := post(t, base+"/api/v1/consumer-groups/g/queues/b-1/seek", `{"toEnd":true}`); code != 200 || !strings.Contains(body, `"partitionsUpdated":1`) {
		t.Errorf("seek g on b-1: %d %s", code, body)
	}
	if code, body := get(t, base+"/api/v1/pop/queue/b-1?consumerGroup=g&batch=10&wait=false"); code != 204 {
		t.Errorf("pop of b-1 for g after the seek to its end: %d %s", code, body)
	}
	if n := consumedOn(t, sh.s1, "b-1", "g"); n != 3 {
		t.Errorf("g's cursor of b-1 on s1 at %d after the seek, want 3", n)
	}
	if code, body := post(t, base+"/api/v1/consumer-groups/g/queues/b-1/partitions/p/seek", `{}`); code != 200 || !strings.Contains(body, `"partitionName":"p"`) {
		t.Errorf("seek g on b-1's partition p: %d %s", code, body)
	}
	if code, body := post(t, base+"/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":"2020-01-01T00:00:00Z"}`); code != 200 || !strings.Contains(body, `"rowsUpdated":2`) {
		t.Errorf("subscription of g: %d %s", code, body)
	}
	for shard, dsn := range map[string]string{"s0": sh.s0, "s1": sh.s1} {
		if n := count(t, dsn, `SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = 'g'
			AND subscription_timestamp = '2020-01-01T00:00:00Z'`); n != 1 {
			t.Errorf("g's subscriptions moved to 2020 on %s: %d, want 1", shard, n)
		}
	}
	onS0, onS1 := groupCursors(t, sh.s0, "g"), groupCursors(t, sh.s1, "g")
	if onS0 == 0 || onS1 == 0 {
		t.Fatalf("g has %d cursors on s0 and %d on s1, want some on each", onS0, onS1)
	}
	if code, body := do(t, "DELETE", base+"/api/v1/consumer-groups/g/queues/b-1", "", ""); code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"deletedPartitions":%d`, onS1)) {
		t.Errorf("delete g on b-1: %d %s, want %d deleted", code, body, onS1)
	}
	if n, m := groupCursors(t, sh.s0, "g"), groupCursors(t, sh.s1, "g"); n != onS0 || m != 0 {
		t.Errorf("after deleting g on b-1: %d cursors of g on s0 (want %d), %d on s1 (want 0)", n, onS0, m)
	}
	if code, body := do(t, "DELETE", base+"/api/v1/consumer-groups/g", "", ""); code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"deletedPartitions":%d`, onS0)) {
		t.Errorf("delete g: %d %s, want %d deleted", code, body, onS0)
	}
	if n := groupCursors(t, sh.s0, "g"); n != 0 {
		t.Errorf("after deleting g: %d cursors of g on s0, want 0", n)
	}

	// s1 refuses connections: the writes to every shard, and a pop by
	// namespace, fail naming it.
	restore := refuseConnections(t, sh.catalog, sh.s1)
	for _, c := range []struct{ method, route, body string }{
		{"POST", "/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":"2020-01-01T00:00:00Z"}`},
		{"DELETE", "/api/v1/consumer-groups/g", ""},
		{"GET", "/api/v1/pop?namespace=n&wait=false", ""},
	} {
		code, body := do(t, c.method, base+c.route, "", c.body)
		if code != 503 || !strings.Contains(string(body), "shard s1 unavailable") {
			t.Errorf("%s %s with s1 down: %d %s", c.method, c.route, code, body)
		}
	}
	restore()
	shutdown(t, b)
}

// groupCursors counts group's cursors in dsn's database.
func groupCursors(t *testing.T, dsn, group string) int {
	return count(t, dsn, `SELECT count(*) FROM queen.partition_consumers WHERE consumer_group = $1`, group)
}
