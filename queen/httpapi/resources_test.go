package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/config"
)

func TestConfigureMergeReplaceAndValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "jobs.email",
		"options": map[string]any{"leaseTime": 60, "retryLimit": 7, "deadLetterQueue": true}}), 200).obj(t)
	opts := r["options"].(map[string]any)
	if r["configured"] != true || r["queueId"] == nil || r["partitionId"] == nil || r["namespace"] != "jobs" || r["task"] != "email" ||
		opts["leaseTime"].(float64) != 60 || opts["retryLimit"].(float64) != 7 || opts["deadLetterQueue"] != true || opts["ttl"].(float64) != 3600 {
		t.Fatalf("configure: %v", r)
	}
	for _, k := range []string{"priority", "leaseTime", "retryLimit", "retryDelay", "maxSize", "ttl", "deadLetterQueue", "dlqAfterMaxRetries",
		"delayedProcessing", "windowBuffer", "retentionSeconds", "completedRetentionSeconds", "retentionEnabled", "encryptionEnabled", "maxWaitTimeSeconds"} {
		if _, ok := opts[k]; !ok {
			t.Fatalf("options lack %s: %v", k, opts)
		}
	}
	// Merge (default) keeps unmentioned options; top-level options work too.
	r = e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "jobs.email", "priority": 4}), 200).obj(t)
	opts = r["options"].(map[string]any)
	if opts["priority"].(float64) != 4 || opts["retryLimit"].(float64) != 7 {
		t.Fatalf("merge: %v", opts)
	}
	// Replace restores every unmentioned option to its default.
	r = e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "jobs.email", "mode": "replace", "options": map[string]any{"priority": 1}}), 200).obj(t)
	opts = r["options"].(map[string]any)
	if opts["retryLimit"].(float64) != 3 || opts["leaseTime"].(float64) != 300 || opts["deadLetterQueue"] != false {
		t.Fatalf("replace: %v", opts)
	}
	// An empty name is a queue called "" (contract-admin.md section 6).
	if r := e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": ""}), 200).obj(t); r["configured"] != true || r["queue"] != "" {
		t.Fatalf(`configure {"queue":""}: %v`, r)
	}
	for _, c := range []struct{ body, want string }{
		{`{}`, "queue is required"},
		{`{"queue":5}`, "queue"},
		{`{"queue":"q","options":{"leaseTime":"long"}}`, "options.leaseTime must be an integer"},
		{`{"queue":"q","options":{"retryLimit":-1}}`, "options.retryLimit must not be negative"},
		{`{"queue":"q","options":{"deadLetterQueue":"yes"}}`, "options.deadLetterQueue must be a boolean"},
		{`{"queue":"q","options":5}`, "options must be an object"},
		{`{"queue":"q","mode":"upsert"}`, "mode must be"},
		{`{"queue":"q","options":{"leaseTime":3000000000}}`, "options.leaseTime is out of range"},
		{`{"queue":"q","options":{"priority":1.5}}`, "options.priority must be an integer"},
	} {
		r := e.do("POST", "/api/v1/configure", c.body)
		if r.status != 400 || !strings.Contains(r.obj(t)["error"].(string), c.want) {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}
}

func TestResourcesListGetDeleteOverview(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "a.x", "transactionId": "1"}, item{"queue": "a.x", "partition": "p2", "transactionId": "2"}, item{"queue": "b", "transactionId": "3"})
	list := e.expect(e.do("GET", "/api/v1/resources/queues", nil), 200).obj(t)
	if len(list["queues"].([]any)) != 2 {
		t.Fatalf("list: %v", list)
	}
	// A page, newest first: b was created after a.x.
	page := e.expect(e.do("GET", "/api/v1/resources/queues?limit=1", nil), 200).obj(t)["queues"].([]any)
	next := e.expect(e.do("GET", "/api/v1/resources/queues?limit=1&offset=1", nil), 200).obj(t)["queues"].([]any)
	if len(page) != 1 || page[0].(map[string]any)["name"] != "b" || len(next) != 1 || next[0].(map[string]any)["name"] != "a.x" {
		t.Fatalf("pages: %v then %v", page, next)
	}
	if ns := e.expect(e.do("GET", "/api/v1/resources/queues?namespace=a", nil), 200).obj(t)["queues"].([]any); len(ns) != 1 {
		t.Fatalf("namespace a: %v", ns)
	}
	for _, bad := range []string{"limit=-1", "limit=ten", "offset=-2"} {
		r := e.do("GET", "/api/v1/resources/queues?"+bad, nil)
		if r.status != 400 || !strings.Contains(r.obj(t)["error"].(string), strings.Split(bad, "=")[0]) {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	q := e.expect(e.do("GET", "/api/v1/resources/queues/a.x", nil), 200).obj(t)
	if q["name"] != "a.x" || len(q["partitions"].([]any)) != 2 || q["messages"].(map[string]any)["pending"].(float64) != 2 {
		t.Fatalf("get: %v", q)
	}
	if r := e.do("GET", "/api/v1/resources/queues/missing", nil); r.status != 404 {
		t.Fatalf("get missing: %d", r.status)
	}
	ov := e.expect(e.do("GET", "/api/v1/resources/overview", nil), 200).obj(t)
	if ov["queues"].(float64) != 2 || ov["partitions"].(float64) != 3 || ov["messages"].(map[string]any)["total"].(float64) != 3 {
		t.Fatalf("overview: %v", ov)
	}
	// Namespace a and task x (from "a.x"); every partition one message behind its
	// queue-mode cursor.
	lag := ov["lag"].(map[string]any)
	if ov["namespaces"].(float64) != 1 || ov["tasks"].(float64) != 1 || lag["offset"].(map[string]any)["max"].(float64) != 1 ||
		lag["offset"].(map[string]any)["avg"].(float64) != 1 || lag["time"].(map[string]any)["max"].(float64) < 0 ||
		ov["messages"].(map[string]any)["pending"].(float64) != 3 || ov["throughput"] == nil || ov["statsAge"] == nil {
		t.Fatalf("overview shape: %v", ov)
	}
	if m := e.pop("/api/v1/pop/queue/b"); m == nil {
		t.Fatal("pop b: nothing")
	}
	ov = e.expect(e.do("GET", "/api/v1/resources/overview", nil), 200).obj(t)
	if p := ov["messages"].(map[string]any)["processing"].(float64); p != 1 {
		t.Fatalf("overview: processing %v after one leased pop, want 1: %v", p, ov)
	}
	d := e.expect(e.do("DELETE", "/api/v1/resources/queues/a.x", nil), 200).obj(t)
	if d["deleted"] != true || d["existed"] != true {
		t.Fatalf("delete: %v", d)
	}
	d = e.expect(e.do("DELETE", "/api/v1/resources/queues/a.x", nil), 200).obj(t)
	if d["deleted"] != false || d["existed"] != false || d["message"] == nil {
		t.Fatalf("delete again: %v", d)
	}
	if e.pop("/api/v1/pop/queue/a.x") != nil {
		t.Fatal("messages of a deleted queue are still served")
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.expect(e.do("GET", "/health", nil), 200).obj(t)
	if h["status"] != "healthy" || h["database"] != "connected" {
		t.Fatalf("health: %v", h)
	}
	e.push(item{"queue": "m", "transactionId": "1"})
	m := e.expect(e.do("GET", "/metrics", nil), 200).obj(t)
	for _, k := range []string{"uptime", "requests", "messages", "database", "memory", "cpu"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("metrics lacks %s: %v", k, m)
		}
	}
	if m["messages"].(map[string]any)["total"].(float64) != 1 {
		t.Fatalf("metrics messages: %v", m["messages"])
	}
}

func TestTenancyScopesQueuesAndRefusesCrossTenantAcks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.TenancyHeader = true })
	const t1, t2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	r := e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "shared", "transactionId": "x"}}}, "x-queen-tenant", t1)
	e.expect(r, 201)
	if p := e.pop("/api/v1/pop/queue/shared", "x-queen-tenant", t2); p != nil {
		t.Fatalf("tenant 2 popped tenant 1's message: %+v", p)
	}
	if p := e.pop("/api/v1/pop/queue/shared"); p != nil {
		t.Fatalf("default tenant popped tenant 1's message: %+v", p)
	}
	p := e.pop("/api/v1/pop/queue/shared", "x-queen-tenant", t1)
	if p == nil {
		t.Fatal("tenant 1 cannot pop its own message")
	}
	ack := map[string]any{"transactionId": "x", "partitionId": p.PartitionID, "leaseId": p.LeaseID}
	a := e.expect(e.do("POST", "/api/v1/ack", ack, "x-queen-tenant", t2), 200).arr(t)[0]
	if a["success"] != false || a["error"] != "partition not owned by tenant" {
		t.Fatalf("cross-tenant ack: %v", a)
	}
	ext := e.expect(e.do("POST", "/api/v1/lease/"+p.LeaseID+"/extend", `{}`, "x-queen-tenant", t2), 200).obj(t)
	if ext["renewed"].(float64) != 0 {
		t.Fatalf("cross-tenant extend: %v", ext)
	}
	txn := map[string]any{"operations": []any{map[string]any{"type": "ack", "transactionId": "x", "partitionId": p.PartitionID}},
		"requiredLeases": []any{p.LeaseID}}
	if r := e.expect(e.do("POST", "/api/v1/transaction", txn, "x-queen-tenant", t2), 200).obj(t); r["success"] != false {
		t.Fatalf("cross-tenant transaction: %v", r)
	}
	a = e.expect(e.do("POST", "/api/v1/ack", ack, "x-queen-tenant", t1), 200).arr(t)[0]
	if a["success"] != true {
		t.Fatalf("own ack: %v", a)
	}
	if r := e.do("GET", "/api/v1/resources/queues", nil, "x-queen-tenant", "not-a-uuid"); r.status != 400 {
		t.Fatalf("bad tenant header: %d", r.status)
	}
	list := e.expect(e.do("GET", "/api/v1/resources/queues", nil, "x-queen-tenant", t2), 200).obj(t)
	if len(list["queues"].([]any)) != 0 {
		t.Fatalf("tenant 2 sees tenant 1's queues: %v", list)
	}
}

// The depth route Queen's clients and queenctl poll, and the queue detail
// they decode: per-partition pending, processing (a live lease) and ready,
// for the queue or one group (a group that never read owes everything),
// and the detail's stats, oldest and newest message and totals.
func TestQueueDepthAndDetail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := 0; i < 3; i++ {
		e.push(item{"queue": "d", "partition": "p1", "transactionId": fmt.Sprintf("a%d", i)})
	}
	for i := 0; i < 2; i++ {
		e.push(item{"queue": "d", "partition": "p2", "transactionId": fmt.Sprintf("b%d", i)})
	}
	p := e.pop("/api/v1/pop/queue/d/partition/p1?batch=2")
	if p == nil || len(p.Messages) != 2 {
		t.Fatalf("pop: %+v", p)
	}
	depth := func(query string) map[string]any {
		t.Helper()
		return e.expect(e.do("GET", "/api/v1/resources/queues/d/depth"+query, nil), 200).obj(t)
	}
	d := depth("")
	parts := d["partitions"].([]any)
	p1, p2 := parts[0].(map[string]any), parts[1].(map[string]any)
	if d["queue"] != "d" || d["group"] != nil || d["pending"] != float64(5) || d["processing"] != float64(2) || d["ready"] != float64(3) ||
		d["partitionsPending"] != float64(2) || d["effectivePending"] != float64(5) || d["conflation"] != false ||
		p1["partition"] != "p1" || p1["pending"] != float64(3) || p1["processing"] != float64(2) || p2["pending"] != float64(2) {
		t.Fatalf("queue depth: %v", d)
	}
	if g := depth("?group=never"); g["group"] != "never" || g["pending"] != float64(5) || g["processing"] != float64(0) {
		t.Fatalf("a group that never read: %v", g)
	}
	e.ack(p.Messages[0].TransactionID, p.PartitionID, p.LeaseID, "completed")
	e.ack(p.Messages[1].TransactionID, p.PartitionID, p.LeaseID, "completed")
	if d := depth(""); d["pending"] != float64(3) || d["processing"] != float64(0) {
		t.Fatalf("after the acks: %v", d)
	}
	if r := e.do("GET", "/api/v1/resources/queues/nope/depth", nil); r.status != 404 || r.obj(t)["error"] != "Queue not found" {
		t.Fatalf("unknown queue: %d %s", r.status, r.body)
	}
	q := e.expect(e.do("GET", "/api/v1/resources/queues/d", nil), 200).obj(t)
	totals := q["totals"].(map[string]any)
	if q["name"] != "d" || totals["total"] != float64(5) || totals["pending"] != float64(3) || totals["completed"] != float64(2) {
		t.Fatalf("queue detail: %v", q)
	}
	d1 := q["partitions"].([]any)[0].(map[string]any)
	stats := d1["stats"].(map[string]any)
	if d1["name"] != "p1" || stats["pending"] != float64(1) || stats["completed"] != float64(2) || d1["oldestMessage"] == nil || d1["newestMessage"] == nil {
		t.Fatalf("partition detail: %v", d1)
	}
	if r := e.do("GET", "/api/v1/resources/queues/nope", nil); r.status != 404 || r.obj(t)["error"] != "Queue not found" {
		t.Fatalf("unknown queue detail: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/api/v1/resources/partitions", nil); r.status != 404 || r.obj(t)["code"] != "no_such_route" {
		t.Fatalf("a route that does not exist: %d %s", r.status, r.body)
	}
}
