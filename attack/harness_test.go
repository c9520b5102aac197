//go:build attack

package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/store/storetest"
)

// stallBound is how long a request to an unrelated queue may take while
// something else is held up: generous for a loaded 2-core machine, far
// below the lock and statement timeouts a stall would run into.
const stallBound = 5 * time.Second

type suite struct {
	bin   string
	began time.Time
}

// probe is one attack: what it tried, the evidence of what did not hold,
// or why it could not be tried.
type probe struct {
	t        *testing.T
	s        *suite
	name     string
	tried    []string
	evidence []string
	notTried string
	failed   bool
	failures int
	took     time.Duration
	client   *http.Client
	mu       sync.Mutex // failf and triedf run from the probe's goroutines too
}

func (p *probe) failedAny() bool { return p.failed || (p.t != nil && p.t.Failed()) }

// triedf records one thing the probe did to the broker.
func (p *probe) triedf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tried = append(p.tried, fmt.Sprintf(format, args...))
}

// maxEvidence bounds the evidence lines one probe puts in the table; the
// rest are in the test log.
const maxEvidence = 8

// failf records evidence that a property did not hold; the probe goes on.
func (p *probe) failf(format string, args ...any) {
	p.t.Helper()
	msg := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ") // one line in the table
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = true
	p.t.Error(msg)
	p.failures++
	switch {
	case p.failures <= maxEvidence:
		p.evidence = append(p.evidence, msg)
	case p.failures == maxEvidence+1:
		p.evidence = append(p.evidence, "(more in the test log above)")
	}
}

// fatalf records evidence and ends the probe.
func (p *probe) fatalf(format string, args ...any) {
	p.t.Helper()
	p.failf(format, args...)
	p.t.FailNow()
}

// skip ends the probe as not tried, saying why.
func (p *probe) skip(why string) {
	p.notTried = why
	p.t.Skip(why)
}

// http is the probe's client: its own transport, closed when it ends, so no
// keep-alive outlives the probe.
func (p *probe) http() *http.Client {
	if p.client == nil {
		tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
		p.client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
		p.t.Cleanup(tr.CloseIdleConnections)
	}
	return p.client
}

// answer is one HTTP exchange's outcome; code -1 is a transport error.
type answer struct {
	code   int
	body   []byte
	header http.Header
	err    error
	took   time.Duration
}

func (a answer) String() string {
	if a.err != nil {
		return "error " + a.err.Error()
	}
	b := string(a.body)
	if len(b) > 200 {
		b = b[:200] + "..."
	}
	return fmt.Sprintf("%d %s", a.code, strings.TrimSpace(b))
}

// do sends one request with a JSON content type unless headers name
// another ("Name: value" pairs).
func (p *probe) do(method, url, body string, headers ...string) answer {
	return p.doCtx(context.Background(), method, url, []byte(body), headers...)
}

func (p *probe) doCtx(ctx context.Context, method, url string, body []byte, headers ...string) answer {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return answer{code: -1, err: err}
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	began := time.Now()
	resp, err := p.http().Do(req)
	if err != nil {
		return answer{code: -1, err: err, took: time.Since(began)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, body: raw, header: resp.Header, err: err, took: time.Since(began)}
}

// pg is where a broker finds PostgreSQL.
type pg struct {
	host                 string
	port                 uint16
	user, password, name string
	dsn                  string
}

// database gives the probe a fresh migrated database.
func (p *probe) database() pg {
	dsn := storetest.DSN(p.t)
	c, err := pgx.ParseConfig(dsn)
	if err != nil {
		p.fatalf("parse dsn: %v", err)
	}
	return pg{host: c.Host, port: c.Port, user: c.User, password: c.Password, name: c.Database, dsn: dsn}
}

// proxied puts a cuttable proxy between brokers and db.
func (p *probe) proxied(db pg) (pg, *faults.PGProxy) {
	proxy, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", db.host, db.port))
	if err != nil {
		p.fatalf("pg proxy: %v", err)
	}
	p.t.Cleanup(proxy.Close)
	db.host, db.port = "127.0.0.1", uint16(proxy.Port())
	return db, proxy
}

// conn is an outside session on db.
func (p *probe) conn(db pg) *pgx.Conn {
	c, err := pgx.Connect(context.Background(), db.dsn)
	if err != nil {
		p.fatalf("connect: %v", err)
	}
	p.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// broker is one running broker process.
type broker struct {
	url   string
	spool string
	cmd   *exec.Cmd
	out   *lockedBuffer
	done  chan struct{}
	err   error // the exit status, once done is closed
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail is the last n bytes of what the broker logged.
func (b *broker) tail(n int) string {
	s := b.out.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

func (b *broker) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// launch starts `queen serve` on a free loopback port against db with its
// spool in spool and extra environment; it does not wait for health.
// nofile, when above 0, bounds the process's open files (ulimit -n).
func (p *probe) launch(db pg, spool string, nofile int, env ...string) *broker {
	port, err := freePort()
	if err != nil {
		p.fatalf("free port: %v", err)
	}
	args := []string{p.s.bin, "serve"}
	if nofile > 0 {
		args = []string{"sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" serve`, nofile), p.s.bin}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT="+strconv.Itoa(port),
		"PG_HOST="+db.host, "PG_PORT="+strconv.Itoa(int(db.port)), "PG_USER="+db.user, "PG_PASSWORD="+db.password,
		"PG_DATABASE="+db.name, "FILE_BUFFER_DIR="+spool, "LOG_LEVEL=warn", "DB_POOL_SIZE=20",
		"QUEEN_SHUTDOWN_TIMEOUT_MS=5000", "DB_CONNECTION_TIMEOUT=500", "QUEEN_MESH_PEERS=")
	cmd.Env = append(cmd.Env, env...)
	b := &broker{url: fmt.Sprintf("http://127.0.0.1:%d", port), spool: spool, cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.fatalf("start broker: %v", err)
	}
	go func() { b.err = cmd.Wait(); close(b.done) }()
	p.t.Cleanup(b.stop)
	return b
}

// start launches a broker and waits until /health answers 200.
func (p *probe) start(db pg, spool string, env ...string) *broker {
	b := p.launch(db, spool, 0, env...)
	p.waitHealthy(b)
	return b
}

func (p *probe) waitHealthy(b *broker) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if a := p.do("GET", b.url+"/health", ""); a.code == 200 {
			return
		}
		if b.exited() {
			p.fatalf("broker exited during start (%v): %s", b.err, b.tail(800))
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.fatalf("broker at %s not healthy after 60 s: %s", b.url, b.tail(800))
}

// stop ends the broker gracefully (SIGTERM), killing it after 20 s.
func (b *broker) stop() {
	if b.exited() {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// eventually polls cond every 50 ms until it holds or within passes.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pushItems pushes items (each a JSON object) in one request.
func (p *probe) pushItems(url string, items ...string) answer {
	return p.do("POST", url+"/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`)
}

func item(queue, partition, txid string) string {
	return fmt.Sprintf(`{"queue":%q,"partition":%q,"transactionId":%q,"payload":{"t":%q}}`, queue, partition, txid, txid)
}

// pushStatus is the per-item status of a push answer ("" when unreadable).
func pushStatus(a answer) string {
	var res []struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(a.body, &res) != nil || len(res) == 0 {
		return ""
	}
	return res[0].Status
}

// acknowledged says a push answer promises its item is (or will be)
// stored: 200/201 with queued, duplicate or buffered.
func acknowledged(a answer) bool {
	s := pushStatus(a)
	return (a.code == 200 || a.code == 201) && (s == "queued" || s == "duplicate" || s == "buffered")
}

type poppedMsg struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Partition     string `json:"partition"`
}

// drain pops queue with autoAck (headers: a token, say) until it answers 204 and counts each
// transactionId delivered.
func (p *probe) drain(url, queue string, headers ...string) map[string]int {
	seen := map[string]int{}
	for i := 0; i < 10000; i++ {
		a := p.do("GET", url+"/api/v1/pop/queue/"+queue+"?batch=1000&partitions=100&autoAck=true", "", headers...)
		if a.code == 204 {
			return seen
		}
		var res struct {
			Messages []poppedMsg `json:"messages"`
		}
		if a.code != 200 || json.Unmarshal(a.body, &res) != nil {
			p.fatalf("draining %s: pop answered %s", queue, a)
		}
		for _, m := range res.Messages {
			seen[m.TransactionID]++
		}
	}
	p.fatalf("draining %s never ended", queue)
	return nil
}

// queueNames lists the default tenant's queues.
func (p *probe) queueNames(url string, headers ...string) []string {
	a := p.do("GET", url+"/api/v1/resources/queues", "", headers...)
	var res struct {
		Queues []struct {
			Name string `json:"name"`
		} `json:"queues"`
	}
	if a.code != 200 || json.Unmarshal(a.body, &res) != nil {
		p.fatalf("list queues: %s", a)
	}
	var names []string
	for _, q := range res.Queues {
		names = append(names, q.Name)
	}
	return names
}

// bufferStatus reads GET /api/v1/status/buffers.
func (p *probe) bufferStatus(url string, headers ...string) map[string]any {
	a := p.do("GET", url+"/api/v1/status/buffers", "", headers...)
	var m map[string]any
	if a.code != 200 || json.Unmarshal(a.body, &m) != nil {
		p.fatalf("status/buffers: %s", a)
	}
	return m
}

// waitSpoolDrained waits until the broker's spool has nothing pending.
func (p *probe) waitSpoolDrained(b *broker, within time.Duration) bool {
	return eventually(within, func() bool {
		a := p.do("GET", b.url+"/api/v1/status/buffers", "")
		var m map[string]any
		if a.code != 200 || json.Unmarshal(a.body, &m) != nil {
			return false
		}
		n, _ := m["pending"].(float64)
		return n == 0 && m["dbHealthy"] == true
	})
}

// lockWaiters counts sessions of db waiting on a lock, seen from c.
func lockWaiters(c *pgx.Conn) int {
	var n int
	_ = c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	return n
}

// missingOrRepeated compares what was acknowledged with what was seen.
func missingOrRepeated(acked []string, seen map[string]int) (missing, repeated []string) {
	for _, id := range acked {
		switch n := seen[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			repeated = append(repeated, id)
		}
	}
	return missing, repeated
}

func firstFew(xs []string) string {
	if len(xs) > 5 {
		return strings.Join(xs[:5], ",") + fmt.Sprintf(",... (%d)", len(xs))
	}
	return strings.Join(xs, ",")
}
