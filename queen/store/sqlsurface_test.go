package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

// TestSQLPushFunctionsFeedTheBroker: queen.push_messages_v3 and _v2 create
// queues and partitions, dedup within the call and against stored rows,
// keep producerSub ("" is NULL), and what they store is popped like any
// other message, by a wildcard pop too.
func TestSQLPushFunctionsFeedTheBroker(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
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
	p, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "sql.jobs", Batch: 10, Partitions: 10})
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
	res, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "sql.jobs", Partition: "p1", TransactionID: "t3"}}, "")
	if err != nil || res[0].Status != "queued" {
		t.Fatalf("push after SQL pushes: %+v %v", res, err)
	}
}

// popSpecific runs queen.pop_specific_batch and decodes its answer.
func popSpecific(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, requests string) []specificResult {
	t.Helper()
	var raw []byte
	if err := pool.QueryRow(context.Background(), `SELECT queen.pop_specific_batch($1::jsonb)`, requests).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []specificResult
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return out
}

type specificResult struct {
	Idx    int `json:"idx"`
	Result struct {
		Success       bool   `json:"success"`
		Error         string `json:"error"`
		Queue         string `json:"queue"`
		Partition     string `json:"partition"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
		ConsumerGroup string `json:"consumerGroup"`
		Messages      []struct {
			ID            string          `json:"id"`
			TransactionID string          `json:"transactionId"`
			Data          json.RawMessage `json:"data"`
			ProducerSub   *string         `json:"producerSub"`
			CreatedAt     int64           `json:"createdAt"`
		} `json:"messages"`
	} `json:"result"`
}

// TestPopSpecificBatchLeasesLikeTheBroker: queen.pop_specific_batch answers
// in (queue, partition) order, reports unknown partitions, leases what it
// returns under worker_id so the broker's pops skip the partition and a
// second call finds the lease held, and an ack with that lease id settles
// the messages; a partial batch leases only what it returned.
func TestPopSpecificBatchLeasesLikeTheBroker(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	sub := "sp-test-sub"
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "spb", Partition: "P", TransactionID: "a", Payload: crypt.Plain(json.RawMessage(`{"n":1}`))},
		{Queue: "spb", Partition: "P", TransactionID: "b", ProducerSub: sub}, {Queue: "spb", Partition: "P", TransactionID: "c"}}, ""); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	out := popSpecific(t, pool, `[{"idx": 7, "queue_name": "spb", "partition_name": "P", "batch_size": 2, "lease_seconds": 60, "worker_id": "w-1"},
		{"idx": 3, "queue_name": "spb", "partition_name": "Nope"}]`)
	if len(out) != 2 || out[0].Idx != 3 || out[0].Result.Success || out[0].Result.Error != "partition_not_found" || out[0].Result.Messages == nil {
		t.Fatalf("unknown partition first (N < P): %+v", out)
	}
	got := out[1].Result
	if out[1].Idx != 7 || !got.Success || got.LeaseID != "w-1" || got.ConsumerGroup != "__QUEUE_MODE__" || got.Queue != "spb" ||
		len(got.Messages) != 2 || got.Messages[0].TransactionID != "a" || string(got.Messages[0].Data) != `{"n": 1}` ||
		got.Messages[0].ProducerSub != nil || *got.Messages[1].ProducerSub != sub {
		t.Fatalf("pop: %+v", out[1])
	}
	if at := time.UnixMicro(got.Messages[0].CreatedAt); at.Before(before.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
		t.Fatalf("createdAt %d is not microseconds", got.Messages[0].CreatedAt)
	}
	if r, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "spb", Batch: 10}); err != nil || len(r.Messages) != 0 {
		t.Fatalf("the broker popped a leased partition: %+v %v", r, err)
	}
	if again := popSpecific(t, pool, `[{"queue_name": "spb", "partition_name": "P", "worker_id": "w-2"}]`); again[0].Result.Error != "lease_held" {
		t.Fatalf("second claim: %+v", again)
	}
	var items []store.AckItem
	for _, m := range got.Messages {
		items = append(items, store.AckItem{TransactionID: m.TransactionID, PartitionID: got.PartitionID, LeaseID: "w-1"})
	}
	res, err := s.Ack(ctx, tenant, "", items)
	if err != nil || !res[0].Success || !res[1].Success {
		t.Fatalf("ack under worker_id: %+v %v", res, err)
	}
	// The lease ended with its batch: c is next, for anyone.
	r, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "spb", Batch: 10})
	if err != nil || len(r.Messages) != 1 || r.Messages[0].TransactionID != "c" {
		t.Fatalf("after the ack: %+v %v", r, err)
	}
	// A named group first seen here subscribes from the start.
	g := popSpecific(t, pool, `[{"queue_name": "spb", "partition_name": "P", "consumer_group": "audit", "worker_id": "w-3"}]`)
	if len(g[0].Result.Messages) != 3 || g[0].Result.ConsumerGroup != "audit" {
		t.Fatalf("group audit: %+v", g)
	}
}
