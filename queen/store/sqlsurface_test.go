package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestSQLPushFunctionsFeedTheBroker: queen.push_messages_v3 and _v2 create
// queues and partitions, dedup within the call and against stored rows,
// keep producerSub ("" is NULL), and what they store is popped like any
// other message, by a wildcard pop too.
func TestSQLPushFunctionsFeedTheBroker(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	ctx := context.Background()
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT queen.push_messages_v3($1::jsonb)`, `[
		{"queue": "sql.jobs", "partition": "p1", "transactionId": "t1", "payload": {"n": 1}, "producerSub": "sp-test-sub"},
		{"queue": "sql.jobs", "partition": "p1", "transactionId": "t1", "payload": {"n": 2}},
		{"queue": "sql.jobs", "partition": "p2", "transactionId": "t2", "producerSub": ""}]`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var v3 struct {
		Items []struct {
			Status    string `json:"status"`
			MessageID string `json:"message_id"`
			QueueName string `json:"queueName"`
		} `json:"items"`
		Updates []any `json:"partition_updates"`
	}
	if err := json.Unmarshal(raw, &v3); err != nil || len(v3.Items) != 3 || v3.Items[0].Status != "queued" ||
		v3.Items[1].Status != "duplicate" || v3.Items[1].MessageID != v3.Items[0].MessageID || v3.Items[2].Status != "queued" ||
		len(v3.Updates) != 2 || v3.Items[0].QueueName != "sql.jobs" {
		t.Fatalf("v3: %s %v", raw, err)
	}
	if err := pool.QueryRow(ctx, `SELECT queen.push_messages_v2($1::jsonb)`, `[{"queue": "sql.jobs", "partition": "p1", "transactionId": "t1"}]`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var v2 []map[string]any
	if err := json.Unmarshal(raw, &v2); err != nil || len(v2) != 1 || v2[0]["status"] != "duplicate" || v2[0]["queueName"] != nil {
		t.Fatalf("v2: %s %v", raw, err)
	}
	var ns, task string
	if err := pool.QueryRow(ctx, `SELECT namespace, task FROM queen.queues WHERE name = 'sql.jobs'`).Scan(&ns, &task); err != nil || ns != "sql" || task != "jobs" {
		t.Fatalf("namespace and task from the name: %q %q %v", ns, task, err)
	}
	p, err := s.Pop(ctx, store.PopRequest{Tenant: tenant, Queue: "sql.jobs", Batch: 10, Partitions: 10})
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("a wildcard pop of what SQL pushed: %+v %v", p, err)
	}
	for _, m := range p.Messages {
		want := map[string]string{"t1": "sp-test-sub", "t2": ""}[m.TransactionID]
		got := ""
		if m.ProducerSub != nil {
			got = *m.ProducerSub
		}
		if got != want {
			t.Errorf("%s: producerSub %q, want %q", m.TransactionID, got, want)
		}
	}
	// And an HTTP-path push after it continues the same sequence.
	res, err := s.Push(ctx, tenant, []store.PushItem{{Queue: "sql.jobs", Partition: "p1", TransactionID: "t3"}}, "")
	if err != nil || res[0].Status != "queued" {
		t.Fatalf("push after SQL pushes: %+v %v", res, err)
	}
}
