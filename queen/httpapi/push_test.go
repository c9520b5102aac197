package httpapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/queen-go/queen/queen/config"
)

func TestPushShapesAndDedup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.push(
		item{"queue": "orders", "payload": map[string]any{"n": 1}, "transactionId": "a"},
		item{"queue": "orders", "partition": "p1", "payload": "x", "transactionId": "b"},
		item{"queue": "orders", "transactionId": "a"},                    // same partition+txid: duplicate
		item{"queue": "orders", "partition": "p1", "transactionId": "a"}, // other partition: new
	)
	if len(res) != 4 {
		t.Fatalf("want 4 results, got %v", res)
	}
	wantStatus := []string{"queued", "queued", "duplicate", "queued"}
	for i, r := range res {
		if r["status"] != wantStatus[i] || int(r["index"].(float64)) != i {
			t.Fatalf("item %d: %v", i, r)
		}
		for _, f := range []string{"transaction_id", "transactionId", "message_id", "messageId", "partition_id", "partitionId", "queueName"} {
			if _, ok := r[f]; !ok {
				t.Fatalf("item %d lacks %s: %v", i, f, r)
			}
		}
	}
	if res[2]["message_id"] != res[0]["message_id"] {
		t.Fatalf("duplicate must carry the original message id: %v vs %v", res[2], res[0])
	}
	// A later push of the same txid is a duplicate too, and writes nothing.
	again := e.push(item{"queue": "orders", "transactionId": "a", "payload": "different"})
	if again[0]["status"] != "duplicate" || again[0]["messageId"] != res[0]["messageId"] {
		t.Fatalf("repeat push: %v", again)
	}
	p := e.pop("/api/v1/pop/queue/orders?batch=10")
	if p == nil || len(p.Messages) != 1 || string(p.Messages[0].Data) != `{"n":1}` {
		t.Fatalf("Default partition should hold exactly the first push: %+v", p)
	}
}

func TestPushEmptyItemsAndMissingPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.expect(e.do("POST", "/api/v1/push", `{"items":[]}`), 201)
	if strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("empty items: %s", r.body)
	}
	e.push(item{"queue": "q", "transactionId": "no-payload"})
	p := e.pop("/api/v1/pop/queue/q")
	if p == nil || string(p.Messages[0].Data) != "null" {
		t.Fatalf("missing payload should be stored as null: %+v", p)
	}
}

func TestPushRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxBodyBytes = 2048 })
	cases := []struct {
		body   string
		status int
		want   string
	}{
		{``, 400, "Empty request body"},
		{`{"items":`, 400, "Invalid JSON"},
		{`[1,2]`, 400, "Invalid JSON"},
		{`{}`, 400, "items array is required"},
		{`{"items":"x"}`, 400, "items array is required"},
		{`{"items":[{"queue":"ok"},{"payload":1}]}`, 400, "items[1].queue is required"},
		{`{"items":[{"queue":5}]}`, 400, "items[0].queue must be a string"},
		{`{"items":[{"queue":"ok","partition":7}]}`, 400, "items[0].partition must be a string"},
		{`{"items":[{"queue":"ok","transactionId":{}}]}`, 400, "items[0].transactionId must be a string"},
		{`{"items":[{"queue":"ok","traceId":"not-a-uuid"}]}`, 400, "items[0].traceId must be a UUID"},
		{`{"items":[{"queue":"bad\u0001name"}]}`, 400, "items[0].queue must not contain control characters"},
		{`{"items":[3]}`, 400, "items[0] must be an object"},
		{`{"items":[{"queue":"ok"},{"queue":"ok","payload":{"s":"a\u0000b"}}]}`, 400, "items[1].payload contains \\u0000"},
		{`{"items":[{"queue":"ok","data":"\udc00"}]}`, 400, "items[0].payload contains a lone low surrogate"},
		{`{"items":[{"queue":"ok","payload":"` + strings.Repeat("x", 3000) + `"}]}`, 413, "QUEEN_MAX_BODY_BYTES"},
	}
	for _, c := range cases {
		r := e.do("POST", "/api/v1/push", c.body)
		if r.status != c.status || !strings.Contains(r.obj(t)["error"].(string), c.want) {
			t.Errorf("body %.60q: got %d %s, want %d containing %q", c.body, r.status, r.body, c.status, c.want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("error content type %q", ct)
		}
	}
	// Nothing was half-written: the valid first item of a rejected request
	// did not create queue "ok".
	ov := e.expect(e.do("GET", "/api/v1/resources/overview", nil), 200).obj(t)
	if ov["queues"].(float64) != 0 {
		t.Fatalf("a rejected push wrote something: %v", ov)
	}
}

func TestConcurrentIdenticalPushesDedupExactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const pushers, txids = 8, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	queued := map[string]int{}
	for p := 0; p < pushers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < txids; i++ {
				res := e.push(item{"queue": "dedup", "partition": fmt.Sprint(i % 2), "transactionId": fmt.Sprint("tx-", i)})
				if res[0]["status"] == "queued" {
					mu.Lock()
					queued[res[0]["transactionId"].(string)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(queued) != txids {
		t.Fatalf("%d txids queued, want %d", len(queued), txids)
	}
	for txid, n := range queued {
		if n != 1 {
			t.Fatalf("%s queued %d times", txid, n)
		}
	}
	q := e.expect(e.do("GET", "/api/v1/resources/queues/dedup", nil), 200).obj(t)
	if total := q["messages"].(map[string]any)["total"].(float64); total != txids {
		t.Fatalf("%v rows stored, want %d", total, txids)
	}
}

func TestUnknownRoutesAnswerJSON404(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/nope"}, {"POST", "/api/v1/resources/queues"}, {"PUT", "/api/v1/push"}, {"GET", "/elsewhere"},
	} {
		r := e.do(c.method, c.path, nil)
		if r.status != 404 || r.obj(t)["error"] == nil || r.obj(t)["code"] != "no_such_route" {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	// A plain OPTIONS answers 204, with no CORS header unless
	// QUEEN_CORS_ORIGINS lists the caller (TestNoCORSByDefault).
	r := e.do("OPTIONS", "/api/v1/push", nil)
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("OPTIONS: %d %v", r.status, r.header)
	}
}
