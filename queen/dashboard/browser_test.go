package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/analytics"
	"github.com/queen-go/queen/queen/auth"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/outages"
	"github.com/queen-go/queen/queen/passes"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/waker"
)

// chromium finds the browser: QUEEN_CHROMIUM, else Debian's chromium. Without
// one the test skips, or fails when QUEEN_REQUIRE_CHROMIUM is set (CI).
func chromium(t *testing.T) string {
	for _, name := range []string{os.Getenv("QUEEN_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	why := "no Chromium here (apt-get install chromium, or set QUEEN_CHROMIUM): the dashboard's browser test needs one; CI installs it"
	if os.Getenv("QUEEN_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why + " (QUEEN_REQUIRE_CHROMIUM is set)")
	}
	t.Skip(why)
	return ""
}

// shots is the folder the screenshots go to: QUEEN_SCREENSHOT_DIR, else
// one under the system's temporary folder.
func shots(t *testing.T) string {
	dir := os.Getenv("QUEEN_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "queen-dashboard-shots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func bearer(t *testing.T, sub, role string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "role": role,
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("dash-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// broker is a broker's HTTP API with JWT on, over a real PostgreSQL.
type broker struct {
	t     *testing.T
	url   string
	store *store.Store
	rec   *analytics.Recorder
	admin string
	pool  *pgxpool.Pool
}

func newBroker(t *testing.T) *broker {
	cfg := config.Default()
	cfg.ServerID = "dash-test"
	cfg.JWTEnabled, cfg.JWT.Secret = true, "dash-secret"
	authn, err := auth.New(cfg.JWT, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	idSrc := ids.NewSource(clock.Real{}, nil)
	pool := storetest.Pool(t)
	st := store.New(pool, store.Options{IDs: idSrc, TxTimeout: 10 * time.Second})
	rec := analytics.NewRecorder(0)
	srv := httpapi.New(httpapi.Options{Config: cfg, Store: st, Retry: storetest.Retry(st), Analytics: rec, Clock: clock.Real{}, Waker: waker.New(),
		IDs: idSrc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: authn, Outages: failedOver(),
		Passes: ledPasses()})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &broker{t: t, url: ts.URL, store: st, rec: rec, admin: bearer(t, "root", "admin"), pool: pool}
}

func (b *broker) call(method, path, body, token string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(out)
}

func (b *broker) must(method, path, body string) string {
	b.t.Helper()
	code, out := b.call(method, path, body, b.admin)
	if code >= 300 {
		b.t.Fatalf("%s %s: %d %s", method, path, code, out)
	}
	return out
}

// failedOver is a broker's database record after a failover, as the
// broker's hooks would have written it (the route's answer is tested
// against a real read-only period in queen's TestFailoverRecordSeesAReadOnlyPeriod):
// on db-a, the server turned read-only, then unavailable, the pool landed
// on db-b and writes resumed 40 ms later.
func failedOver() *outages.Record {
	r := outages.New(clock.Real{})
	r.Connected("db-a:5432")
	r.ReadOnly(true)
	r.Reachable(false)
	time.Sleep(20 * time.Millisecond)
	r.Connected("db-b:5432")
	r.ReadOnly(false)
	time.Sleep(20 * time.Millisecond)
	r.Reachable(true)
	return r
}

// ledPasses are the leader passes of a broker that led three retention
// passes (the last failed) and an analytics rollup, as its leaders'
// hook records them (the route's answer is tested against real leaders in
// queen's TestClusterAnswerListsThePassesThisBrokerLed).
func ledPasses() *passes.Record {
	r := passes.New(clock.Real{})
	hook := r.Hook(nil)
	for i, err := range []error{nil, nil, errors.New("the lock's session ended")} {
		end := hook("retention", uint32(4000+i))
		time.Sleep(5 * time.Millisecond)
		end(err)
	}
	hook("stats", 4100)(nil)
	return r
}

// traffic fills the broker: a queue with two partitions, pops and acks
// (two dead-lettered), a group, a timer and KV keys; then the minute is
// flushed so the charts have points.
func (b *broker) traffic() {
	b.must("POST", "/api/v1/configure", `{"queue":"orders","options":{"retryLimit":0,"dlqAfterMaxRetries":true}}`)
	var items []string
	for i := range 20 {
		items = append(items, fmt.Sprintf(`{"queue":"orders","partition":"p%d","transactionId":"o-%d","payload":{"n":%d}}`, i%2, i, i))
	}
	b.must("POST", "/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`)
	for range 2 {
		var popped struct {
			Messages []struct{ TransactionID, PartitionID, LeaseID string }
		}
		if err := json.Unmarshal([]byte(b.must("GET", "/api/v1/pop/queue/orders?batch=5", "")), &popped); err != nil || len(popped.Messages) == 0 {
			b.t.Fatalf("pop: %+v %v", popped, err)
		}
		var acks []string
		for i, m := range popped.Messages {
			status := "completed"
			if i == 0 {
				status = "failed"
			}
			acks = append(acks, fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":%q}`,
				m.TransactionID, m.PartitionID, m.LeaseID, status))
		}
		b.must("POST", "/api/v1/ack/batch", `{"acknowledgments":[`+strings.Join(acks, ",")+`]}`)
	}
	b.must("GET", "/api/v1/pop/queue/orders?consumerGroup=billing&batch=4&autoAck=true", "")
	b.must("POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"orders","timerKey":"later","txn":"t-later","delayMs":3600000,"payload":{}}]}`)
	b.must("POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"settings","key":"a","value":1,"forever":true}]}`)
	f := &analytics.Flusher{Recorder: b.rec, Store: b.store, Broker: "dash-test", Hostname: "localhost", Port: 6632,
		Sample: analytics.ProcessSampler(nil, nil), Clock: clock.Real{}}
	if err := f.Close(context.Background()); err != nil {
		b.t.Fatal(err)
	}
}

// between returns every substring of s between open and close.
func between(s, open, close string) []string {
	var out []string
	for {
		i := strings.Index(s, open)
		if i < 0 {
			return out
		}
		s = s[i+len(open):]
		j := strings.Index(s, close)
		if j < 0 {
			return out
		}
		out = append(out, s[:j])
		s = s[j:]
	}
}

// dlqTotal is the DLQ's total as the API reports it.
func (b *broker) dlqTotal() string {
	out := b.must("GET", "/api/v1/dlq?limit=1", "")
	return strings.TrimSuffix(between(out, `"total":`, `,`)[0], "}")
}

var pages = []string{"overview", "queue/orders", "dlq", "groups", "maintenance", "spool", "cluster", "settings", "search/o-1", "traces", "traces/checkout", "system", "postgres", "failover", "leaders"}

// The dashboard in headless Chromium, against a broker with data: every
// page renders without a console error; the charts have points after
// traffic; a DLQ retry through the UI moves the message back; a read-only
// token sees no action button, and the route refuses the action anyway.
// A token typed into Settings survives refresh ticks. A screenshot of each
// page is written for review.
func TestDashboardInABrowser(t *testing.T) {
	exe := chromium(t)
	b := newBroker(t)
	b.traffic()
	// A payload that would be markup if the page used innerHTML: its
	// detail page must show it as text.
	b.must("POST", "/api/v1/push", `{"items":[{"queue":"notes","transactionId":"hostile-1","payload":{"html":"<img src=x id=xss>","n":1}}]}`)
	hostile := "message/" + between(b.must("GET", "/api/v1/messages?queue=notes", ""), `"partitionId":"`, `"`)[0] + "/hostile-1"
	all := append(pages[:len(pages):len(pages)], hostile)
	// shotName names a page's screenshot: the message page by what it
	// shows, not by its partition's id (a new one each run).
	shotName := func(page string) string {
		if page == hostile {
			return "message-hostile"
		}
		return strings.ReplaceAll(page, "/", "-")
	}
	// Two events of the trace "checkout" on o-3, the second recorded later.
	var listed struct {
		Messages []struct{ TransactionID, PartitionID string }
	}
	if err := json.Unmarshal([]byte(b.must("GET", "/api/v1/messages?queue=orders&limit=200", "")), &listed); err != nil {
		t.Fatal(err)
	}
	traced := ""
	for _, m := range listed.Messages {
		if m.TransactionID == "o-3" {
			traced = "message/" + m.PartitionID + "/o-3"
			for step, kind := range []string{"info", "processing"} {
				b.must("POST", "/api/v1/traces", fmt.Sprintf(`{"transactionId":"o-3","partitionId":%q,"eventType":%q,"data":{"step":%d},"traceNames":["checkout"]}`, m.PartitionID, kind, step+1))
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	dir := shots(t)
	t.Logf("screenshots in %s", dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil { // starts the browser, with no timeout on its context
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	// Every console error or warning, uncaught exception and browser log
	// error (a failed request among them) is a problem.
	var mu sync.Mutex
	var problems []string
	watching := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		defer close(watching)
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
				mu.Unlock()
			}
		}
	}()
	defer func() { cancel(); <-watching }()

	eval := func(js string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return n
	}
	wait := func(what, js string) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second)))
			// Right after a navigation the poll may start in the page
			// being left: its context is gone, so poll the new one.
			if err != nil && attempt < 5 && strings.Contains(err.Error(), "Cannot find context") {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			return
		}
	}
	// visit opens a page as the given token and waits for a fresh render.
	count := eval
	visit := func(token, page string, reload bool) {
		t.Helper()
		before := 0
		if reload {
			// Set the token on the origin before the app runs, so its
			// first request already carries it.
			if err := chromedp.Do(ctx, chromedp.Navigate(b.url+"/dashboard/style.css")); err != nil {
				t.Fatal(err)
			}
			eval(fmt.Sprintf(`localStorage.setItem('queen.token', %q), 1`, token))
			if err := chromedp.Do(ctx, chromedp.Navigate(b.url+"/dashboard/#/"+page)); err != nil {
				t.Fatal(err)
			}
		} else {
			before = eval(`+(document.body.dataset.renders || 0)`)
			eval(fmt.Sprintf(`location.hash = %q, 1`, "#/"+page))
		}
		want := strings.SplitN(page, "/", 2)[0]
		wait(page, fmt.Sprintf(`document.body.dataset.page === %q && (+(document.body.dataset.renders || 0) > %d || !!document.body.dataset.failed)`, want, before))
		if count(`document.body.dataset.failed ? 1 : 0`) == 1 {
			text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s did not load: %s", page, text)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// As an admin: every page, its failure box absent, a screenshot each.
	for i, page := range all {
		visit(b.admin, page, i == 0)
		if n := count(`document.body.dataset.failed ? 1 : 0`); n != 0 {
			text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s did not load: %s", page, text)
		}
		if n := count(`[...document.getElementById('main').childNodes].filter((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim() !== '').length`); n != 0 {
			text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s has %d stray text nodes (a part left out printed as null?): %s", page, n, text)
		}
		shot("admin-" + shotName(page))
	}
	visit(b.admin, "overview", false)
	if n := count(`+document.querySelector('[data-chart="Throughput"]').dataset.points`); n == 0 {
		t.Fatal("the overview's throughput chart has no points after traffic")
	}
	if n := count(`document.querySelectorAll('[data-chart="Throughput"] polyline, [data-chart="Throughput"] circle').length`); n == 0 {
		t.Fatal("the throughput chart drew nothing")
	}
	visit(b.admin, "queue/orders", false)
	if n := count(`+document.querySelector('[data-chart="Queue throughput"]').dataset.points`); n == 0 {
		t.Fatal("the queue's chart has no points after traffic")
	}
	chooseRange(t, eval, wait, "7d")
	visit(b.admin, "queue/orders", true)
	if n := count(`document.getElementById('range').value === '7d' && localStorage.getItem('queen.range') === '7d' ? 1 : 0`); n != 1 {
		t.Fatal("the 7 d range was not kept across a reload")
	}
	if n := count(`[...document.querySelectorAll('[data-chart]')].filter((c) => +c.dataset.span === 7 * 86400e3 && +c.dataset.points > 0 &&
		[...c.querySelectorAll('text.tick')].every((e) => /^\d\d-\d\d \d\d:\d\d$/.test(e.textContent))).length`); n != 2 {
		t.Fatalf("%d of the queue's 2 charts span 7 d with points and dated axis labels", n)
	}
	shot("admin-queue-orders-7d")
	chooseRange(t, eval, wait, "1h")

	// The header's search finds a queue and a group by name and a message
	// by its transactionId, each linking to its page.
	search := func(term string) {
		t.Helper()
		before := count(`+(document.body.dataset.renders || 0)`)
		eval(fmt.Sprintf(`document.getElementById('search').value = %q, document.getElementById('search-form').requestSubmit(), 1`, term))
		wait("the search for "+term, fmt.Sprintf(`document.body.dataset.page === 'search' && +document.body.dataset.renders > %d`, before))
	}
	links := func(text, href string) int {
		return count(fmt.Sprintf(`[...document.querySelectorAll('main a')].filter((a) => a.textContent === %q && a.getAttribute('href').startsWith(%q)).length`, text, href))
	}
	search("ORD")
	if n := links("orders", "#/queue/orders"); n != 1 {
		t.Fatalf("searching ORD links %d times to the queue orders", n)
	}
	search("bill")
	if n := links("billing", "#/groups"); n != 1 {
		t.Fatalf("searching bill links %d times to the group billing", n)
	}
	search("o-7")
	if n := links("o-7", "#/message/"); n != 1 {
		t.Fatalf("searching o-7 links %d times to the message o-7", n)
	}
	shot("admin-search-o-7")
	// An exact transactionId is found at any age, outside the chosen
	// window (before, the search read only the window's newest messages).
	b.must("POST", "/api/v1/push", `{"items":[{"queue":"notes","transactionId":"archived-1","payload":{"old":true}}]}`)
	if _, err := b.pool.Exec(context.Background(), `UPDATE queen.messages SET created_at = now() - interval '3 days' WHERE transaction_id = 'archived-1'`); err != nil {
		t.Fatal(err)
	}
	search("archived-1")
	if n := count(`[...document.querySelectorAll('#found-exact a')].filter((a) => a.textContent === 'archived-1' && a.getAttribute('href').startsWith('#/message/')).length`); n != 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("searching archived-1 (3 days old, the range 1 h) does not link to its message: %s", text)
	}
	shot("admin-search-archived")

	// A message's detail: reached from the queue page's rows, its payload
	// pretty-printed as text (markup in it stays text), and a dead
	// letter's retry and delete offered to a writer.
	visit(b.admin, "queue/orders", false)
	rendered := count(`+document.body.dataset.renders`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`main a[href^="#/message/"]`))); err != nil {
		t.Fatalf("a message row's link: %v", err)
	}
	wait("the message page", fmt.Sprintf(`document.body.dataset.page === 'message' && +document.body.dataset.renders > %d`, rendered))
	if n := count(`JSON.parse(document.getElementById('payload').textContent).n`); n != 19 {
		t.Fatalf("the newest message's page shows payload n=%d, not 19", n)
	}
	visit(b.admin, hostile, false)
	if n := count(`document.getElementById('xss') === null && JSON.parse(document.getElementById('payload').textContent).html === '<img src=x id=xss>' &&
		document.getElementById('payload').textContent.includes('\n  "html"') ? 1 : 0`); n != 1 {
		t.Fatal("the payload is not shown as pretty-printed text")
	}
	dead := b.must("GET", "/api/v1/dlq?limit=1", "")
	visit(b.admin, "message/"+between(dead, `"partitionId":"`, `"`)[0]+"/"+between(dead, `"transactionId":"`, `"`)[0], false)
	if n := count(`document.querySelectorAll('main button[data-action="retry"], main button[data-action="delete"]').length`); n != 2 {
		t.Fatalf("a dead letter's page offers %d of retry and delete to an admin", n)
	}
	shot("admin-message-dead-letter")

	// Traces: the names link to a trace, whose events read in time order,
	// and a message's page lists its own.
	visit(b.admin, "traces", false)
	if n := links("checkout", "#/traces/checkout"); n != 1 {
		t.Fatalf("the traces page links %d times to the trace checkout", n)
	}
	steps := `[...document.querySelectorAll('main tbody tr')].map((r) => r.lastChild.textContent).join('|') === '{"step":1}|{"step":2}' ? 1 : 0`
	visit(b.admin, "traces/checkout", false)
	if n := count(steps); n != 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the trace checkout does not show its two steps in time order: %s", text)
	}
	visit(b.admin, traced, false)
	if n := count(`[...document.querySelectorAll('main section')].filter((c) => (c.querySelector('h2') || {}).textContent === 'Trace events' && c.querySelectorAll('tbody tr').length === 2).length`); n != 1 {
		t.Fatal("o-3's page does not list its two trace events")
	}
	shot("admin-message-traced")

	// A group is shown by what it has still to consume, in time and in
	// messages (the route's figures), and queue mode is no group.
	var groups []struct {
		Name        string
		LagMessages int
	}
	if err := json.Unmarshal([]byte(b.must("GET", "/api/v1/consumer-groups", "")), &groups); err != nil {
		t.Fatal(err)
	}
	behind := -1
	for _, g := range groups {
		if g.Name == "billing" {
			behind = g.LagMessages
		}
	}
	if behind <= 0 {
		t.Fatalf("billing is %d messages behind after taking 4 of 20: %+v", behind, groups)
	}
	visit(b.admin, "queue/orders", false)
	if n := count(`[...document.querySelectorAll('main td')].filter((c) => c.textContent === '__QUEUE_MODE__').length`); n != 0 {
		t.Fatal("the queue page lists __QUEUE_MODE__ as a group")
	}
	if n := count(`[...document.querySelectorAll('main td')].filter((c) => c.textContent === 'Default').length`); n != 0 {
		t.Fatal("the queue page lists the empty Default partition")
	}
	visit(b.admin, "groups", false)
	if n := count(fmt.Sprintf(`[...document.querySelectorAll('main tr')].filter((r) => r.cells[0] && r.cells[0].textContent === 'billing' && r.cells[5].textContent === '%d').length`, behind)); n != 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the groups page does not show billing %d messages behind: %s", behind, text)
	}

	// The System page: the broker's row in units a person reads, and its
	// CPU and memory charted; the PostgreSQL page: cache hit in percent,
	// the queen tables' sizes in MB.
	visit(b.admin, "system", false)
	if n := count(`[...document.querySelectorAll('main tr')].filter((r) => r.cells[0].textContent === 'dash-test' && / %$/.test(r.cells[2].textContent) &&
		/ MB$/.test(r.cells[3].textContent) && /^([\d,]+|—)$/.test(r.cells[4].textContent) && +r.cells[7].textContent > 0).length`); n != 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the System page does not show dash-test's CPU, memory, pool and goroutines: %s", text)
	}
	if n := count(`+document.querySelector('[data-chart="CPU"]').dataset.points > 0 && +document.querySelector('[data-chart="Memory (RSS)"]').dataset.points > 0 ? 1 : 0`); n != 1 {
		t.Fatal("the System page's CPU and memory charts have no points")
	}
	// Each broker's request latency, p50 and p99 in ms, in the table and
	// charted per broker.
	if n := count(`[...document.querySelectorAll('#latency tbody tr')].filter((r) => r.cells[0].textContent === 'dash-test' && +r.cells[1].textContent.replace(/,/g, '') > 0 &&
		/^[\d.,]+ ms$/.test(r.cells[2].textContent) && /^[\d.,]+ ms$/.test(r.cells[3].textContent)).length`); n != 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the System page does not show dash-test's request latency p50 and p99 in ms: %s", text)
	}
	if n := count(`[...document.querySelectorAll('[data-chart^="Request latency p"]')].filter((c) => +c.dataset.points > 0 && c.textContent.includes('dash-test')).length`); n != 2 {
		t.Fatalf("%d of the System page's p50 and p99 latency charts have dash-test's points", n)
	}
	visit(b.admin, "postgres", false)
	if n := count(`[...document.querySelectorAll('main .tile')].filter((e) => /^[\d.,]+ %(table |index )?cache hit$/.test(e.textContent)).length`); n != 3 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the PostgreSQL page does not show its three cache hit ratios in percent: %s", text)
	}
	if n := count(`[...document.querySelectorAll('main tr')].filter((r) => r.cells[0].textContent === 'messages' && / MB$/.test(r.cells[1].textContent)).length`); n < 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the PostgreSQL page does not size the messages table in MB: %s", text)
	}

	// Replication: the test's server is a primary with no standby, and the
	// page says so in words (before, it said postgres-stats had no
	// replication figures).
	if n := count(`(() => { const r = document.getElementById('replication'); return r && /This server is the primary\./.test(r.textContent) &&
		/No standby streams from this server/.test(r.textContent) ? 1 : 0 })()`); n != 1 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the PostgreSQL page does not say it is the primary with no standby: %s", text)
	}

	// The failover page: the server this broker is on, and the pause of
	// writes when it failed over from db-a to db-b, in units a person
	// reads.
	visit(b.admin, "failover", false)
	if n := count(`[...document.querySelectorAll('#failover-broker tr')].filter((r) => r.cells[0].textContent === 'Connected to' && r.cells[1].textContent === 'db-b:5432').length +
		[...document.querySelectorAll('#failover-pauses tbody tr')].filter((r) => /^\d+ ms$/.test(r.cells[2].textContent) && r.cells[3].textContent === 'read-only, unavailable' &&
			r.cells[4].textContent === 'db-a:5432' && r.cells[5].textContent === 'db-b:5432' && /^yes/.test(r.cells[6].textContent)).length`); n != 2 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the failover page does not show the server and the failover from db-a to db-b: %s", text)
	}

	// The leaders page: by role, the passes this broker led, when the last
	// began and how long it took, and the failure; then each pass.
	visit(b.admin, "leaders", false)
	if n := count(`[...document.querySelectorAll('#leader-roles tbody tr')].filter((r) => /^Retention/.test(r.cells[0].textContent) && r.cells[1].textContent === '3' &&
		/^\d+ ms$/.test(r.cells[3].textContent) && /session ended/.test(r.cells[5].textContent)).length +
		[...document.querySelectorAll('#leader-passes tbody tr')].filter((r) => /^Analytics rollup/.test(r.cells[0].textContent) && r.cells[3].textContent === '4100').length`); n != 2 {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the leaders page does not show the retention and rollup passes led: %s", text)
	}

	// Seek to a time: before every message, billing replays the queue.
	visit(b.admin, "groups", false)
	eval(`(() => { const e = document.querySelector('input[data-seek="billing/orders"]'); e.value = '1970-01-01T00:00'; e.dispatchEvent(new Event('input')); return 1 })()`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-action="seek-time"]`))); err != nil {
		t.Fatalf("seek to a time through the UI: %v", err)
	}
	wait("the seek to be done", `[...document.querySelectorAll('main .flash')].some((p) => p.textContent === 'Seek to time: done')`)
	if err := json.Unmarshal([]byte(b.must("GET", "/api/v1/consumer-groups", "")), &groups); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.Name == "billing" && g.LagMessages <= behind {
			t.Fatalf("billing is %d messages behind after a seek to 1970, %d before", g.LagMessages, behind)
		}
	}
	shot("admin-groups-after-seek")

	// A DLQ retry through the UI moves the message back to its queue.
	before := b.dlqTotal()
	visit(b.admin, "dlq", false)
	if n := count(`document.querySelectorAll('button[data-action="retry"]').length`); n != 2 {
		t.Fatalf("%d retry buttons for 2 dead letters", n)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-action="retry"]`))); err != nil {
		t.Fatalf("retry through the UI: %v", err)
	}
	wait("the retried row to leave the page", `document.querySelectorAll('button[data-action="retry"]').length === 1`)
	if after := b.dlqTotal(); before != "2" || after != "1" {
		t.Fatalf("DLQ total %s before the retry, %s after", before, after)
	}
	if out := b.must("GET", "/api/v1/messages?queue=orders&limit=200", ""); !strings.Contains(out, `"transactionId":"dlq:`) {
		t.Fatalf("the retried message is not back in its queue: %s", out)
	}
	shot("admin-dlq-after-retry")

	// The DLQ's filters narrow the listing (queue, group, failure time),
	// and its top errors count the dead letters by error.
	if n := count(`[...document.querySelectorAll('main section')].filter((c) => /^Top errors/.test((c.querySelector('h2') || {}).textContent) &&
		[...c.querySelectorAll('tbody tr')].some((r) => +r.cells[1].textContent > 0)).length`); n != 1 {
		t.Fatal("the DLQ page shows no top error")
	}
	filter := func(id, value string, rows int) {
		t.Helper()
		eval(fmt.Sprintf(`(() => { const e = document.getElementById(%q); e.value = %q; e.dispatchEvent(new Event('change')); return 1 })()`, id, value))
		wait(fmt.Sprintf("%d dead letters with %s=%q", rows, id, value), fmt.Sprintf(`document.getElementById(%q).value === %q && document.querySelectorAll('button[data-action="retry"]').length === %d`, id, value, rows))
	}
	filter("dlq-queue", "notes", 0)
	filter("dlq-queue", "orders", 1)
	filter("dlq-group", "billing", 0)
	filter("dlq-group", "__QUEUE_MODE__", 1)
	filter("dlq-to", "2020-01-01T00:00", 0)
	shot("admin-dlq-filtered")
	filter("dlq-to", "", 1)
	filter("dlq-group", "", 1)
	filter("dlq-queue", "", 1)

	// As a read-only user: no action button on any page.
	ro := bearer(t, "viewer", "read-only")
	for i, page := range all {
		visit(ro, page, i == 0)
		if n := count(`document.querySelectorAll('button.action').length`); n != 0 {
			t.Errorf("read-only: %d action buttons on %s", n, page)
		}
		shot("readonly-" + shotName(page))
	}
	visit(ro, "failover", false)
	if n := count(`[...document.querySelectorAll('main')].filter((m) => !m.textContent.includes('db-a') && !m.textContent.includes('db-b') &&
		m.textContent.includes('hidden (admins only)')).length`); n != 1 {
		t.Fatal("the failover page shows a read-only user the database servers' addresses")
	}
	if n := count(`document.body.dataset.level === 'read-only' ? 1 : 0`); n != 1 {
		t.Fatal("the session does not say read-only")
	}
	// The route refuses what the UI hides.
	out := b.must("GET", "/api/v1/dlq?limit=1", "")
	pid, tx := between(out, `"partitionId":"`, `"`)[0], between(out, `"transactionId":"`, `"`)[0]
	if code, body := b.call("POST", "/api/v1/messages/"+pid+"/"+tx+"/retry", `{}`, ro); code != 403 {
		t.Fatalf("a read-only retry: %d %s", code, body)
	}

	// A token half typed into Settings survives the refresh ticks: the
	// page polls every 200 ms here (?refresh=200), and the Settings form
	// is not re-rendered under the user's fingers (it was, every 5 s,
	// wiping the field).
	if err := chromedp.Do(ctx, chromedp.Navigate(b.url+"/dashboard/?refresh=200#/settings")); err != nil {
		t.Fatal(err)
	}
	wait("the settings page", `document.body.dataset.page === 'settings' && +(document.body.dataset.renders || 0) > 0`)
	const typed = "half-typed-token"
	eval(`document.getElementById('token').value = '', 1`)
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), typed)); err != nil {
		t.Fatal(err)
	}
	renders, ticks := count(`+document.body.dataset.renders`), count(`+(document.body.dataset.ticks || 0)`)
	wait("three refresh ticks", fmt.Sprintf(`+(document.body.dataset.ticks || 0) >= %d`, ticks+3))
	if n := count(fmt.Sprintf(`document.getElementById('token').value === %q && document.activeElement.id === 'token' ? 1 : 0`, typed)); n != 1 {
		value, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('token').value + ' (focus: ' + document.activeElement.id + ')'`))
		t.Fatalf("the token being typed did not survive the refresh: the field holds %q, not %q", value, typed)
	}
	if n := count(`+document.body.dataset.renders`); n != renders {
		t.Errorf("the settings page re-rendered %d times on refresh ticks", n-renders)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("the browser reported:\n%s", strings.Join(problems, "\n"))
	}
}

// chooseRange picks a time range in the header as a user does and waits
// until every chart on the page spans it.
func chooseRange(t *testing.T, eval func(string) int, wait func(string, string), r string) {
	t.Helper()
	eval(fmt.Sprintf(`(() => { const s = document.getElementById('range'); s.value = %q; s.dispatchEvent(new Event('change')); return 1 })()`, r))
	span := map[string]int{"1h": 3600e3, "6h": 6 * 3600e3, "24h": 24 * 3600e3, "7d": 7 * 86400e3}[r]
	wait("the "+r+" range", fmt.Sprintf(`[...document.querySelectorAll('[data-chart]')].every((c) => +c.dataset.span === %d)`, span))
}
