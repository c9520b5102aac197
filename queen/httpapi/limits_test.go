package httpapi_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/sweeper"
)

// incompressible is n bytes of random printable text, which PostgreSQL's
// pglz cannot shrink: the worst case for an index row.
func incompressible(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('!' + r.IntN('~'-'!'+1))
	}
	return string(b)
}

func (e *env) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNamesAtTheirLimitAreStored: every name at its limit, as incompressible
// text, is stored and consumed (the widest index, consumer_groups_metadata's
// key of five names, included); one byte past it is a 400 naming the field,
// with nothing written.
func TestNamesAtTheirLimitAreStored(t *testing.T) {
	e := newEnv(t)
	r := rand.New(rand.NewPCG(1, 2))
	queue, part, group := incompressible(r, 255), incompressible(r, 255), incompressible(r, 255)
	ns, task, txid := incompressible(r, 255), incompressible(r, 255), incompressible(r, 1024)
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": queue, "namespace": ns, "task": task}), 200)
	res := e.push(item{"queue": queue, "partition": part, "transactionId": txid, "payload": map[string]any{"n": 1}})
	if res[0]["status"] != "queued" {
		t.Fatalf("push at the limits: %v", res)
	}
	p := e.pop("/api/v1/pop/queue/" + url.PathEscape(queue) + "/partition/" + url.PathEscape(part) +
		"?consumerGroup=" + url.QueryEscape(group) + "&batch=1")
	if p == nil || len(p.Messages) != 1 || p.Messages[0].TransactionID != txid {
		t.Fatalf("pop at the limits: %+v", p)
	}
	e.expect(e.do("POST", "/api/v1/ack", map[string]any{"transactionId": txid, "partitionId": p.PartitionID,
		"leaseId": p.LeaseID, "consumerGroup": group, "status": "failed", "error": strings.Repeat("e", 65536)}), 200)
	if n := e.count(t, `SELECT count(*) FROM queen.consumer_groups_metadata`); n == 0 {
		t.Fatal("no consumer group metadata was written: the widest index went untested")
	}

	before := e.count(t, `SELECT count(*) FROM queen.messages`)
	for _, c := range []struct {
		item  item
		field string
	}{
		{item{"queue": queue + "x"}, "items[0].queue is 256 bytes"},
		{item{"queue": "q", "partition": part + "x"}, "items[0].partition is 256 bytes"},
		{item{"queue": "q", "transactionId": txid + "x"}, "items[0].transactionId is 1025 bytes"},
		{item{"queue": strings.Repeat("é", 128)}, "items[0].queue is 256 bytes"},
		{item{"queue": "q", "traceId": "nope"}, "items[0].traceId must be a UUID"},
	} {
		got := e.do("POST", "/api/v1/push", map[string]any{"items": []item{c.item}})
		if got.status != 400 || !strings.Contains(string(got.body), c.field) {
			t.Errorf("push %v: %d %s, want 400 naming %q", c.field, got.status, got.body, c.field)
		}
	}
	for path, field := range map[string]string{
		"/api/v1/pop/queue/q?consumerGroup=" + url.QueryEscape(group+"x"): "consumerGroup is 256 bytes",
		"/api/v1/pop/queue/q?consumerGroup=a%00b":                         "consumerGroup must not contain a NUL",
		"/api/v1/messages?queue=a%00b":                                    "queue must not contain a NUL",
		"/api/v1/resources/queues/a%ffb":                                  "path is not valid UTF-8",
	} {
		got := e.do("GET", path, nil)
		if got.status != 400 || !strings.Contains(string(got.body), field) {
			t.Errorf("GET %s: %d %s, want 400 naming %q", path, got.status, got.body, field)
		}
	}
	got := e.do("POST", "/api/v1/configure", map[string]any{"queue": "q", "namespace": ns + "x"})
	if got.status != 400 || !strings.Contains(string(got.body), "namespace is 256 bytes") {
		t.Errorf("configure: %d %s", got.status, got.body)
	}
	if after := e.count(t, `SELECT count(*) FROM queen.messages`); after != before {
		t.Errorf("refused pushes wrote %d rows", after-before)
	}
}

// TestPayloadNumbersWithinNumeric: a JSON number numeric holds is stored; one
// past it (the 22003 that answered 500, or was buffered and then dropped at
// replay) is a 400 naming the field.
func TestPayloadNumbersWithinNumeric(t *testing.T) {
	e := newEnv(t)
	big := "1" + strings.Repeat("0", 131071)
	res := e.push(item{"queue": "n", "payload": map[string]any{"big": jsonNumber(big), "small": jsonNumber("1e-16383")}})
	if res[0]["status"] != "queued" {
		t.Fatalf("numbers numeric holds: %v", res)
	}
	for _, body := range []string{
		`{"items":[{"queue":"n","payload":{"n":1e200000}}]}`,
		`{"items":[{"queue":"n","payload":[1, 1.5e-16383]}]}`,
		`{"items":[{"queue":"n","payload":{"n":` + big + `0}}]}`,
		"{\"items\":[{\"queue\":\"n\",\"payload\":\"\xff\"}]}",
	} {
		got := e.do("POST", "/api/v1/push", body)
		if got.status != 400 || !strings.Contains(string(got.body), "items[0].payload") {
			t.Errorf("%.60s: %d %s, want 400 naming items[0].payload", body, got.status, got.body)
		}
	}
	for _, c := range []struct{ path, body, want string }{
		{"/api/v1/timers", `[{"op":"schedule","queue":"n","timerKey":"k","txn":"` + strings.Repeat("t", 1025) + `","delayMs":1}]`, "transactionId is 1025 bytes"},
		{"/api/v1/timers", `[{"op":"schedule","queue":"n","timerKey":"k","txn":"t","partition":"` + strings.Repeat("p", 256) + `","delayMs":1}]`, "partition is 256 bytes"},
		{"/api/v1/timers", `[{"op":"schedule","queue":"n","timerKey":"k","txn":"t","delayMs":-1e300}]`, "delayMs must be between"},
		{"/api/v1/timers", `[{"op":"schedule","queue":"n","timerKey":"k","txn":"t","delayMs":1,"payload":{"n":1e200000}}]`, "payload holds the number"},
		{"/api/v1/kv", `{"operations":[{"op":"put","ns":"a","key":"k","value":{"n":1e200000},"forever":true}]}`, "value holds the number"},
		{"/api/v1/kv", `{"operations":[{"op":"put","ns":"a","key":"k","value":1,"ttlSeconds":1e300}]}`, "ttlSeconds must be between"},
		{"/api/v1/kv", `{"operations":[{"op":"put","ns":"` + strings.Repeat("n", 256) + `","key":"k","value":1,"forever":true}]}`, "ns is 256 bytes"},
		{"/api/v1/kv", `{"operations":[{"op":"put","ns":"a","key":"k\u0000","value":1,"forever":true}]}`, "must not contain a NUL"},
		{"/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"n","payload":{"n":1e200000}}]}]}`, "payload holds the number"},
		{"/api/v1/ack", `{"transactionId":"a\u0000","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d"}`, "transactionId must not contain a NUL"},
		{"/api/v1/ack", `{"transactionId":"a","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d","leaseId":"l\u0000"}`, "leaseId must not contain a NUL"},
		{"/api/v1/traces", `{"transactionId":"t","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d","data":{},"traceNames":["` + strings.Repeat("x", 256) + `"]}`, "traceNames[0] is 256 bytes"},
	} {
		got := e.do("POST", c.path, c.body)
		if got.status != 400 || !strings.Contains(string(got.body), c.want) {
			t.Errorf("%s %.70s: %d %s, want 400 naming %q", c.path, c.body, got.status, got.body, c.want)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM queen.log_timers`) + e.count(t, `SELECT count(*) FROM queen.kv`); n != 0 {
		t.Errorf("refused timers and KV writes left %d rows", n)
	}
}

type jsonNumber string

func (n jsonNumber) MarshalJSON() ([]byte, error) { return []byte(n), nil }

// TestFuzzCorporaAreStored replays the push fuzz corpus (the seeds under
// testdata/fuzz/FuzzPushBody, which make fuzz also starts from) against
// PostgreSQL: every body the decoder accepts is stored whole, and every other
// is a 4xx; none answers 500.
func TestFuzzCorporaAreStored(t *testing.T) {
	e := newEnv(t)
	files, err := filepath.Glob("testdata/fuzz/FuzzPushBody/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	accepted := 0
	for _, f := range files {
		body := readCorpusBytes(t, f)
		got := e.do("POST", "/api/v1/push", body)
		switch {
		case got.status == 201:
			accepted++
			for _, r := range got.arr(t) {
				if r["status"] != "queued" && r["status"] != "duplicate" {
					t.Errorf("%s: accepted but not stored: %v", filepath.Base(f), r)
				}
			}
		case got.status >= 400 && got.status < 500:
		default:
			t.Errorf("%s: %d %s", filepath.Base(f), got.status, got.body)
		}
	}
	if accepted == 0 {
		t.Error("the corpus has no accepted body: it proves nothing about the store")
	}
}

// TestTimerKVAndTransactionCorporaAreStored: the timers, KV and
// transaction fuzz corpora (inputs at and past the limits) against
// PostgreSQL. Each body is refused at the edge (4xx) or taken whole: every
// timer op ok and, once due, fired by the store (a timer whose fire
// PostgreSQL refuses is what poisoned a batch), every KV op ok, the
// transaction committed. Nothing answers 5xx.
func TestTimerKVAndTransactionCorporaAreStored(t *testing.T) {
	e := newEnv(t)
	taken := 0
	for _, f := range corpus(t, "FuzzTimerAndKVBodies") {
		body := readCorpusBytes(t, f)
		path := "/api/v1/timers"
		if strings.Contains(string(body), `"ns"`) {
			path = "/api/v1/kv"
		}
		got := e.do("POST", path, body)
		switch {
		case got.status == 200:
			taken++
			var res struct{ Results []map[string]any }
			if err := json.Unmarshal(got.body, &res); err != nil || len(res.Results) == 0 {
				t.Errorf("%s: %s", filepath.Base(f), got.body)
			}
			for _, r := range res.Results {
				// A timer op answers ok, a KV write applied; reads
				// answer what they found.
				if done := r["ok"] == true || r["applied"] == true; !done && (path == "/api/v1/timers" || r["op"] == "put") {
					t.Errorf("%s: taken but not applied: %v", filepath.Base(f), r)
				}
			}
		case got.status >= 400 && got.status < 500:
		default:
			t.Errorf("%s: %d %s", filepath.Base(f), got.status, got.body)
		}
	}
	// Every scheduled timer is due (1 ms); the sweeper's fire fires them all.
	ctx := context.Background()
	time.Sleep(50 * time.Millisecond)
	claimed, err := e.store.ClaimTimers(ctx, corpusToken, time.Minute, 1000)
	if err != nil {
		t.Fatal(err)
	}
	fired, err := (&sweeper.Sweeper{Store: e.store, Names: names.New(e.store, names.Options{}), Writes: e.writes}).FireTimers(ctx, corpusToken, claimed)
	if err != nil || len(fired) != len(claimed) || len(claimed) == 0 {
		t.Errorf("firing the corpus's timers: %d claimed, %d fired: %v", len(claimed), len(fired), err)
	}
	for _, f := range corpus(t, "FuzzTransactionOp") {
		op := readCorpusBytes(t, f)
		got := e.do("POST", "/api/v1/transaction", []byte(`{"operations":[`+string(op)+`]}`))
		switch {
		case got.status == 200:
			taken++
			if !strings.Contains(string(got.body), `"success":true`) {
				t.Errorf("%s: taken but not committed: %s", filepath.Base(f), got.body)
			}
		case got.status >= 400 && got.status < 500:
		default:
			t.Errorf("%s: %d %s", filepath.Base(f), got.status, got.body)
		}
	}
	if taken == 0 {
		t.Error("the corpora have no accepted body: they prove nothing about the store")
	}
}

const corpusToken = "01a231d6-0000-7000-8000-00000000c0de"

func corpus(t *testing.T, target string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata/fuzz", target, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s corpus: %v", target, err)
	}
	return files
}

// readCorpusBytes reads a go-fuzz corpus file of one []byte argument.
func readCorpusBytes(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(strings.TrimSpace(string(raw)), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a corpus file", path)
	}
	lit := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
	s, err := strconv.Unquote(lit)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}
