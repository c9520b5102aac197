package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/spool"
)

// raw sends one request exactly as given: no header is added (e.do always
// declares application/json). body "" sends none.
func (e *env) raw(method, path, body string, headers ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: b, header: resp.Header}
}

// depth is the number of messages a queue holds for a pop.
func (e *env) stillThere(queue string) bool {
	e.t.Helper()
	return e.pop("/api/v1/pop/queue/"+queue+"?autoAck=true") != nil
}

// TestHeadDoesNotPop: HEAD on a pop route answers 405 with Allow and
// claims nothing; before, Go's mux served it with the pop handler, which
// claimed (with autoAck consumed) the message and answered no body. HEAD
// on /health still answers.
func TestHeadDoesNotPop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "hq", "payload": 1})
	for _, path := range []string{"/api/v1/pop/queue/hq?autoAck=true", "/api/v1/pop/queue/hq/partition/Default?autoAck=true",
		"/api/v1/pop?namespace=&autoAck=true", "/api/v1/status"} {
		r := e.raw("HEAD", path, "")
		if r.status != http.StatusMethodNotAllowed || !strings.Contains(r.header.Get("Allow"), "GET") {
			t.Fatalf("HEAD %s: %d, Allow %q", path, r.status, r.header.Get("Allow"))
		}
	}
	if !e.stillThere("hq") {
		t.Fatal("a HEAD consumed the message")
	}
	if r := e.raw("HEAD", "/api/v1/timers/q/k", ""); r.header.Get("Allow") != "DELETE, GET" {
		t.Fatalf("Allow names the path's methods: %q", r.header.Get("Allow"))
	}
	if r := e.raw("HEAD", "/health", ""); r.status != 200 {
		t.Fatalf("HEAD /health: %d", r.status)
	}
}

// TestNoCORSByDefault: without QUEEN_CORS_ORIGINS no answer carries a CORS
// header, a preflight is refused, and a cross-site browser request (a pop
// is a GET, which a page can send with no preflight) is refused before it
// claims anything; before, every answer said Access-Control-Allow-Origin: *.
func TestNoCORSByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "cq", "payload": 1})
	for _, r := range []response{
		e.raw("GET", "/health", "", "Origin", "http://evil.example"),
		e.raw("GET", "/api/v1/resources/queues", "", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"),
		e.raw("OPTIONS", "/api/v1/push", "", "Origin", "http://evil.example", "Access-Control-Request-Method", "POST"),
	} {
		for k := range r.header {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				t.Fatalf("CORS header %s: %v", k, r.header)
			}
		}
	}
	if r := e.raw("OPTIONS", "/api/v1/push", "", "Origin", "http://evil.example", "Access-Control-Request-Method", "POST"); r.status != 403 {
		t.Fatalf("preflight from an unlisted origin: %d", r.status)
	}
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},                   // an <img>, a no-cors fetch
		{"Sec-Fetch-Site", "same-site"},                    // another port of localhost
		{"Origin", "http://evil.example"},                  // a browser without Fetch Metadata
		{"Sec-Fetch-Site", "cross-site", "Origin", "null"}, // a sandboxed frame
	} {
		if r := e.raw("GET", "/api/v1/pop/queue/cq?autoAck=true", "", h...); r.status != 403 {
			t.Fatalf("cross-site pop %v: %d %s", h, r.status, r.body)
		}
	}
	if !e.stillThere("cq") {
		t.Fatal("a cross-site request consumed the message")
	}
	// The dashboard's own requests (same origin) and non-browser clients pass.
	e.push(item{"queue": "cq", "payload": 2})
	host := strings.TrimPrefix(e.url, "http://")
	if r := e.raw("GET", "/api/v1/resources/queues", "", "Sec-Fetch-Site", "same-origin", "Origin", e.url); r.status != 200 {
		t.Fatalf("same-origin: %d %s", r.status, r.body)
	}
	if r := e.raw("GET", "/api/v1/resources/queues", "", "Origin", "http://"+host); r.status != 200 {
		t.Fatalf("an Origin naming this host: %d %s", r.status, r.body)
	}
}

// TestCORSForListedOrigins: QUEEN_CORS_ORIGINS answers preflights and
// allows requests from its origins only; "*" when listed.
func TestCORSForListedOrigins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.CORSOrigins = []string{"https://ops.example.com"} })
	r := e.raw("OPTIONS", "/api/v1/push", "", "Origin", "https://ops.example.com", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type,authorization")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://ops.example.com" ||
		!strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") || r.header.Get("Vary") != "Origin" {
		t.Fatalf("preflight from a listed origin: %d %v", r.status, r.header)
	}
	if r := e.raw("OPTIONS", "/api/v1/push", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST"); r.status != 403 ||
		r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from an unlisted origin: %d %v", r.status, r.header)
	}
	r = e.raw("GET", "/api/v1/resources/queues", "", "Origin", "https://ops.example.com", "Sec-Fetch-Site", "cross-site")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://ops.example.com" {
		t.Fatalf("request from a listed origin: %d %v", r.status, r.header)
	}
	star := newEnv(t, func(c *config.Config) { c.CORSOrigins = []string{"*"} })
	r = star.raw("GET", "/api/v1/resources/queues", "", "Origin", "https://any.example", "Sec-Fetch-Site", "cross-site")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("with *: %d %v", r.status, r.header)
	}
}

// TestJSONRoutesRefuseOtherContentTypes: a body must be declared JSON
// (415 naming application/json, nothing written), so a page's "simple"
// request (text/plain, a form, a typeless Blob) cannot push; before, any
// type was read as JSON. Bodiless requests pass whatever they declare, as
// clients send them.
func TestJSONRoutesRefuseOtherContentTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	push := `{"items":[{"queue":"ct","payload":1}]}`
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		var h []string
		if ct != "" {
			h = []string{"Content-Type", ct}
		}
		r := e.raw("POST", "/api/v1/push", push, h...)
		if r.status != http.StatusUnsupportedMediaType || !strings.Contains(r.obj(t)["error"].(string), "application/json") {
			t.Fatalf("push as %q: %d %s", ct, r.status, r.body)
		}
	}
	if e.pop("/api/v1/pop/queue/ct") != nil {
		t.Fatal("a refused push was written")
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "application/vnd.queen+json"} {
		e.expect(e.raw("POST", "/api/v1/push", push, "Content-Type", ct), 201)
	}
	// Bodiless POSTs, as clients send acks' and leases' siblings: no body,
	// no Content-Type (or any).
	e.expect(e.raw("POST", "/api/v1/stats/refresh", ""), 200)
	e.expect(e.raw("POST", "/api/v1/stats/refresh", "", "Content-Type", "text/plain"), 200)
	p := e.pop("/api/v1/pop/queue/ct")
	if r := e.raw("POST", "/api/v1/lease/"+p.Messages[0].LeaseID+"/extend", ""); r.status != 200 {
		t.Fatalf("lease extend without a body: %d %s", r.status, r.body)
	}
	// A chunked empty body without a type passes; a chunked one with
	// content does not.
	req, _ := http.NewRequest("POST", e.url+"/api/v1/stats/refresh", io.NopCloser(strings.NewReader("")))
	req.ContentLength = -1
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("chunked empty body: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", e.url+"/api/v1/push", io.NopCloser(strings.NewReader(push)))
	req.ContentLength = -1
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("chunked typeless body: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestWriteOnlyTokenSchedulesButCannotCancelTimers: the level is the op's.
// A write-only token may schedule a timer through POST /api/v1/timers but
// neither cancel nor reschedule one (DELETE of it is 403 too), and a batch
// holding one such op is refused whole, nothing written and nothing read
// back; before, the route's write-only level let every op through.
func TestWriteOnlyTokenSchedulesButCannotCancelTimers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.JWTEnabled, c.JWT.Secret = true, "test-secret" })
	rw, wo := token(t, "alice", "read-write"), token(t, "carol", "write-only")
	timers := func(tok string, ops ...map[string]any) response {
		return e.do("POST", "/api/v1/timers", map[string]any{"operations": ops}, "Authorization", tok)
	}
	schedule := func(key string) map[string]any {
		return map[string]any{"op": "schedule", "queue": "tq", "timerKey": key, "txn": "t-" + key, "delayMs": 3600000}
	}
	e.expect(timers(rw, schedule("a")), 200)
	e.expect(timers(wo, schedule("b")), 200)
	for _, batch := range [][]map[string]any{
		{{"op": "cancel", "queue": "tq", "timerKey": "a"}},
		{{"op": "reschedule", "queue": "tq", "timerKey": "a", "delayMs": 1000}},
		{schedule("c"), {"op": "cancel", "queue": "tq", "timerKey": "a"}},
	} {
		r := timers(wo, batch...)
		if r.status != 403 || strings.Contains(string(r.body), "t-a") || !strings.Contains(r.obj(t)["error"].(string), "operations[") {
			t.Fatalf("write-only %v: %d %s", batch, r.status, r.body)
		}
	}
	// schedule on a taken key is a reschedule by another name: it
	// changes nothing for a write-only token and echoes nothing of it.
	before := e.expect(e.do("GET", "/api/v1/timers/tq/a", nil, "Authorization", rw), 200).obj(t)
	over := map[string]any{"op": "schedule", "queue": "tq", "timerKey": "a", "txn": "mine", "delayMs": 1}
	res := e.expect(timers(wo, over), 200).obj(t)["results"].([]any)[0].(map[string]any)
	if res["status"] != "exists" || res["ok"] == true || res["messageId"] != nil && res["messageId"] != "" {
		t.Fatalf("write-only schedule over timer a: %v", res)
	}
	if after := e.expect(e.do("GET", "/api/v1/timers/tq/a", nil, "Authorization", rw), 200).obj(t); after["deliverAt"] != before["deliverAt"] || after["txn"] != before["txn"] {
		t.Fatalf("a write-only schedule replaced timer a: %v, was %v", after, before)
	}
	if r := e.do("DELETE", "/api/v1/timers/tq/a", nil, "Authorization", wo); r.status != 403 {
		t.Fatalf("DELETE with a write-only token: %d", r.status)
	}
	list := e.expect(e.do("GET", "/api/v1/timers/tq", nil, "Authorization", rw), 200).obj(t)
	var keys []string
	for _, row := range list["rows"].([]any) {
		keys = append(keys, row.(map[string]any)["timerKey"].(string))
	}
	if strings.Join(keys, ",") != "a,b" {
		t.Fatalf("timers after the refused calls: %v", keys)
	}
	if p := e.expect(e.do("GET", "/api/v1/timers/tq/a", nil, "Authorization", rw), 200).obj(t); p["deliverAt"] == nil {
		t.Fatalf("timer a changed: %v", p)
	}
	r := timers(rw, map[string]any{"op": "cancel", "queue": "tq", "timerKey": "a"})
	if e.expect(r, 200).obj(t)["results"].([]any)[0].(map[string]any)["status"] != "cancelled" {
		t.Fatalf("read-write cancel: %s", r.body)
	}
}

// TestBufferStatusDetailsNeedAdmin: the spool is every tenant's; a
// read-only token sees its counts, not its directory, quarantined files
// or their reasons; an admin sees them all. Before, every read-only token
// read them.
func TestBufferStatusDetailsNeedAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp, err := spool.Open(spool.Options{Dir: dir, Clock: clock.Real{}, EventsPerFile: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.FailedDir(), "other-tenant-secret.buf"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnvSpool(t, sp, func(c *config.Config) { c.JWTEnabled, c.JWT.Secret = true, "test-secret" })
	ro := e.expect(e.do("GET", "/api/v1/status/buffers", nil, "Authorization", token(t, "bob", "read-only")), 200)
	if strings.Contains(string(ro.body), dir) || strings.Contains(string(ro.body), "other-tenant-secret") {
		t.Fatalf("read-only sees the spool's details: %s", ro.body)
	}
	if m := ro.obj(t); m["quarantined"] != nil || m["dir"] != nil || m["failed"] == nil || m["pending"] == nil {
		t.Fatalf("read-only answer: %v", m)
	}
	admin := e.expect(e.do("GET", "/api/v1/status/buffers", nil, "Authorization", token(t, "root", "admin")), 200)
	if !strings.Contains(string(admin.body), dir) || !strings.Contains(string(admin.body), "other-tenant-secret") {
		t.Fatalf("admin does not see the details: %s", admin.body)
	}
}

// TestInvalidUTF8BodiesAreRefused: a JSON body with a byte that is not
// UTF-8 answers 400 on every body route and writes nothing. Before,
// encoding/json (the push decoder's fallback, and every other route's
// decoder) replaced the byte with U+FFFD and stored a queue, timer or key
// named by something the client never sent.
func TestInvalidUTF8BodiesAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/push", "{\"items\":[{\"queue\":\"h\xff\",\"payload\":1}]}"},
		{"POST", "/api/v1/configure", "{\"queue\":\"h\xff\"}"},
		{"POST", "/api/v1/timers", "{\"operations\":[{\"op\":\"schedule\",\"queue\":\"h\xff\",\"timerKey\":\"k\",\"txn\":\"t\",\"delayMs\":1}]}"},
		{"PUT", "/api/v1/kv/ns/k", "{\"value\":\"v\xff\"}"},
		{"POST", "/api/v1/transaction", "{\"operations\":[{\"type\":\"push\",\"items\":[{\"queue\":\"h\xff\",\"payload\":1}]}]}"},
	} {
		r := e.do(c.method, c.path, []byte(c.body))
		if r.status != 400 || !strings.Contains(string(r.body), "UTF-8") {
			t.Errorf("%s %s with a byte that is not UTF-8: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	var queues int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.queues`).Scan(&queues); err != nil {
		t.Fatal(err)
	}
	if queues != 0 {
		t.Fatalf("%d queues created by refused bodies", queues)
	}
}
