//go:build attack

package attack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// rawConn is one keep-alive connection driven by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(url string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// health sends GET /health on the connection and reads the answer.
func (c *rawConn) health(within time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(within))
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: attack\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return nil
}

// closedWithin says whether the server closes c within d (a read ends).
func (c *rawConn) closedWithin(d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c.r)
	ne, timeout := err.(net.Error)
	return !(timeout && ne.Timeout())
}

// sockets counts pid's open sockets.
func sockets(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// probeConnections (item 9): 1,000 idle keep-alive connections against a
// broker bounded to 200 (and 768 open files); /health must still answer.
// Then, on a broker with a 1 s idle timeout: an idle connection is closed,
// a slowloris header is cut, and long polls still work.
func probeConnections(p *probe) {
	db := p.database()
	flood := p.launch(db, filepath.Join(p.t.TempDir(), "spool"), 768, "QUEEN_MAX_CONNECTIONS=200")
	p.waitHealthy(flood)
	conns, failed := openIdle(flood.url, 1000)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	p.triedf("1,000 keep-alive connections each sent GET /health and stayed idle (QUEEN_MAX_CONNECTIONS=200, ulimit -n 768): %d could not", failed)
	if a := p.doFresh(flood.url+"/health", 15*time.Second); a.code != 200 {
		p.failf("/health on a new connection with 1,000 idle ones open: %s", a)
	}
	if n := sockets(flood.cmd.Process.Pid); n > 200+60 {
		p.failf("the broker holds %d sockets with QUEEN_MAX_CONNECTIONS=200", n)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil

	b := p.start(db, filepath.Join(p.t.TempDir(), "spool2"), "QUEEN_HTTP_IDLE_TIMEOUT_MS=1000", "QUEEN_BODY_READ_TIMEOUT_MS=1000")
	p.triedf("idle timeout 1 s: an idle connection, a slowloris header, a stalled body, a 3 s long poll, a long poll woken by a push")
	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); p.stalledBodyIsCut(b) }()
	go func() { defer wg.Done(); p.idleIsClosed(b) }()
	go func() { defer wg.Done(); p.slowlorisIsCut(b) }()
	go func() { defer wg.Done(); p.longPollOutlivesIdleTimeout(b) }()
	go func() { defer wg.Done(); p.longPollIsWoken(b) }()
	wg.Wait()
}

// openIdle opens n connections, each serving one GET /health, and keeps
// them open; failed counts those that got no answer.
func openIdle(url string, n int) (conns []*rawConn, failed int) {
	var mu sync.Mutex
	var bad atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if bad.Load() > 50 { // the broker stopped answering: enough evidence
					return
				}
				c, err := dialRaw(url)
				if err == nil {
					if err = c.health(3 * time.Second); err != nil {
						c.Close()
					}
				}
				if err != nil {
					bad.Add(1)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return conns, int(bad.Load())
}

// doFresh sends GET on a new connection with its own deadline.
func (p *probe) doFresh(url string, within time.Duration) answer {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return answer{code: -1, err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, body: raw, header: resp.Header}
}

func (p *probe) idleIsClosed(b *broker) {
	c, err := dialRaw(b.url)
	if err == nil {
		err = c.health(10 * time.Second)
	}
	if err != nil {
		p.failf("idle connection: %v", err)
		return
	}
	defer c.Close()
	if !c.closedWithin(15 * time.Second) {
		p.failf("a keep-alive connection idle 15 s with QUEEN_HTTP_IDLE_TIMEOUT_MS=1000 is still open")
	}
}

func (p *probe) slowlorisIsCut(b *broker) {
	c, err := dialRaw(b.url)
	if err != nil {
		p.failf("slowloris dial: %v", err)
		return
	}
	defer c.Close()
	began := time.Now()
	_, _ = io.WriteString(c, "GET /health HTTP/1.1\r\nHost: attack\r\n")
	for time.Since(began) < 40*time.Second {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := fmt.Fprintf(c, "X-Slow-%d: x\r\n", time.Now().UnixNano()); err != nil {
			return // cut
		}
		if c.closedWithin(time.Second) {
			return
		}
	}
	p.failf("a header trickled for 40 s was never cut (ReadHeaderTimeout)")
}

// stalledBodyIsCut: a body that stops mid-way is cut after
// QUEEN_BODY_READ_TIMEOUT_MS (1 s here).
func (p *probe) stalledBodyIsCut(b *broker) {
	c, err := dialRaw(b.url)
	if err != nil {
		p.failf("stalled body dial: %v", err)
		return
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /api/v1/push HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"items\":")
	if !c.closedWithin(15 * time.Second) {
		p.failf("a body stalled after 10 of 1000 bytes was not cut within 15 s (QUEEN_BODY_READ_TIMEOUT_MS=1000)")
	}
}

func (p *probe) longPollOutlivesIdleTimeout(b *broker) {
	a := p.do("GET", b.url+"/api/v1/pop/queue/lp-empty?wait=true&timeout=3000", "")
	if a.code != 204 {
		p.failf("a 3 s long poll with a 1 s idle timeout answered %s, want 204", a)
	}
}

func (p *probe) longPollIsWoken(b *broker) {
	got := make(chan answer, 1)
	go func() { got <- p.do("GET", b.url+"/api/v1/pop/queue/lp?wait=true&timeout=20000&autoAck=true", "") }()
	time.Sleep(1500 * time.Millisecond)
	if a := p.pushItems(b.url, item("lp", "p", "wake")); a.code != 201 {
		p.failf("push to wake a long poll: %s", a)
	}
	select {
	case a := <-got:
		if a.code != 200 || !strings.Contains(string(a.body), `"wake"`) {
			p.failf("a long poll woken by a push answered %s", a)
		}
	case <-time.After(30 * time.Second):
		p.failf("a long poll woken by a push did not answer within 30 s")
	}
}

// maxPushItems is the limits table's bound on a push's items
// (limits.PushItems, SPEC "Limits"): a fixed limit, not a knob.
const maxPushItems = 10000

// hostile is one bad request: want4xx says SPEC pins a 4xx; otherwise any
// answer but a 5xx is accepted (SPEC reads unparseable integers as the
// default, as Queen does).
type hostile struct {
	what, method, path, body string
	want4xx                  bool
	headers                  []string
}

func hostileCases() []hostile {
	long := strings.Repeat("q", 10000)
	nest := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	many := make([]string, maxPushItems+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"queue":"h","transactionId":"many-%d"}`, i)
	}
	return []hostile{
		{"body beyond QUEEN_MAX_BODY_BYTES (2 MiB)", "POST", "/api/v1/push", `{"items":[{"queue":"h","payload":"` + strings.Repeat("x", 2<<20) + `"}]}`, true, nil},
		{"10,001 items beyond the per-push limit", "POST", "/api/v1/push", `{"items":[` + strings.Join(many, ",") + `]}`, true, nil},
		{"a transaction of 10,001 pushed items", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[` + strings.Join(many, ",") + `]}]}`, true, nil},
		{"payload nested 100,000 deep", "POST", "/api/v1/push", `{"items":[{"queue":"h","payload":` + nest + `}]}`, true, nil},
		{"items nested 100,000 deep", "POST", "/api/v1/push", `{"items":` + nest + `}`, true, nil},
		{"invalid UTF-8 payload", "POST", "/api/v1/push", "{\"items\":[{\"queue\":\"h\",\"payload\":\"\xff\xfe\"}]}", true, nil},
		{"invalid UTF-8 queue", "POST", "/api/v1/push", "{\"items\":[{\"queue\":\"h\xff\"}]}", true, nil},
		{"invalid UTF-8 queue (configure)", "POST", "/api/v1/configure", "{\"queue\":\"h\xff\"}", true, nil},
		{"invalid UTF-8 queue (transaction)", "POST", "/api/v1/transaction", "{\"operations\":[{\"type\":\"push\",\"items\":[{\"queue\":\"h\xff\"}]}]}", true, nil},
		{"invalid UTF-8 timer queue", "POST", "/api/v1/timers", "[{\"op\":\"schedule\",\"queue\":\"h\xff\",\"timerKey\":\"u\",\"txn\":\"u\",\"delayMs\":1000}]", true, nil},
		{"invalid UTF-8 KV key", "POST", "/api/v1/kv", "[{\"op\":\"put\",\"ns\":\"n\",\"key\":\"k\xff\",\"value\":1,\"forever\":true}]", true, nil},
		{"NUL escape in payload", "POST", "/api/v1/push", `{"items":[{"queue":"h","payload":"a\u0000b"}]}`, true, nil},
		{"lone surrogate in payload", "POST", "/api/v1/push", `{"items":[{"queue":"h","payload":"\ud800"}]}`, true, nil},
		{"number past numeric", "POST", "/api/v1/push", `{"items":[{"queue":"h","payload":1e1000000}]}`, true, nil},
		{"items a string", "POST", "/api/v1/push", `{"items":"x"}`, true, nil},
		{"items an object", "POST", "/api/v1/push", `{"items":{"queue":"h"}}`, true, nil},
		{"item a number", "POST", "/api/v1/push", `{"items":[1]}`, true, nil},
		{"queue a number", "POST", "/api/v1/push", `{"items":[{"queue":5}]}`, true, nil},
		{"partition an array", "POST", "/api/v1/push", `{"items":[{"queue":"h","partition":[]}]}`, true, nil},
		{"transactionId an object", "POST", "/api/v1/push", `{"items":[{"queue":"h","transactionId":{}}]}`, true, nil},
		{"traceId not a UUID", "POST", "/api/v1/push", `{"items":[{"queue":"h","traceId":"x"}]}`, true, nil},
		{"not JSON", "POST", "/api/v1/push", `{{{`, true, nil},
		{"empty body", "POST", "/api/v1/push", ``, true, nil},
		{"null body", "POST", "/api/v1/push", `null`, true, nil},
		{"10,000-byte queue name", "POST", "/api/v1/push", `{"items":[{"queue":"` + long + `"}]}`, true, nil},
		{"300-byte partition name", "POST", "/api/v1/push", `{"items":[{"queue":"h","partition":"` + strings.Repeat("p", 300) + `"}]}`, true, nil},
		{"control character in partition", "POST", "/api/v1/push", `{"items":[{"queue":"h","partition":"a\tb"}]}`, true, nil},
		{"2,000-byte transactionId", "POST", "/api/v1/push", `{"items":[{"queue":"h","transactionId":"` + strings.Repeat("t", 2000) + `"}]}`, true, nil},
		{"pop batch=-1", "GET", "/api/v1/pop/queue/h?batch=-1", "", true, nil},
		{"pop batch=0", "GET", "/api/v1/pop/queue/h?batch=0", "", true, nil},
		{"pop batch=99999999999", "GET", "/api/v1/pop/queue/h?batch=99999999999", "", true, nil},
		{"pop timeout=-5", "GET", "/api/v1/pop/queue/h?wait=true&timeout=-5", "", true, nil},
		{"pop timeout=1e30", "GET", "/api/v1/pop/queue/h?timeout=1e30", "", false, nil},
		{"pop leaseSeconds=-1", "GET", "/api/v1/pop/queue/h?leaseSeconds=-1", "", true, nil},
		{"pop leaseSeconds=99999999999", "GET", "/api/v1/pop/queue/h?leaseSeconds=99999999999", "", true, nil},
		{"pop partitions=0", "GET", "/api/v1/pop/queue/h?partitions=0", "", true, nil},
		{"pop 10,000-byte queue", "GET", "/api/v1/pop/queue/" + long, "", true, nil},
		{"pop NUL in partition", "GET", "/api/v1/pop/queue/h/partition/a%00b", "", true, nil},
		{"pop invalid UTF-8 partition", "GET", "/api/v1/pop/queue/h/partition/%ff%fe", "", true, nil},
		{"pop 300-byte partition", "GET", "/api/v1/pop/queue/h/partition/" + strings.Repeat("p", 300), "", true, nil},
		{"configure leaseTime -1", "POST", "/api/v1/configure", `{"queue":"h","options":{"leaseTime":-1}}`, true, nil},
		{"configure leaseTime a string", "POST", "/api/v1/configure", `{"queue":"h","options":{"leaseTime":"x"}}`, true, nil},
		{"configure leaseTime 1e20", "POST", "/api/v1/configure", `{"queue":"h","options":{"leaseTime":1e20}}`, true, nil},
		{"ack partitionId not a UUID (a per-item miss, as Queen answers)", "POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"x"}`, false, nil},
		{"ack batch acknowledgments a string", "POST", "/api/v1/ack/batch", `{"acknowledgments":"x"}`, true, nil},
		{"lease extend seconds -1", "POST", "/api/v1/lease/00000000-0000-0000-0000-000000000000/extend", `{"seconds":-1}`, true, nil},
		{"transaction operations a string", "POST", "/api/v1/transaction", `{"operations":"x"}`, true, nil},
		{"transaction push 10,000-byte queue", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"` + long + `"}]}]}`, true, nil},
		{"timers delayMs 1e30", "POST", "/api/v1/timers", `[{"op":"schedule","queue":"h","timerKey":"k","txn":"t","delayMs":1e30}]`, true, nil},
		{"timers ops an object", "POST", "/api/v1/timers", `{"operations":{"op":"schedule"}}`, true, nil},
		{"KV ttlSeconds -1", "POST", "/api/v1/kv", `[{"op":"put","ns":"n","key":"k","value":1,"ttlSeconds":-1}]`, true, nil},
		{"KV 5,000-byte key", "POST", "/api/v1/kv", `[{"op":"put","ns":"n","key":"` + strings.Repeat("k", 5000) + `","value":1,"forever":true}]`, true, nil},
		{"timer payload nested 100,000 deep", "POST", "/api/v1/timers", `[{"op":"schedule","queue":"h","timerKey":"n","txn":"n","delayMs":1000,"payload":` + nest + `}]`, true, nil},
		{"KV value nested 100,000 deep", "POST", "/api/v1/kv", `[{"op":"put","ns":"n","key":"k","value":` + nest + `,"forever":true}]`, true, nil},
		{"transaction payload nested 100,000 deep", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"h","payload":` + nest + `}]}]}`, true, nil},
		{"trace data nested 100,000 deep", "POST", "/api/v1/traces", `{"transactionId":"t","partitionId":"00000000-0000-4000-8000-000000000000","data":` + nest + `}`, false, nil},
		{"2 MiB header", "GET", "/api/v1/resources/queues", "", true, []string{"X-Big: " + strings.Repeat("b", 2<<20)}},
		{"DLQ limit=-1", "GET", "/api/v1/dlq?limit=-1", "", true, nil},
		{"status/queues limit=-1", "GET", "/api/v1/status/queues?limit=-1", "", true, nil},
		{"messages from=garbage", "GET", "/api/v1/messages?from=garbage", "", true, nil},
		{"queues offset=-1", "GET", "/api/v1/resources/queues?limit=1&offset=-1", "", true, nil},
	}
}

// probeHostileInput (item 10 and the limits table): every bad body or
// query answers 4xx, never 5xx, and nothing is written.
func probeHostileInput(p *probe) {
	b := p.start(p.database(), filepath.Join(p.t.TempDir(), "spool"),
		"QUEEN_MAX_BODY_BYTES=1048576")
	cases := hostileCases()
	p.triedf("%d hostile bodies and queries (QUEEN_MAX_BODY_BYTES=1 MiB)", len(cases))
	for _, c := range cases {
		a := p.do(c.method, b.url+c.path, c.body, c.headers...)
		switch {
		case a.code >= 500 || a.code == -1:
			p.failf("%s: answered %s", c.what, a)
		case c.want4xx && (a.code < 400 || a.code > 499):
			p.failf("%s: answered %s, want 4xx", c.what, a)
		}
	}
	if names := p.queueNames(b.url); len(names) > 0 {
		p.failf("hostile requests created queues: %s", firstFew(names))
	}
	if a := p.do("GET", b.url+"/api/v1/timers/h", ""); !strings.Contains(string(a.body), `"rows":[]`) {
		p.failf("hostile requests scheduled timers: %s", a)
	}
	if a := p.do("GET", b.url+"/api/v1/kv/n/k", ""); strings.Contains(string(a.body), `"found":true`) {
		p.failf("hostile requests wrote KV: %s", a)
	}
}

// maxPopGrowth bounds how much the pops of probePopBytes may raise the
// broker's peak RSS: a budgeted pop holds about two answers of 12 MiB
// (the issue measured +790 MB for one unbounded pop of 100 MB).
const maxPopGrowth = 300 << 20

// peakRSS is pid's peak resident set (VmHWM) in bytes, 0 when unknown.
func peakRSS(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// probePopBytes (item 10): 20 messages of 5 MB, one pop of batch=20: the
// answer stays near QUEEN_MAX_POP_BYTES, and the rest pop later, none lost.
func probePopBytes(p *probe) {
	const budget, size = 12 << 20, 5_000_000
	b := p.start(p.database(), filepath.Join(p.t.TempDir(), "spool"), fmt.Sprintf("QUEEN_MAX_POP_BYTES=%d", budget))
	payload := strings.Repeat("x", size)
	for i := 0; i < 20; i++ {
		body := fmt.Sprintf(`{"items":[{"queue":"big","partition":"p","transactionId":"big-%02d","payload":%q}]}`, i, payload)
		if a := p.do("POST", b.url+"/api/v1/push", body); a.code != 201 {
			p.fatalf("push of a 5 MB message answered %s", a)
		}
	}
	p.triedf("20 messages of 5 MB, pops of batch=20 with autoAck (QUEEN_MAX_POP_BYTES=12 MiB) until empty")
	peak := peakRSS(b.cmd.Process.Pid)
	seen := map[string]int{}
	for i := 0; i < 40; i++ {
		a := p.do("GET", b.url+"/api/v1/pop/queue/big?batch=20&autoAck=true", "")
		if a.code == 204 {
			break
		}
		var res struct {
			Messages []poppedMsg `json:"messages"`
		}
		if a.code != 200 || json.Unmarshal(a.body, &res) != nil {
			p.fatalf("pop: %s", a)
		}
		if len(a.body) > budget+size+64<<10 {
			p.failf("one pop answered %d bytes (%d messages), beyond QUEEN_MAX_POP_BYTES=%d plus one message",
				len(a.body), len(res.Messages), budget)
		}
		for _, m := range res.Messages {
			seen[m.TransactionID]++
		}
	}
	grew := peakRSS(b.cmd.Process.Pid) - peak
	p.triedf("peak RSS grew %d MiB over the pops", grew>>20)
	if grew > maxPopGrowth {
		p.failf("the pops raised the broker's peak RSS by %d MiB (bound %d MiB)", grew>>20, maxPopGrowth>>20)
	}
	for i := 0; i < 20; i++ {
		if id := fmt.Sprintf("big-%02d", i); seen[id] != 1 {
			p.failf("%s delivered %d times", id, seen[id])
		}
	}
}

// probeMethods (item 3's HEAD part): HEAD on every route of the table
// claims nothing; TRACE, PUT and OPTIONS where not routed answer 404/405.
func probeMethods(p *probe) {
	routes, err := routeTable()
	if err != nil {
		p.fatalf("%v", err)
	}
	b := p.start(p.database(), filepath.Join(p.t.TempDir(), "spool"))
	const q = "mcns.mctask"
	if a := p.pushItems(b.url, item(q, "p", "head-target")); a.code != 201 {
		p.fatalf("push: %s", a)
	}
	vals := map[string]string{"queue": q, "partition": "p"}
	routed := map[string]map[string]bool{}
	for _, r := range routes {
		path := fillPath(r.path, vals)
		if routed[path] == nil {
			routed[path] = map[string]bool{}
		}
		routed[path][r.method] = true
	}
	p.triedf("HEAD (autoAck=true) on %d routed paths, then TRACE, PUT and OPTIONS where not routed", len(routed))
	for path := range routed {
		a := p.do("HEAD", b.url+path+"?autoAck=true&batch=10&namespace=mcns&task=mctask", "")
		if a.code >= 500 || a.code == -1 {
			p.failf("HEAD %s: %s", path, a)
		}
	}
	a := p.do("GET", b.url+"/api/v1/pop/queue/"+q+"?batch=10", "")
	if a.code != 200 || !strings.Contains(string(a.body), "head-target") {
		p.failf("after HEAD on the pop routes the message no longer pops: %s", a)
	}
	for path, methods := range routed {
		for _, m := range []string{"TRACE", "PUT", "OPTIONS"} {
			if methods[m] {
				continue
			}
			a := p.do(m, b.url+path, "")
			if !refusedMethod(m, a) {
				p.failf("%s %s: %s, want 404 or 405", m, path, a)
			}
		}
	}
}

// refusedMethod: TRACE and PUT where not routed answer 404 or 405. OPTIONS
// may also answer 2xx, as long as it grants nothing (no
// Access-Control-Allow-* header): a preflight refused that way is what a
// browser honours, and the cross-origin probe checks it with an origin.
func refusedMethod(method string, a answer) bool {
	if a.code == 404 || a.code == 405 {
		return true
	}
	if method != "OPTIONS" || a.code < 200 || a.code > 299 {
		return false
	}
	for h := range a.header {
		if strings.HasPrefix(strings.ToLower(h), "access-control-allow-") {
			return false
		}
	}
	return true
}

// probeCrossOrigin (item 4): no CORS headers for a foreign origin, no
// preflight allowance, 415 for a text/plain body on a JSON route, and a
// dashboard no page may frame.
func probeCrossOrigin(p *probe) {
	b := p.start(p.database(), filepath.Join(p.t.TempDir(), "spool"))
	const evil = "Origin: https://evil.example"
	p.triedf("GET and preflight from https://evil.example; text/plain, form and multipart POSTs to push and maintenance; dashboard headers")
	a := p.do("GET", b.url+"/api/v1/resources/queues", "", evil)
	if v := a.header.Get("Access-Control-Allow-Origin"); v != "" {
		p.failf("GET from a foreign origin answered Access-Control-Allow-Origin: %s", v)
	}
	a = p.do("OPTIONS", b.url+"/api/v1/resources/queues/victim", "", evil,
		"Access-Control-Request-Method: DELETE", "Access-Control-Request-Headers: content-type")
	for _, h := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers"} {
		if v := a.header.Get(h); v != "" {
			p.failf("preflight from a foreign origin answered %s: %s", h, v)
		}
	}
	// A browser's "simple" POSTs: from the foreign origin refused (403 for
	// the origin or 415 for the type); without an origin still 415.
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		a = p.do("POST", b.url+"/api/v1/push", `{"items":[{"queue":"cors","transactionId":"simple"}]}`, evil, "Content-Type: "+ct)
		if a.code != 415 && a.code != 403 {
			p.failf("push from a foreign origin with Content-Type %s answered %s, want 403 or 415", ct, a)
		}
		a = p.do("POST", b.url+"/api/v1/push", `{"items":[{"queue":"cors","transactionId":"plain"}]}`, "Content-Type: "+ct)
		if a.code != 415 {
			p.failf("push with Content-Type %s answered %s, want 415", ct, a)
		}
	}
	for _, hs := range [][]string{{evil, "Content-Type: text/plain"}, {"Content-Type: text/plain"}} {
		if a = p.do("POST", b.url+"/api/v1/system/maintenance", `{"enabled":true}`, hs...); a.code != 415 && a.code != 403 {
			p.failf("maintenance with Content-Type text/plain (%s) answered %s, want 403 or 415", hs[0], a)
		}
	}
	if names := p.queueNames(b.url); len(names) > 0 {
		p.failf("a cross-origin simple request wrote queues: %v", names)
	}
	if a = p.do("GET", b.url+"/api/v1/system/maintenance", ""); strings.Contains(string(a.body), `"enabled":true`) {
		p.do("POST", b.url+"/api/v1/system/maintenance", `{"enabled":false}`)
		p.failf("a cross-origin simple request turned maintenance on: %s", a)
	}
	a = p.do("GET", b.url+"/dashboard/", "")
	if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		p.failf("the dashboard answers Content-Security-Policy %q, want frame-ancestors 'none'", csp)
	}
	p.listedOriginOnly()
}

// listedOriginOnly: with QUEEN_CORS_ORIGINS naming one origin, that origin
// gets itself back (never *), and another origin still gets nothing.
func (p *probe) listedOriginOnly() {
	b := p.start(p.database(), filepath.Join(p.t.TempDir(), "spool2"), "QUEEN_CORS_ORIGINS=https://ops.example")
	p.triedf("QUEEN_CORS_ORIGINS=https://ops.example: GET from it and from https://evil.example")
	a := p.do("GET", b.url+"/api/v1/resources/queues", "", "Origin: https://ops.example")
	if v := a.header.Get("Access-Control-Allow-Origin"); v != "https://ops.example" {
		p.failf("GET from the listed origin answered Access-Control-Allow-Origin %q, want https://ops.example", v)
	}
	a = p.do("GET", b.url+"/api/v1/resources/queues", "", "Origin: https://evil.example")
	if v := a.header.Get("Access-Control-Allow-Origin"); v != "" {
		p.failf("GET from an unlisted origin answered Access-Control-Allow-Origin: %s", v)
	}
}
