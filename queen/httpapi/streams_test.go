package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/config"
)

// Registration: the same name keeps its id; a changed hash is a 409
// naming the mismatch unless reset, which wipes the state; bad bodies are
// 400s naming the field.
func TestStreamsRegisterQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := func(body map[string]any, want int) map[string]any {
		t.Helper()
		return e.expect(e.do("POST", "/streams/v1/queries", body), want).obj(t)
	}
	a := reg(map[string]any{"name": "test-q", "source_queue": "src", "config_hash": "h1", "reset": false}, 200)
	if a["fresh"] != true || a["reset"] != false || a["query_id"] == "" {
		t.Fatalf("first: %v", a)
	}
	b := reg(map[string]any{"name": "test-q", "source_queue": "src", "sink_queue": "out", "config_hash": "h1", "reset": true}, 200)
	if b["query_id"] != a["query_id"] || b["fresh"] != false || b["reset"] != false {
		t.Fatalf("same hash: %v", b)
	}
	c := reg(map[string]any{"name": "test-q", "source_queue": "src", "config_hash": "h2"}, 409)
	if c["success"] != false || c["query_id"] != a["query_id"] || !strings.Contains(c["error"].(string), "config_hash mismatch") {
		t.Fatalf("mismatch: %v", c)
	}
	d := reg(map[string]any{"name": "test-q", "source_queue": "src", "config_hash": "h2", "reset": true}, 200)
	if d["query_id"] != a["query_id"] || d["reset"] != true {
		t.Fatalf("reset: %v", d)
	}
	for body, want := range map[string]string{
		`{"source_queue":"s","config_hash":"h"}`: "name is required",
		`{"name":"n","config_hash":"h"}`:         "source_queue is required",
		`{"name":"n","source_queue":"s"}`:        "config_hash is required",
		`[1]`:                                    "request body must be a JSON object",
		`{"name":"n","source_queue":"s","config_hash":"h","reset":"yes"}`: "reset must be a boolean",
	} {
		r := e.do("POST", "/streams/v1/queries", json.RawMessage(body))
		if r.status != 400 || r.obj(t)["error"] != want {
			t.Errorf("%s: %d %s, want 400 %q", body, r.status, r.body, want)
		}
	}
}

// A windowed count written the way the SDKs run it: pop a batch, read the
// shard's state, commit the new counts, one sink message and the ack of the
// batch's last message in one cycle. A runner that dies holding a batch
// (its lease runs out) and one whose cycle carries a stale lease commit
// nothing, so the counts stay exact; a partial ack keeps the lease and the
// tail comes back after it.
func TestStreamsWindowedCountIsExactThroughLostLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "clicks", "options": map[string]any{"leaseTime": 30}}), 200)
	q := e.expect(e.do("POST", "/streams/v1/queries", map[string]any{"name": "test-clicks", "source_queue": "clicks",
		"sink_queue": "clicks.counts", "config_hash": "h"}), 200).obj(t)["query_id"].(string)
	var items []item
	for i := 0; i < 20; i++ {
		items = append(items, item{"queue": "clicks", "partition": "p", "transactionId": fmt.Sprint("c", i), "payload": map[string]any{"w": i % 3}})
	}
	e.push(items...)
	const group = "streams.test-clicks"
	popBatch := func() *popped {
		return e.pop("/api/v1/pop/queue/clicks?batch=4&consumerGroup=" + group)
	}
	state := func(pid string, extra map[string]any) map[string]float64 {
		t.Helper()
		body := map[string]any{"query_id": q, "partition_id": pid, "keys": nil}
		for k, v := range extra {
			body[k] = v
		}
		var res struct {
			Success bool `json:"success"`
			Rows    []struct {
				Key   string          `json:"key"`
				Value json.RawMessage `json:"value"`
			} `json:"rows"`
		}
		e.expect(e.do("POST", "/streams/v1/state/get", body), 200).json(t, &res)
		out := map[string]float64{}
		for _, r := range res.Rows {
			var v struct {
				N float64 `json:"n"`
			}
			_ = json.Unmarshal(r.Value, &v)
			out[r.Key] = v.N
		}
		return out
	}
	cycle := func(p *popped, lease string, release bool, upto int) map[string]any {
		t.Helper()
		counts := state(p.PartitionID, nil)
		for _, m := range p.Messages[:upto] {
			var d struct {
				W int `json:"w"`
			}
			_ = json.Unmarshal(m.Data, &d)
			counts[fmt.Sprint("w", d.W)]++
		}
		var ops []map[string]any
		for k, n := range counts {
			ops = append(ops, map[string]any{"type": "upsert", "key": k, "value": map[string]any{"n": n, "windowEnd": 1000 * len(k)}})
		}
		last := p.Messages[upto-1]
		return e.expect(e.do("POST", "/streams/v1/cycle", map[string]any{"query_id": q, "partition_id": p.PartitionID,
			"consumer_group": group, "state_ops": ops, "release_lease": release,
			"push_items": []any{map[string]any{"queue": "clicks.counts", "partition": "p", "payload": map[string]any{"batch": upto}}},
			"ack":        map[string]any{"transactionId": last.TransactionID, "leaseId": lease, "status": "completed", "count": upto}}), 200).obj(t)
	}
	// A runner takes a batch and dies: nothing is committed; after the
	// lease the batch comes back.
	dead := popBatch()
	if dead == nil || len(dead.Messages) != 4 {
		t.Fatalf("first batch: %+v", dead)
	}
	e.advanceDB(31 * time.Second)
	// A cycle under the dead runner's lease, after another runner took
	// the partition, commits nothing.
	p := popBatch()
	if p == nil || p.Messages[0].TransactionID != "c0" {
		t.Fatalf("the dead runner's batch did not come back: %+v", p)
	}
	if r := cycle(dead, dead.LeaseID, true, 4); r["success"] != false || r["error"] != "Invalid or expired lease" ||
		r["state_ops_applied"].(float64) != 0 {
		t.Fatalf("stale lease: %v", r)
	}
	if s := state(p.PartitionID, nil); len(s) != 0 {
		t.Fatalf("a failed cycle wrote state: %v", s)
	}
	// A partial ack: two of four, the lease kept.
	if r := cycle(p, p.LeaseID, false, 2); r["success"] != true || r["ack_result"].(map[string]any)["lease_released"] != false {
		t.Fatalf("partial: %v", r)
	}
	if again := popBatch(); again != nil {
		t.Fatalf("a kept lease was popped: %+v", again)
	}
	e.advanceDB(31 * time.Second)
	cycles := 1
	for p = popBatch(); p != nil; p = popBatch() {
		if cycles == 1 && p.Messages[0].TransactionID != "c2" {
			t.Fatalf("the tail did not come back in order: %+v", p.Messages[0])
		}
		if r := cycle(p, p.LeaseID, true, len(p.Messages)); r["success"] != true || len(r["push_results"].([]any)) != 1 {
			t.Fatalf("cycle: %v", r)
		}
		cycles++
	}
	got := state(dead.PartitionID, nil)
	if got["w0"] != 7 || got["w1"] != 7 || got["w2"] != 6 {
		t.Fatalf("counts: %v, want w0=7 w1=7 w2=6", got)
	}
	// One sink message per committed cycle, in commit order.
	var sink []int
	for s := e.pop("/api/v1/pop/queue/clicks.counts?batch=100&autoAck=true&consumerGroup=check"); s != nil; s = e.pop("/api/v1/pop/queue/clicks.counts?batch=100&autoAck=true&consumerGroup=check") {
		for _, m := range s.Messages {
			var d struct {
				Batch int `json:"batch"`
			}
			_ = json.Unmarshal(m.Data, &d)
			sink = append(sink, d.Batch)
		}
	}
	total := 0
	for _, n := range sink {
		total += n
	}
	if len(sink) != cycles || total != 20 || sink[0] != 2 {
		t.Fatalf("sink %v over %d cycles", sink, cycles)
	}
	// Filters: exact keys, a literal prefix, ripe windows.
	if s := state(dead.PartitionID, map[string]any{"keys": []string{"w1", "nope"}}); len(s) != 1 || s["w1"] != 7 {
		t.Fatalf("keys: %v", s)
	}
	if s := state(dead.PartitionID, map[string]any{"keys": []string{}, "key_prefix": "w_"}); len(s) != 0 {
		t.Fatalf("a prefix is literal: %v", s)
	}
	if s := state(dead.PartitionID, map[string]any{"key_prefix": "w", "ripe_at_or_before": 2000}); len(s) != 3 {
		t.Fatalf("ripe: %v", s)
	}
	if s := state(dead.PartitionID, map[string]any{"ripe_at_or_before": 1999.5}); len(s) != 0 {
		t.Fatalf("ripe below every windowEnd: %v", s)
	}
}

// Flush cycles carry no ack; state deletes and upserts apply in order;
// malformed input is a 400 and unknown ids a business failure.
func TestStreamsCycleEdges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.expect(e.do("POST", "/streams/v1/queries", map[string]any{"name": "test-edges", "source_queue": "s", "config_hash": "h"}), 200).obj(t)["query_id"].(string)
	e.push(item{"queue": "s", "transactionId": "m1"})
	p := e.pop("/api/v1/pop/queue/s?consumerGroup=g")
	cyc := func(body map[string]any) map[string]any {
		t.Helper()
		return e.expect(e.do("POST", "/streams/v1/cycle", body), 200).obj(t)
	}
	r := cyc(map[string]any{"query_id": q, "partition_id": p.PartitionID, "consumer_group": "g", "ack": nil, "push_items": nil,
		"state_ops": []any{map[string]any{"type": "upsert", "key": "a", "value": 1}, map[string]any{"type": "delete", "key": "a"},
			map[string]any{"type": "upsert", "key": "b"}, map[string]any{"type": "delete", "key": "missing"}}})
	if r["success"] != true || r["state_ops_applied"].(float64) != 4 || r["ack_result"] != nil || r["queueName"] != "s" {
		t.Fatalf("flush: %v", r)
	}
	rows := e.expect(e.do("POST", "/streams/v1/state/get", map[string]any{"query_id": q, "partition_id": p.PartitionID}), 200).obj(t)["rows"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["key"] != "b" || fmt.Sprint(rows[0].(map[string]any)["value"]) != "map[]" {
		t.Fatalf("state after ops in order: %v", rows)
	}
	other := "01a22c56-622f-7000-85d2-8458ca5b958d"
	if r := cyc(map[string]any{"query_id": other, "partition_id": p.PartitionID}); r["success"] != false || r["error"] != "query not found" {
		t.Fatalf("unknown query: %v", r)
	}
	if r := cyc(map[string]any{"query_id": q, "partition_id": other}); r["success"] != false || r["error"] != "partition not found" {
		t.Fatalf("unknown partition: %v", r)
	}
	if r := cyc(map[string]any{"query_id": q, "partition_id": p.PartitionID, "consumer_group": "g",
		"ack": map[string]any{"transactionId": "nope", "leaseId": p.LeaseID}}); r["error"] != "Message not found" {
		t.Fatalf("unknown message: %v", r)
	}
	if r := cyc(map[string]any{"query_id": q, "partition_id": p.PartitionID, "consumer_group": "g",
		"ack": map[string]any{"transactionId": "m1"}}); r["error"] != "Invalid or expired lease" {
		t.Fatalf("an ack without its lease: %v", r)
	}
	for body, want := range map[string]string{
		`{"partition_id":"` + other + `"}`:                "query_id is required",
		`{"query_id":"x","partition_id":"` + other + `"}`: "query_id must be a UUID",
		`{"query_id":"` + q + `"}`:                        "partition_id is required",
		`{"query_id":"` + q + `","partition_id":"` + other + `","state_ops":[{"type":"merge","key":"k"}]}`:                   "state_ops[0].type must be upsert or delete",
		`{"query_id":"` + q + `","partition_id":"` + other + `","state_ops":[{"type":"upsert"}]}`:                            "state_ops[0].key is required",
		`{"query_id":"` + q + `","partition_id":"` + other + `","ack":{"leaseId":"l"}}`:                                      "ack.transactionId is required",
		`{"query_id":"` + q + `","partition_id":"` + other + `","push_items":[{"payload":1}]}`:                               "push_items[0].queue is required",
		`{"query_id":"` + q + `","partition_id":"` + other + `","state_ops":[{"type":"upsert","key":"k","value":"\u0000"}]}`: "state_ops[0].value contains",
	} {
		r := e.do("POST", "/streams/v1/cycle", json.RawMessage(body))
		if r.status != 400 || !strings.HasPrefix(r.obj(t)["error"].(string), want) {
			t.Errorf("%s: %d %s, want 400 %q", body, r.status, r.body, want)
		}
	}
	if r := e.do("POST", "/streams/v1/state/get", map[string]any{"query_id": q, "partition_id": "bad"}); r.status != 400 {
		t.Fatalf("state get with a malformed id: %d", r.status)
	}
	// Deleting the query takes its state with it (the SDK test runners'
	// cleanup).
	e.sql(t, `DELETE FROM queen_streams.queries WHERE name LIKE 'test-%'`)
	rows = e.expect(e.do("POST", "/streams/v1/state/get", map[string]any{"query_id": q, "partition_id": p.PartitionID}), 200).obj(t)["rows"].([]any)
	if len(rows) != 0 {
		t.Fatalf("state outlived its query: %v", rows)
	}
}

// Tenancy on (Rust's model): a tenant other than the default one registers
// a new query only with an enabled grant and below its cap, while
// re-attaching and resetting are never gated; the same name under two
// tenants is two queries; a partition that is not the caller's is a 404
// before anything is written, and another tenant's query reads as empty.
func TestStreamsTenancyGrantsQuotaAndOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.TenancyHeader = true })
	const t1, t2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	reg := func(tenant, name, hash string, reset bool, want int) map[string]any {
		t.Helper()
		body := map[string]any{"name": name, "source_queue": "src", "config_hash": hash, "reset": reset}
		return e.expect(e.do("POST", "/streams/v1/queries", body, "x-queen-tenant", tenant), want).obj(t)
	}
	if d := reg(t1, "count", "h", false, 403); d["denied"] != true || d["error"] != "streams not granted for this tenant" {
		t.Fatalf("no grant: %v", d)
	}
	reg(config.DefaultTenant, "count", "h", false, 200) // the default tenant is never gated
	e.sql(t, `INSERT INTO queen_streams.quota (tenant_id, max_queries) VALUES ($1, 1), ($2, NULL)`, t1, t2)
	a := reg(t1, "count", "h", false, 200)
	if d := reg(t1, "other", "h", false, 403); d["error"] != "streams query quota exceeded (max 1)" {
		t.Fatalf("over the cap: %v", d)
	}
	if again := reg(t1, "count", "h2", true, 200); again["query_id"] != a["query_id"] || again["reset"] != true {
		t.Fatalf("a reset at the cap: %v", again)
	}
	b := reg(t2, "count", "h", false, 200)
	if b["query_id"] == a["query_id"] {
		t.Fatal("two tenants share one query")
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM queen_streams.queries WHERE tenant_id = $1`, t1).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tenant 1 has %d queries (%v), want 1", n, err)
	}
	e.sql(t, `UPDATE queen_streams.quota SET enabled = false WHERE tenant_id = $1`, t2)
	if d := reg(t2, "second", "h", false, 403); d["error"] != "streams not granted for this tenant" {
		t.Fatalf("disabled grant: %v", d)
	}

	e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "src", "transactionId": "m1"}}},
		"x-queen-tenant", t1), 201)
	p := e.pop("/api/v1/pop/queue/src", "x-queen-tenant", t1)
	if p == nil {
		t.Fatal("tenant 1 cannot pop its message")
	}
	cycle := func(tenant, query, partition string) response {
		return e.do("POST", "/streams/v1/cycle", map[string]any{"query_id": query, "partition_id": partition,
			"state_ops": []any{map[string]any{"type": "upsert", "key": "n", "value": map[string]any{"n": 1}}}}, "x-queen-tenant", tenant)
	}
	for _, r := range []response{
		cycle(t2, b["query_id"].(string), p.PartitionID),
		cycle(t2, b["query_id"].(string), "01a22c56-622f-7000-85d2-8458ca5b958d"),
		e.do("POST", "/streams/v1/state/get", map[string]any{"query_id": b["query_id"], "partition_id": p.PartitionID}, "x-queen-tenant", t2),
	} {
		if r.status != 404 || r.obj(t)["error"] != "not found" {
			t.Fatalf("foreign partition: %d %s, want 404 not found", r.status, r.body)
		}
	}
	if r := e.expect(cycle(t1, a["query_id"].(string), p.PartitionID), 200).obj(t); r["success"] != true {
		t.Fatalf("own cycle: %v", r)
	}
	foreign := e.expect(e.do("POST", "/streams/v1/state/get", map[string]any{"query_id": b["query_id"], "partition_id": p.PartitionID},
		"x-queen-tenant", t1), 200).obj(t)
	if foreign["success"] != true || len(foreign["rows"].([]any)) != 0 {
		t.Fatalf("another tenant's query: %v", foreign)
	}
	own := e.expect(e.do("POST", "/streams/v1/state/get", map[string]any{"query_id": a["query_id"], "partition_id": p.PartitionID},
		"x-queen-tenant", t1), 200).obj(t)
	if rows := own["rows"].([]any); len(rows) != 1 {
		t.Fatalf("own state: %v", own)
	}
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM queen_streams.state WHERE query_id = $1`, b["query_id"]).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a refused cycle wrote %d rows (%v)", n, err)
	}
}
