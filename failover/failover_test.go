// Package failover_test runs brokers against a real primary and a
// synchronous streaming standby built from PostgreSQL's own binaries, and
// fails the primary over under push and pop load: stopped with -m
// immediate, its address pointed at the still read-only standby, the
// standby promoted, the old primary rewound (pg_rewind) and rejoined as the
// new standby; then the roles switch back, and in a last round the
// address points at the read-only server for 30 s before the promotion.
// Every acknowledged push must be delivered, once per group (again only
// after an ack that failed), nothing may be quarantined in the spool, and
// no two brokers' retention passes may overlap.
package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// roundSpec is one failover: how long the moved address points at the
// read-only standby before it is promoted.
type roundSpec struct {
	name     string
	readOnly time.Duration
}

func TestStandbyPromotedUnderLoad(t *testing.T) {
	rounds := []roundSpec{{"failover", time.Second}, {"switch back", time.Second}, {"30 s read-only", 30 * time.Second}}
	if s := os.Getenv("QUEEN_FAILOVER_READONLY"); s != "" { // a shorter run while developing
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		rounds[2].readOnly = d
	}
	h := newHarness(t, true)
	h.load()
	time.Sleep(2 * time.Second)
	for _, r := range rounds {
		h.failover(r)
	}
	time.Sleep(2 * time.Second)
	h.stopLoad()
	h.verify()
}

// TestAsyncStandbyLosesCommits measures what the synchronous standby is
// for: the same failover with synchronous_standby_names empty, where
// PostgreSQL acknowledges commits the standby has not received, and a
// promotion loses them, pushes the broker answered "queued" among them.
// It is a measurement (make failover-async), not a property: it fails
// only if the run itself goes wrong, and prints how many were lost.
func TestAsyncStandbyLosesCommits(t *testing.T) {
	if os.Getenv("QUEEN_FAILOVER_ASYNC") == "" {
		t.Skip("a measurement: make failover-async")
	}
	h := newHarness(t, false)
	// The standby streams through a link that adds 20 ms to every
	// chunk, as a standby in another zone would lag; on loopback it
	// keeps up within microseconds and nothing is ever lost.
	link, err := faults.NewPGProxy(fmt.Sprintf("127.0.0.1:%d", h.primary.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	link.SetMode(faults.Delay, 20*time.Millisecond)
	h.exec(h.standby, fmt.Sprintf(`ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=%d user=postgres'`, link.Port()))
	h.exec(h.standby, `SELECT pg_reload_conf()`)
	h.waitStreaming()
	h.load()
	time.Sleep(3 * time.Second)
	h.failover(roundSpec{"async, 20 ms link", time.Second})
	time.Sleep(2 * time.Second)
	h.stopLoad()
	h.verify()
}

// harness is two database servers, the moving address and two brokers:
// b0 names both servers (PG_HOST=a,b: libpq's multi-host rule with
// target_session_attrs=read-write), b1 reaches the database only through
// the address that moves (a VIP or DNS name; here a TCP forwarder).
type harness struct {
	t       *testing.T
	dir     string
	sync    bool
	primary *pglocal.Cluster
	standby *pglocal.Cluster
	addr    *faults.PGProxy
	brokers []*queen.Broker
	bases   []string

	mu      sync.Mutex
	pushes  map[string]string // txid -> status answered (queued, buffered)
	firstOK []time.Time       // per broker: first queued answer since the last promotion
	since   time.Time         // the last promotion
	lastOK  time.Time         // the last queued answer, any broker
	maxGap  time.Duration     // the longest pause between queued answers this round
	deliv   []delivery
	passes  []pass

	stop   chan struct{}
	wg     sync.WaitGroup
	pushN  atomic.Int64
	report []string
}

type delivery struct {
	txid string
	ack  bool // the ack answered success
}

type pass struct {
	broker     int
	start, end time.Time
}

func newHarness(t *testing.T, syncStandby bool) *harness {
	if _, err := pglocal.BinDir(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: t.TempDir(), sync: syncStandby, pushes: map[string]string{}, stop: make(chan struct{})}
	ctx := context.Background()
	settings := []string{"fsync=off", "max_connections=200"}
	var err error
	h.primary, err = pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(h.dir, "a", "data"), Replication: true, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	if syncStandby {
		h.exec(h.primary, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
		h.exec(h.primary, `SELECT pg_reload_conf()`)
	}
	h.standby, err = pglocal.Standby(ctx, h.primary, pglocal.Options{DataDir: filepath.Join(h.dir, "b", "data"), Settings: settings})
	if err != nil {
		h.primary.Stop()
		t.Fatal(err)
	}
	h.waitStreaming()
	if h.addr, err = faults.NewPGProxy(fmt.Sprintf("127.0.0.1:%d", h.primary.Port)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, b := range h.brokers {
			b.Shutdown(context.Background())
		}
		h.addr.Close()
		h.primary.Stop()
		h.standby.Stop()
	})
	both := func(c *config.Config) {
		c.PGHost, c.PGPorts = "127.0.0.1,127.0.0.1", []int{h.primary.Port, h.standby.Port}
	}
	moving := func(c *config.Config) { c.PGHost, c.PGPort = "127.0.0.1", h.addr.Port() }
	for i, tune := range []func(*config.Config){both, moving} {
		h.startBroker(i, tune)
	}
	h.configure()
	return h
}

// configure gives the load's queues a 3 s lease: a batch whose ack failed
// in the gap comes back within the test.
func (h *harness) configure() {
	for _, q := range []string{"fo", "fo-t"} {
		code, body := h.do(0, "POST", "/api/v1/configure", fmt.Sprintf(`{"queue":%q,"options":{"leaseTime":3}}`, q))
		if code != 200 && code != 201 {
			h.t.Fatalf("configure %s: %d %s", q, code, body)
		}
	}
}

func (h *harness) startBroker(i int, tune func(*config.Config)) {
	cfg := config.Default()
	cfg.Host, cfg.Port, cfg.ServerID = "127.0.0.1", 0, fmt.Sprint("b", i)
	cfg.PGUser, cfg.PGPassword, cfg.PGDatabase = "postgres", "", "postgres"
	cfg.DBPoolSize = 20
	cfg.DBConnectionTimeout = time.Second
	cfg.DBStatementTimeout = 5 * time.Second
	cfg.FileBufferDir = filepath.Join(h.dir, fmt.Sprint("spool-", i))
	cfg.FileBufferFlush = 100 * time.Millisecond
	cfg.RetentionInterval = 300 * time.Millisecond
	// A broker that must not run without a synchronous standby starts
	// here: the primary has one.
	cfg.RequireSyncStandby = h.sync
	tune(&cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	var logw io.Writer = io.Discard
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		logw = os.Stderr
	}
	b := queen.New(queen.Options{Config: cfg, Listener: l, Logger: slog.New(slog.NewTextHandler(logw, nil)).With("broker", i),
		RetentionPasses: func(start, end time.Time) {
			h.mu.Lock()
			h.passes = append(h.passes, pass{i, start, end})
			h.mu.Unlock()
		}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.brokers = append(h.brokers, b)
	h.bases = append(h.bases, "http://"+b.Addr())
	h.firstOK = append(h.firstOK, time.Time{})
}

func (h *harness) exec(c *pglocal.Cluster, sql string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		h.t.Fatalf("%s on port %d: %v", sql, c.Port, err)
	}
}

// waitStreaming waits until the primary sees its standby streaming, as a
// synchronous standby when the harness wants one.
func (h *harness) waitStreaming() {
	h.t.Helper()
	want := "async"
	if h.sync {
		want = "sync"
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var state string
		conn, err := pgx.Connect(ctx, h.primary.DSN("postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&state)
			conn.Close(ctx)
		}
		cancel()
		if state == want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the standby is not streaming as %s after a minute: %q %v", want, state, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 30 * time.Second}

func (h *harness) do(b int, method, path, body string) (int, []byte) {
	req, _ := http.NewRequest(method, h.bases[b]+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// load starts 8 producers, a timer producer and 5 consumers, spread over
// both brokers, each running until stopLoad.
func (h *harness) load() {
	for p := 0; p < 8; p++ {
		h.loop(func(n int) { h.push((p+n)%2, fmt.Sprintf("w%d-%d", p, n), n%4) })
	}
	// Each timer is promised for up to 2 s ahead, so some are claimed
	// by a sweeper on the primary that dies.
	h.loop(func(n int) { h.schedule(n%2, n) })
	// Half the consumers long-poll (parked across the failover, they
	// must answer or be retried), one of them on the timers' queue.
	for c := 0; c < 5; c++ {
		queue, wait := "fo", c%2 == 1
		if c == 4 {
			queue = "fo-t"
		}
		h.loop(func(n int) {
			if h.popAck((c+n)%2, queue, 50, wait) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// loop runs step(0), step(1), ... in a goroutine of its own until stopLoad.
func (h *harness) loop(step func(n int)) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for n := 0; ; n++ {
			select {
			case <-h.stop:
				return
			default:
			}
			step(n)
		}
	}()
}

// schedule promises one timer for up to 2 s ahead through broker b and
// records it when the broker acknowledged it.
func (h *harness) schedule(b, n int) {
	txn := fmt.Sprint("tm-", n)
	code, raw := h.do(b, "POST", "/api/v1/timers",
		fmt.Sprintf(`[{"op":"schedule","queue":"fo-t","timerKey":"k-%d","txn":%q,"delayMs":%d,"payload":{"t":%q}}]`, n, txn, n*37%2000, txn))
	var res struct{ Results []struct{ OK bool } }
	if code != 200 || json.Unmarshal(raw, &res) != nil || len(res.Results) != 1 || !res.Results[0].OK {
		time.Sleep(50 * time.Millisecond)
		return
	}
	h.mu.Lock()
	h.pushes[txn] = "timer"
	h.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
}

func (h *harness) stopLoad() {
	close(h.stop)
	h.wg.Wait()
}

// push sends one message and records what it was answered.
func (h *harness) push(b int, txid string, part int) {
	code, raw := h.do(b, "POST", "/api/v1/push",
		fmt.Sprintf(`{"items":[{"queue":"fo","partition":"p%d","transactionId":%q,"payload":{"t":%q}}]}`, part, txid, txid))
	var res []struct{ Status string }
	if code != 201 || json.Unmarshal(raw, &res) != nil || len(res) != 1 {
		time.Sleep(20 * time.Millisecond) // not acknowledged: neither lost nor counted
		return
	}
	h.pushN.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pushes[txid] = res[0].Status
	if res[0].Status != "queued" {
		return
	}
	now := time.Now()
	if !h.lastOK.IsZero() {
		h.maxGap = max(h.maxGap, now.Sub(h.lastOK))
	}
	h.lastOK = now
	if !h.since.IsZero() && h.firstOK[b].IsZero() {
		h.firstOK[b] = now
	}
}

// popAck pops up to batch messages from broker b and acks each; it
// returns how many it got.
func (h *harness) popAck(b int, queue string, batch int, wait bool) int {
	q := fmt.Sprintf("/api/v1/pop/queue/%s?batch=%d&wait=false", queue, batch)
	if wait {
		q = fmt.Sprintf("/api/v1/pop/queue/%s?batch=%d&wait=true&timeout=500", queue, batch)
	}
	code, raw := h.do(b, "GET", q, "")
	if code != 200 {
		return 0
	}
	var p struct {
		Messages []struct{ TransactionID, PartitionID, LeaseID string }
	}
	if json.Unmarshal(raw, &p) != nil {
		return 0
	}
	if len(p.Messages) == 0 {
		return 0
	}
	acks := make([]map[string]string, len(p.Messages))
	for i, m := range p.Messages {
		acks[i] = map[string]string{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
	}
	body, _ := json.Marshal(map[string]any{"acknowledgments": acks})
	code, raw = h.do(b, "POST", "/api/v1/ack/batch", string(body))
	var res []struct{ Success bool }
	if code != 200 || json.Unmarshal(raw, &res) != nil || len(res) != len(p.Messages) {
		res = make([]struct{ Success bool }, len(p.Messages)) // not acked: they come back after the lease
	}
	h.mu.Lock()
	for i, m := range p.Messages {
		h.deliv = append(h.deliv, delivery{m.TransactionID, res[i].Success})
	}
	h.mu.Unlock()
	return len(p.Messages)
}

// failover stops the primary at once, moves the address to the standby
// (read-only until promoted) for r.readOnly, promotes it, and rejoins the
// old primary as the new standby.
func (h *harness) failover(r roundSpec) {
	h.t.Helper()
	ctx := context.Background()
	before := h.pushN.Load()
	h.mu.Lock()
	h.maxGap = 0
	h.mu.Unlock()
	h.primary.Kill()
	killedAt := time.Now()
	h.addr.SetTarget(fmt.Sprintf("127.0.0.1:%d", h.standby.Port))
	time.Sleep(r.readOnly)
	if h.sync {
		// The standby promoted has no standby of its own yet: it must
		// not wait for one (as pg_auto_failover and Patroni do), until
		// the old primary rejoins.
		h.exec(h.standby, `ALTER SYSTEM SET synchronous_standby_names = ''`)
	}
	if err := h.standby.Promote(ctx); err != nil {
		h.t.Fatal(err)
	}
	promotedAt := time.Now()
	h.exec(h.standby, `SELECT pg_reload_conf()`)
	h.mu.Lock()
	h.since = promotedAt
	for i := range h.firstOK {
		h.firstOK[i] = time.Time{}
	}
	h.mu.Unlock()
	old := h.primary
	rejoined, err := old.Rejoin(ctx, h.standby)
	if err != nil {
		h.t.Fatal(err)
	}
	h.primary, h.standby = h.standby, rejoined
	if h.sync {
		h.exec(h.primary, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
		h.exec(h.primary, `SELECT pg_reload_conf()`)
	}
	h.waitStreaming()
	// Every broker writes again before the next round.
	first := h.waitWrites(r.name)
	leader := h.firstPassAfter(promotedAt)
	h.report = append(h.report, fmt.Sprintf("%-15s read-only %5.1fs  first write after promotion: b0 %v, b1 %v  leader re-elected after %v  acknowledged this round %d  longest pause between queued answers %v",
		r.name, promotedAt.Sub(killedAt).Seconds(), first[0].Sub(promotedAt).Round(time.Millisecond),
		first[1].Sub(promotedAt).Round(time.Millisecond), leader, h.pushN.Load()-before, h.gap()))
}

// waitWrites waits, up to a minute, until every broker answered a push
// queued since the round's mark (h.since), and returns when each first did.
func (h *harness) waitWrites(round string) []time.Time {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		h.mu.Lock()
		first := append([]time.Time(nil), h.firstOK...)
		h.mu.Unlock()
		if !slices.ContainsFunc(first, time.Time.IsZero) {
			return first
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: a broker wrote nothing for a minute after the failover: %v", round, first)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gap is the longest pause between queued answers since the round began.
func (h *harness) gap() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxGap.Round(time.Millisecond)
}

// firstPassAfter is how long after t the first retention pass began, by
// any broker; it waits up to ten seconds for one.
func (h *harness) firstPassAfter(t time.Time) time.Duration {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		for _, p := range h.passes {
			if p.start.After(t) {
				h.mu.Unlock()
				return p.start.Sub(t).Round(time.Millisecond)
			}
		}
		h.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("no retention pass in the ten seconds after %v", t)
	return 0
}

// verify drains the spools and the queue and checks the run.
func (h *harness) verify() {
	t := h.t
	deadline := time.Now().Add(2 * time.Minute)
	for b := range h.brokers {
		for {
			st := h.buffers(b)
			if st["failed"] != 0 {
				t.Fatalf("broker %d quarantined spool files: %v", b, st)
			}
			if st["pending"] == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("broker %d: spool not drained: %v", b, st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Whatever a consumer held when its ack failed comes back after the
	// lease (3 s): drain, wait it out, drain again.
	// Every acknowledged timer fires (claims the dead primary's sweeper
	// held expire after QUEEN_SWEEPER_LEASE_MS).
	for {
		_, raw := h.do(0, "GET", "/api/v1/timers/fo-t?limit=1", "")
		var l struct{ Rows []any }
		if json.Unmarshal(raw, &l) == nil && len(l.Rows) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timers still pending: %s", raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for round := 0; round < 2; round++ {
		for _, q := range []string{"fo", "fo-t"} {
			for empty := 0; empty < 3; {
				if h.popAck(round%2, q, 500, false) == 0 {
					empty++
				}
			}
		}
		if round == 0 {
			time.Sleep(4 * time.Second)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	got := map[string]int{}
	completed := map[string]bool{}
	again, acksLost := 0, 0
	for _, d := range h.deliv {
		if completed[d.txid] {
			acksLost++
			if h.sync {
				t.Errorf("%s delivered again after its ack succeeded", d.txid)
			}
		}
		if got[d.txid] > 0 {
			again++
		}
		got[d.txid]++
		if d.ack {
			completed[d.txid] = true
		}
	}
	buffered, lost, timers := 0, 0, 0
	for txid, status := range h.pushes {
		if status == "buffered" {
			buffered++
		}
		if status == "timer" {
			timers++
		}
		if got[txid] == 0 {
			lost++
			if lost <= 10 && h.sync {
				t.Errorf("%s acknowledged %s, never delivered", txid, status)
			}
		}
	}
	for b := range h.brokers {
		if st := h.buffers(b); st["failed"] != 0 {
			t.Errorf("broker %d quarantined spool files: %v", b, st)
		}
	}
	sort.Slice(h.passes, func(i, j int) bool { return h.passes[i].start.Before(h.passes[j].start) })
	for i := 1; i < len(h.passes); i++ {
		if p, q := h.passes[i-1], h.passes[i]; q.start.Before(p.end) && p.broker != q.broker {
			t.Errorf("retention passes overlap: broker %d %v-%v and broker %d from %v", p.broker, p.start, p.end, q.broker, q.start)
		}
	}
	h.report = append(h.report, fmt.Sprintf("acknowledged %d (buffered %d, timers %d), delivered %d, redelivered after a failed ack %d, lost %d, delivered again after a successful ack %d, quarantined 0, retention passes %d",
		len(h.pushes), buffered, timers, len(got), again-acksLost, lost, acksLost, len(h.passes)))
	for _, line := range h.report {
		t.Log(line)
	}
	h.writeReport()
}

// writeReport appends the run's numbers to $QUEEN_FAILOVER_REPORT, which
// make test prints: go test shows a passing test's log only with -v.
func (h *harness) writeReport() {
	path := os.Getenv("QUEEN_FAILOVER_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		h.t.Errorf("failover report: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s:\n", h.t.Name())
	for _, line := range h.report {
		fmt.Fprintf(f, "  %s\n", line)
	}
}

func (h *harness) buffers(b int) map[string]float64 {
	_, raw := h.do(b, "GET", "/api/v1/status/buffers", "")
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	out := map[string]float64{"pending": -1, "failed": -1}
	for k := range out {
		if v, ok := m[k].(float64); ok {
			out[k] = v
		}
	}
	return out
}
