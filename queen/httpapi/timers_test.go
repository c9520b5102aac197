package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTimersRefuseBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		body   any
		status int
		want   string
	}{
		{map[string]any{"op": "schedule"}, 400, "operations"}, // not an array
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 10}}, 400, "operations[0].txn"},
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "txn": "t"}}, 400, "delayMs"},
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "txn": "t", "delayMs": 1, "deliverAt": "2030-01-01T00:00:00Z"}}, 400, "exactly one"},
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "txn": "t", "delayMs": 1, "producerSub": "me"}}, 400, "producerSub"},
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "txn": "t", "delayMs": 1, "_messageId": "x"}}, 400, "_messageId"},
		{[]any{map[string]any{"op": "explode", "queue": "q", "timerKey": "k"}}, 400, "operations[0].op"},
		{[]any{map[string]any{"op": "cancel", "queue": "q", "timerKey": "k"}, map[string]any{"op": "cancel", "queue": "q", "timerKey": "k"}}, 400, "twice"},
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "txn": "t", "delayMs": 1e12}}, 403, "timer_horizon_exceeded"},
		{[]any{map[string]any{"op": "schedule", "queue": "q", "timerKey": "k", "txn": "t", "delayMs": 1, "payload": strings.Repeat("x", 2<<20)}}, 413, "payload_too_large"},
	}
	for _, c := range cases {
		r := e.expect(e.do("POST", "/api/v1/timers", c.body), c.status)
		if !strings.Contains(string(r.body), c.want) {
			t.Errorf("%v: answered %s, want it to name %q", c.body, r.body, c.want)
		}
	}
	if r := e.expect(e.do("GET", "/api/v1/timers/q", nil), 200).obj(t); len(r["rows"].([]any)) != 0 {
		t.Fatalf("a refused call wrote timers: %v", r)
	}
}

func TestTimersScheduleListPeekCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	payload := base64.StdEncoding.EncodeToString([]byte(`{"order":7}`))
	r := e.expect(e.do("POST", "/api/v1/timers", map[string]any{"operations": []any{
		map[string]any{"op": "schedule", "queue": "q", "timerKey": "a", "txn": "ta", "delayMs": 60000, "payload": payload},
		map[string]any{"op": "schedule", "queue": "q", "timerKey": "b", "txn": "tb", "deliverAt": time.Now().Add(time.Hour).Format(time.RFC3339)},
	}}), 200).obj(t)
	res := r["results"].([]any)
	a := res[0].(map[string]any)
	if a["ok"] != true || a["status"] != "scheduled" || a["messageId"] == "" || a["deliverAt"] == nil || a["txn"] != "ta" {
		t.Fatalf("schedule: %v", r)
	}
	list := e.expect(e.do("GET", "/api/v1/timers/q?limit=1", nil), 200).obj(t)
	if ts := list["rows"].([]any); len(ts) != 1 || list["truncated"] != true || list["nextAfter"] != "a" ||
		ts[0].(map[string]any)["payload"] != nil || ts[0].(map[string]any)["createdAt"] == nil {
		t.Fatalf("list (rows without payloads, then the cursor): %v", list)
	}
	if c := e.expect(e.do("GET", "/api/v1/timers/q?mode=count&prefix=a", nil), 200).obj(t); c["count"] != float64(1) {
		t.Fatalf("count: %v", c)
	}
	peek := e.expect(e.do("GET", "/api/v1/timers/q/a", nil), 200).obj(t)
	stored, err := base64.StdEncoding.DecodeString(peek["payload"].(string))
	var body map[string]any
	if err != nil || json.Unmarshal(stored, &body) != nil || peek["found"] != true || body["order"] != float64(7) || peek["encrypted"] != false {
		t.Fatalf("peek (the payload comes back base64, as it went in): %v", peek)
	}
	if c := e.expect(e.do("DELETE", "/api/v1/timers/q/a", nil), 200).obj(t); c["status"] != "cancelled" || c["ok"] != true {
		t.Fatalf("cancel: %v", c)
	}
	if c := e.expect(e.do("DELETE", "/api/v1/timers/q/a?txn=ta", nil), 200).obj(t); c["status"] != "absent" || c["ok"] != false || c["txn"] != "ta" {
		t.Fatalf("cancel again: %v", c)
	}
	if p := e.expect(e.do("GET", "/api/v1/timers/q/a", nil), 200).obj(t); p["found"] != false {
		t.Fatalf("peek after cancel: %v", p)
	}
}

func TestKVRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.expect(e.do("POST", "/api/v1/kv", []any{
		map[string]any{"op": "put", "ns": "s", "key": "a/b", "value": map[string]any{"x": 1}, "forever": true},
		map[string]any{"op": "incr", "ns": "s", "key": "n", "by": 3},
		map[string]any{"op": "get", "ns": "s", "key": "missing"},
		map[string]any{"op": "getPrefix", "ns": "s", "prefix": "a/"},
	}), 200).obj(t)
	res := r["results"].([]any)
	if res[0].(map[string]any)["applied"] != true || res[1].(map[string]any)["value"] != float64(3) ||
		res[2].(map[string]any)["found"] != false || len(res[3].(map[string]any)["rows"].([]any)) != 1 {
		t.Fatalf("kv batch: %v", r)
	}
	g := e.expect(e.do("GET", "/api/v1/kv/s/a/b", nil), 200)
	if g.header.Get("ETag") == "" || g.obj(t)["found"] != true {
		t.Fatalf("GET path route: %s %v", g.body, g.header)
	}
	e.expect(e.do("GET", "/api/v1/kv/s/a/b?x=1", nil), 400)
	for _, bad := range []map[string]any{
		{"op": "put", "ns": "s", "key": "k", "value": 1},                                       // neither ttl nor forever
		{"op": "put", "ns": "s", "key": "k", "value": 1, "ttlSeconds": 5, "forever": true},     // both
		{"op": "put", "ns": "s", "key": "k", "value": 1, "ttlSeconds": -1},                     // bad ttl
		{"op": "put", "ns": "", "key": "k", "value": 1, "forever": true},                       // no ns
		{"op": "put", "ns": "s", "key": strings.Repeat("k", 600), "value": 1, "forever": true}, // long key
	} {
		e.expect(e.do("POST", "/api/v1/kv", []any{bad}), 400)
	}
	// A required op that loses aborts the call.
	r = e.expect(e.do("POST", "/api/v1/kv", []any{
		map[string]any{"op": "put", "ns": "s", "key": "new", "value": 1, "forever": true},
		map[string]any{"op": "putIfAbsent", "ns": "s", "key": "a/b", "value": 2, "forever": true, "required": true},
	}), 200).obj(t)
	if r["ok"] != false || r["reason"] != "kv_precondition" || r["failedIndex"] != float64(1) || r["kvReason"] != "exists" {
		t.Fatalf("required precondition: %v", r)
	}
	if g := e.expect(e.do("GET", "/api/v1/kv/s/new", nil), 200).obj(t); g["found"] != false {
		t.Fatalf("an aborted call wrote: %v", g)
	}
	put := e.expect(e.do("PUT", "/api/v1/kv/s/t", map[string]any{"value": "v", "ttlSeconds": 1}), 200).obj(t)
	if put["applied"] != true {
		t.Fatalf("PUT: %v", put)
	}
	e.advanceDB(1100 * time.Millisecond)
	if g := e.expect(e.do("GET", "/api/v1/kv/s/t", nil), 200).obj(t); g["found"] != false {
		t.Fatalf("read after its ttl: %v", g)
	}
}

// The KV wire as Queen's Go and JS clients speak it: incr's delta, min and
// max (a refused hit is applied:false, reason limit, with the current
// value), getPrefix paging by after / truncated / nextAfter with keysOnly,
// getMany's missing, rows with key, version, expiresAt and updatedAt, and
// a fenced DELETE whose body carries expect.
func TestKVClientWire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := func(ops ...map[string]any) []map[string]any {
		t.Helper()
		res := e.expect(e.do("POST", "/api/v1/kv", map[string]any{"operations": ops}), 200).obj(t)["results"].([]any)
		out := make([]map[string]any, len(res))
		for i, r := range res {
			out[i] = r.(map[string]any)
		}
		return out
	}
	hit := map[string]any{"op": "incr", "ns": "rl", "key": "c", "delta": 2, "max": 3, "ttlSeconds": 60}
	if r := kv(hit)[0]; r["applied"] != true || r["value"] != float64(2) || r["key"] != "c" || r["expiresAt"] == nil {
		t.Fatalf("first hit: %v", r)
	}
	if r := kv(hit)[0]; r["applied"] != false || r["reason"] != "limit" || r["value"] != float64(2) {
		t.Fatalf("a hit over max: %v", r)
	}
	e.expect(e.do("POST", "/api/v1/kv", []any{map[string]any{"op": "incr", "ns": "rl", "key": "c", "min": 5, "max": 1}}), 400)
	e.expect(e.do("POST", "/api/v1/kv", []any{map[string]any{"op": "incr", "ns": "rl", "key": "c", "expect": 0}}), 400)
	for _, k := range []string{"a", "b", "c"} {
		kv(map[string]any{"op": "put", "ns": "pg", "key": "k/" + k, "value": k, "forever": true})
	}
	page := kv(map[string]any{"op": "getPrefix", "ns": "pg", "prefix": "k/", "limit": 2, "keysOnly": true})[0]
	rows := page["rows"].([]any)
	if page["truncated"] != true || page["nextAfter"] != "k/b" || len(rows) != 2 {
		t.Fatalf("first page: %v", page)
	}
	if row := rows[0].(map[string]any); row["key"] != "k/a" || row["value"] != nil || row["version"] == nil || row["updatedAt"] == nil {
		t.Fatalf("a keys-only row: %v", row)
	}
	last := kv(map[string]any{"op": "getPrefix", "ns": "pg", "prefix": "k/", "limit": 2, "after": "k/b"})[0]
	if last["truncated"] != false || len(last["rows"].([]any)) != 1 || last["rows"].([]any)[0].(map[string]any)["value"] != "c" {
		t.Fatalf("last page: %v", last)
	}
	many := kv(map[string]any{"op": "getMany", "ns": "pg", "keys": []string{"k/a", "k/z"}})[0]
	if m := many["missing"].([]any); len(m) != 1 || m[0] != "k/z" || len(many["rows"].([]any)) != 1 {
		t.Fatalf("getMany: %v", many)
	}
	g := e.expect(e.do("GET", "/api/v1/kv/pg/k/a", nil), 200).obj(t)
	stale := g["version"].(float64) + 1000
	if d := e.expect(e.do("DELETE", "/api/v1/kv/pg/k/a", map[string]any{"expect": stale}), 200).obj(t); d["applied"] != false || d["reason"] != "version" {
		t.Fatalf("a fenced delete with a stale version: %v", d)
	}
	if d := e.expect(e.do("DELETE", "/api/v1/kv/pg/k/a", map[string]any{"expect": g["version"]}), 200).obj(t); d["applied"] != true {
		t.Fatalf("a fenced delete: %v", d)
	}
	e.expect(e.do("DELETE", "/api/v1/kv/pg/k/b", nil), 200)
}

func TestTransactionAcksAndSchedulesAtomically(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "in", "transactionId": "job"})
	p := e.pop("/api/v1/pop/queue/in")
	ack := map[string]any{"type": "ack", "transactionId": "job", "partitionId": p.PartitionID, "status": "completed"}
	// A lost kv precondition rolls back the ack and the timer.
	r := e.expect(e.do("POST", "/api/v1/transaction", map[string]any{
		"operations":     []any{ack},
		"requiredLeases": []any{p.LeaseID},
		"timers":         []any{map[string]any{"op": "schedule", "queue": "later", "timerKey": "job", "txn": "follow-up", "delayMs": 60000}},
		"kv":             []any{map[string]any{"op": "put", "ns": "progress", "key": "job", "value": 1, "forever": true, "expect": 99, "required": true}},
	}), 200).obj(t)
	if r["success"] != false || r["reason"] != "kv_precondition" || r["kvReason"] != "absent" || r["version"] != nil {
		t.Fatalf("transaction with a lost precondition: %v", r)
	}
	if l := e.expect(e.do("GET", "/api/v1/timers/later", nil), 200).obj(t); len(l["rows"].([]any)) != 0 {
		t.Fatalf("a rolled-back transaction scheduled: %v", l)
	}
	r = e.expect(e.do("POST", "/api/v1/transaction", map[string]any{
		"operations":     []any{ack},
		"requiredLeases": []any{p.LeaseID},
		"timers":         []any{map[string]any{"op": "schedule", "queue": "later", "timerKey": "job", "txn": "follow-up", "delayMs": 60000}},
		"kv":             []any{map[string]any{"op": "put", "ns": "progress", "key": "job", "value": 1, "forever": true}},
	}), 200).obj(t)
	if r["success"] != true || r["timers"].([]any)[0].(map[string]any)["status"] != "scheduled" || r["kv"].([]any)[0].(map[string]any)["applied"] != true {
		t.Fatalf("transaction: %v", r)
	}
	if e.pop("/api/v1/pop/queue/in") != nil {
		t.Fatal("acked in the transaction but redelivered")
	}
	if g := e.expect(e.do("GET", "/api/v1/kv/progress/job", nil), 200).obj(t); g["found"] != true {
		t.Fatalf("kv written in the transaction: %v", g)
	}
}
