package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
)

// ClusterOptions describe the brokers of one run.
type ClusterOptions struct {
	// DSN is a migrated database; every broker reaches it through its own
	// PGProxy.
	DSN     string
	Brokers int
	Seed    uint64
	// Lockstep: requests are served by calling handlers directly, one at a
	// time, and database time is the virtual PG clock. Otherwise brokers
	// serve real HTTP on loopback and PostgreSQL's own clock rules.
	Lockstep bool
	// PG is the virtual database clock (lockstep only).
	PG *clock.Sim
	// Log receives broker logs; nil discards them.
	Log io.Writer
	// OnTimerClaim is told of every sweeper claim and how it ended.
	OnTimerClaim func(b int, kind, token string, t store.ClaimedTimer)
	// OnPopClaim is told of every claim a pop made.
	OnPopClaim func(b int, c httpapi.PopClaim)
	// OnLeaderPass is told of every leader pass a broker leads; what it
	// returns, of the pass's end.
	OnLeaderPass func(b int, role string, session uint32) (end func(error))
	// Shards, when enabled, give every broker the shard world's catalogue
	// and shards (the first is DSN's database, reached through the proxy).
	Shards shards.Config
}

// Cluster is a set of brokers in this process sharing one database.
type Cluster struct {
	// onDBNow, when set, runs at the next read of database time by any
	// broker (lockstep: the one request in flight is reaching PostgreSQL).
	onDBNow atomic.Pointer[func()]

	mu    sync.Mutex // guards node up/broker (free-running faults race requests)
	opts  ClusterOptions
	dir   string         // spool directories live here
	spool map[string]int // drain counters of brokers that stopped
	host  string
	port  int
	nodes []*node
	// mesh joins free-running brokers (nil in lockstep mode, where there
	// are no long polls to wake and frames would race the one request).
	mesh *faults.MeshNet
	// AppPrefix is the application_name prefix of every broker connection,
	// for the leak check.
	AppPrefix string
	// keyGen picks the sealing key of brokers started from now on
	// (key.rotate moves it).
	keyGen atomic.Int64
}

// simKeys are the simulated brokers' encryption keys: every broker seals
// with simKeys[keyGen] and keeps the others as previous keys, so a
// rotation (key.rotate) restarts brokers with a new sealing key while
// what the old one sealed, stored or spooled, still opens.
var simKeys = []string{strings.Repeat("1a", 32), strings.Repeat("2b", 32), strings.Repeat("3c", 32)}

// RotateKey makes brokers started from now on seal with the next key.
func (c *Cluster) RotateKey() { c.keyGen.Add(1) }

func (c *Cluster) keys() (seal string, previous []string) {
	g := int(c.keyGen.Load()) % len(simKeys)
	for i, k := range simKeys {
		if i != g {
			previous = append(previous, k)
		}
	}
	return simKeys[g], previous
}

type node struct {
	idx      int
	proxy    *faults.PGProxy
	fs       *faults.FaultyFS // the spool's filesystem; it outlives restarts, as a disk would
	offset   atomic.Int64     // clock skew in ns, live (lockstep)
	spoolDir string
	// stall holds this broker's sweeper between a claim and its fire
	// (sweeper.stall), in ns.
	stall  atomic.Int64
	broker *queen.Broker
	// cfg is the configuration broker was started with (the pop route's
	// defaults, which a direct pop builds its request from).
	cfg      config.Config
	skew     time.Duration
	up       bool
	restarts int
	client   *http.Client
}

// NewCluster starts opts.Brokers brokers, each behind its own proxy.
func NewCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	pc, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "queen-sim-spool-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, host: pc.Host, port: int(pc.Port), AppPrefix: fmt.Sprintf("queen:sim-%x-", o.Seed),
		dir: dir, spool: map[string]int{}}
	if !o.Lockstep && o.Brokers > 1 {
		ports, err := freePorts(o.Brokers)
		if err != nil {
			return nil, err
		}
		c.mesh = faults.NewMeshNet(ports)
	}
	for i := 0; i < o.Brokers; i++ {
		p, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", pc.Host, pc.Port))
		if err != nil {
			c.Close()
			return nil, err
		}
		if o.Lockstep {
			p.SetBlackholeCut(LockstepBlackholeCut)
		}
		n := &node{idx: i, proxy: p, client: newClient(),
			fs: faults.NewFaultyFS(spool.OSFS{}), spoolDir: filepath.Join(dir, fmt.Sprint("broker-", i))}
		c.nodes = append(c.nodes, n)
		if err := c.Start(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) dbName() string {
	pc, _ := pgx.ParseConfig(c.opts.DSN)
	return pc.Database
}

// PopWaitMax is the simulated brokers' POP_WAIT_MAX: the longest a parked
// long poll sleeps before it checks again, woken or not.
const PopWaitMax = 100 * time.Millisecond

// SweeperLease is the simulated brokers' QUEEN_SWEEPER_LEASE_MS.
const SweeperLease = 2 * time.Second

// LockstepBlackholeCut is how long a lockstep blackhole holds a connection
// before closing it: the broker sees a dead connection after this much real
// time, whatever the machine's load, rather than racing its own timeouts.
const LockstepBlackholeCut = 300 * time.Millisecond

// Start (re)starts broker i.
func (c *Cluster) Start(ctx context.Context, i int) error {
	n := c.nodes[i]
	cfg := config.Default()
	cfg.Host, cfg.Port = "127.0.0.1", 0
	cfg.PGHost, cfg.PGPort, cfg.PGUser, cfg.PGPassword, cfg.PGDatabase = "127.0.0.1", n.proxy.Port(), "postgres", "", c.dbName()
	cfg.DBPoolSize = 8
	// A row held locked (pg.rowlock) costs its own writers only, with
	// this small pool too: its writers take turns on one connection and
	// wait without an admission slot.
	// Several push statements in flight per broker: more concurrent
	// commits for free-running runs to race (production defaults to one).
	cfg.PushStatements = 4
	// Free-running: a blackhole is a true one, and these short bounds are
	// what ends the calls it catches.
	cfg.DBConnectionTimeout = 300 * time.Millisecond
	cfg.DBStatementTimeout = 2 * time.Second
	if c.opts.Lockstep {
		// Lockstep: no real-time bound may fire outside a fault, or a
		// loaded machine changes the history. The proxy ends a
		// blackholed connection after LockstepBlackholeCut instead.
		cfg.DBConnectionTimeout = 10 * time.Second
		cfg.DBStatementTimeout = 30 * time.Second
	}
	// Claims of a broker that dies expire quickly, so runs recover them
	// within their convergence bound.
	cfg.SweeperLease = SweeperLease
	cfg.EncryptionKey, cfg.EncryptionKeysPrevious = c.keys()
	// A poison timer fails for good within a few cycles, so runs settle.
	cfg.SweeperMaxAttempts, cfg.SweeperRetryBase = 3, 100*time.Millisecond
	cfg.ServerID = fmt.Sprintf("%s%d", strings.TrimPrefix(c.AppPrefix, "queen:"), i)
	cfg.TenancyHeader = true
	// Recorded analytics are no property of the simulator's, and their
	// per-minute writes would only add statements for its faults to hold.
	cfg.Analytics = false
	// Nor is the queue statistics snapshot (status, the scrape).
	cfg.StatsInterval = 0
	cfg.ApplySchema = false
	cfg.Shards = c.opts.Shards
	cfg.PopWaitInitial, cfg.PopWaitMax = 20*time.Millisecond, PopWaitMax
	cfg.FileBufferDir = n.spoolDir
	cfg.FileBufferFlush = 50 * time.Millisecond
	cfg.FileBufferEventsPerFile = 20
	if c.mesh != nil {
		cfg.MeshPort, cfg.MeshPeers, cfg.MeshSecret = c.mesh.Port(i), c.mesh.Peers(i), "sim"
		cfg.MeshHeartbeat, cfg.MeshDeadAfter = 100*time.Millisecond, time.Second
	}
	logw := c.opts.Log
	if logw == nil {
		logw = io.Discard
	}
	opts := queen.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logw, nil)), SpoolFS: lockedFS{n.fs}}
	opts.TimerClaims = func(kind, token string, t store.ClaimedTimer) {
		if kind == "firing" {
			// Every claim of the batch is recorded; now a slow sweeper
			// pauses before the fire, its claims keeping the others off.
			if d := time.Duration(n.stall.Load()); d > 0 && !c.opts.Lockstep {
				time.Sleep(d)
			}
			return
		}
		if c.opts.OnTimerClaim != nil {
			c.opts.OnTimerClaim(i, kind, token, t)
		}
	}
	if c.opts.OnPopClaim != nil {
		opts.PopClaims = func(pc httpapi.PopClaim) { c.opts.OnPopClaim(i, pc) }
	}
	if c.opts.OnLeaderPass != nil {
		opts.LeaderPasses = func(role string, session uint32) func(error) { return c.opts.OnLeaderPass(i, role, session) }
	}
	if c.opts.Lockstep {
		skewed := &nodeClock{base: c.opts.PG, off: &n.offset}
		opts.Clock = skewed
		opts.DBNow = func() *time.Time {
			if f := c.onDBNow.Swap(nil); f != nil {
				(*f)()
			}
			t := c.opts.PG.Now()
			return &t
		}
		// Ids are seeded per broker and per restart, so a run replays.
		src := rand.NewChaCha8(seedBytes(c.opts.Seed, uint64(i), uint64(n.restarts)))
		opts.IDs = ids.NewSource(skewed, src)
		opts.Jitter = rand.New(rand.NewChaCha8(seedBytes(c.opts.Seed, uint64(i)+1<<32, uint64(n.restarts)))).Float64
		opts.NoBackground = true
		opts.ConfigurePool = func(pc *pgxpool.Config) {
			// Wall-clock pool maintenance would make runs differ.
			pc.HealthCheckPeriod = time.Hour
			pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		}
	}
	if !c.opts.Lockstep {
		// Free-running: the real clock, plus a skew a fault can set.
		skewed := &nodeClock{base: clock.Real{}, off: &n.offset}
		opts.Clock = skewed
		opts.IDs = ids.NewSource(skewed, nil)
		if c.mesh != nil {
			opts.MeshTransport = c.mesh.Transport(i)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	opts.Listener = l
	b := queen.New(opts)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.Start(sctx); err != nil {
		l.Close()
		return fmt.Errorf("broker %d: %w", i, err)
	}
	c.mu.Lock()
	n.broker, n.cfg, n.up = b, cfg, true
	n.restarts++
	c.mu.Unlock()
	return nil
}

func seedBytes(parts ...uint64) [32]byte {
	var b [32]byte
	for i, p := range parts {
		for j := 0; j < 8 && i*8+j < 32; j++ {
			b[i*8+j] = byte(p >> (8 * j))
		}
	}
	return b
}

// Crash kills broker i at once.
func (c *Cluster) Crash(i int) {
	if b := c.take(i); b != nil {
		b.Crash()
		c.noteSpool(b)
		// What was written but never synced is gone, as after power loss.
		_ = c.nodes[i].fs.Crash()
	}
}

// Stop shuts broker i down gracefully, as SIGTERM does: requests in flight
// finish and answer, parked long polls answer 204, the spool is finalized.
func (c *Cluster) Stop(ctx context.Context, i int) {
	if b := c.take(i); b != nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
		c.noteSpool(b)
	}
}

// noteSpool keeps a stopped broker's drain counters.
func (c *Cluster) noteSpool(b *queen.Broker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range drainCounters(b) {
		c.spool[k] += v
	}
}

// drainCounters sums the counters of b's drains (with shards, one per
// lane).
func drainCounters(b *queen.Broker) map[string]int {
	out := map[string]int{}
	for _, d := range b.Drainers() {
		out["spool.replayed"] += int(d.Replayed.Load())
		out["spool.quarantined"] += int(d.Quarantined.Load() + d.Deleted.Load())
		out["spool.cooldown"] += int(d.Cooldowns.Load())
		out["spool.probe-failed"] += int(d.ProbeFails.Load())
	}
	return out
}

// Broker returns broker i if it is running.
func (c *Cluster) Broker(i int) *queen.Broker { return c.running(i) }

// SpoolFS is broker i's spool filesystem, for fault injection.
func (c *Cluster) SpoolFS(i int) *faults.FaultyFS { return c.nodes[i].fs }

// Skew is broker i's clock offset.
func (c *Cluster) Skew(i int) time.Duration { return c.nodes[i].skew }

// SpoolPending sums the events waiting in every running broker's spool,
// and in the spool directories of stopped ones (which wait for a restart).
func (c *Cluster) SpoolPending() int64 {
	var n int64
	for i := range c.nodes {
		b := c.running(i)
		if b == nil {
			continue
		}
		for _, sp := range b.Spools() { // with shards, one lane per shard
			// Read from disk: the counter misses records a fault
			// planted or a failed write left intact.
			w, err := sp.Waiting()
			if err != nil {
				w = max(sp.Pending(), 1)
			}
			n += w
		}
	}
	return n
}

// take marks broker i down and returns it (nil if it was down).
func (c *Cluster) take(i int) *queen.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if !n.up {
		return nil
	}
	n.up = false
	return n.broker
}

func (c *Cluster) running(i int) *queen.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[i]; n.up {
		return n.broker
	}
	return nil
}

// Consumer is broker i's pop runner, the one its pop routes use, and the
// configuration it was started with; ok is false while it is down.
func (c *Cluster) Consumer(i int) (cons *consume.Consumer, cfg config.Config, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[i]; n.up {
		return n.broker.Consumer(), n.cfg, true
	}
	return nil, cfg, false
}

// Up reports whether broker i is running.
func (c *Cluster) Up(i int) bool { return c.running(i) != nil }

// Proxy is broker i's path to PostgreSQL.
func (c *Cluster) Proxy(i int) *faults.PGProxy { return c.nodes[i].proxy }

// SetSkew sets broker i's clock offset, at once.
func (c *Cluster) SetSkew(i int, d time.Duration) {
	c.nodes[i].skew = d
	c.nodes[i].offset.Store(int64(d))
}

// Now is broker i's own (possibly skewed) time in lockstep mode.
func (c *Cluster) Now(i int) time.Time {
	return c.opts.PG.Now().Add(time.Duration(c.nodes[i].offset.Load()))
}

// nodeClock is a broker's clock: the virtual clock (lockstep) or the real
// one (free-running) plus a skew that a fault can change while the broker
// runs. Timers are durations and so ignore skew, as with a real wrong clock.
type nodeClock struct {
	base clock.Clock
	off  *atomic.Int64
}

func (n *nodeClock) Now() time.Time { return n.base.Now().Add(time.Duration(n.off.Load())) }

func (n *nodeClock) NewTimer(d time.Duration) clock.Timer { return n.base.NewTimer(d) }

// ResetPool drops broker i's pooled connections, as a broker would after
// noticing a broken link; the simulator does it on every fault transition
// so that runs do not depend on when the pool notices.
func (c *Cluster) ResetPool(i int) {
	if b := c.running(i); b != nil {
		b.Store().Pool().Reset()
	}
}

// Do sends one request to broker i. In lockstep mode the handler is called
// directly; otherwise it goes over loopback HTTP.
func (c *Cluster) Do(ctx context.Context, i int, method, path, tenant string, body []byte) (int, []byte, error) {
	n := c.nodes[i]
	b := c.running(i)
	if b == nil {
		return 0, nil, fmt.Errorf("broker %d is down", i)
	}
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	if c.opts.Lockstep {
		req := httptest.NewRequestWithContext(ctx, method, path, rd)
		req.Header.Set("Content-Type", "application/json")
		if tenant != "" {
			req.Header.Set("x-queen-tenant", tenant)
		}
		rec := httptest.NewRecorder()
		b.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes(), nil
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+b.Addr()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tenant != "" {
		req.Header.Set("x-queen-tenant", tenant)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// DoLeaving sends one request whose client goes away while the broker
// works on it. Lockstep: the context is cancelled at the broker's first
// read of database time. Free-running: the client gives up after the
// given wait and closes its connection, wherever the broker then is. left
// reports whether the client left before the answer came.
func (c *Cluster) DoLeaving(ctx context.Context, i int, method, path, tenant string, wait time.Duration) (code int, body []byte, left bool, err error) {
	if wait == LeaveAtOnce {
		return c.doGone(ctx, i, method, path, tenant)
	}
	if !c.opts.Lockstep {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		code, body, err = c.Do(ctx, i, method, path, tenant, nil)
		return code, body, err != nil && ctx.Err() != nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fired atomic.Bool
	leave := func() { fired.Store(true); cancel() }
	c.onDBNow.Store(&leave)
	defer c.onDBNow.Store(nil)
	code, body, err = c.Do(ctx, i, method, path, tenant, nil)
	return code, body, fired.Load(), err
}

// LeaveAtOnce, as DoLeaving's wait, makes the client go before the broker
// starts on the request.
const LeaveAtOnce time.Duration = -1

// doGone sends a request whose client is gone before the broker starts on
// it. Lockstep: its context is done when it is served. Free-running: it is
// cancelled the moment it is written, so the broker learns of it as it
// begins (the connection closes).
func (c *Cluster) doGone(ctx context.Context, i int, method, path, tenant string) (int, []byte, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.opts.Lockstep {
		cancel()
		code, body, err := c.Do(ctx, i, method, path, tenant, nil)
		return code, body, true, err
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
	code, body, err := c.Do(ctx, i, method, path, tenant, nil)
	return code, body, err != nil && ctx.Err() != nil, err
}

// Shutdown drains every running broker.
func (c *Cluster) Shutdown(ctx context.Context) {
	for i := range c.nodes {
		if b := c.take(i); b != nil {
			_ = b.Shutdown(ctx)
			c.noteSpool(b)
		}
	}
}

// Close crashes whatever still runs and stops the proxies.
func (c *Cluster) Close() {
	for i, n := range c.nodes {
		if b := c.take(i); b != nil {
			b.Crash()
			c.noteSpool(b)
		}
		n.client.CloseIdleConnections()
		n.proxy.Close()
	}
	os.RemoveAll(c.dir)
}

// Stall makes broker i's sweeper pause d between claiming timers and
// firing them (free-running only; 0 ends it).
func (c *Cluster) Stall(i int, d time.Duration) { c.nodes[i].stall.Store(int64(d)) }

// Quarantined reads the records every broker's drain quarantined, from the
// reasons files beside the quarantined spool files (a file quarantined as
// unreadable has none).
func (c *Cluster) Quarantined() ([]Quarantined, error) {
	var out []Quarantined
	for b, n := range c.nodes {
		files, _ := filepath.Glob(filepath.Join(n.spoolDir, "failed", "*.reasons.jsonl"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
				var r spool.Rejected
				if line == "" || json.Unmarshal([]byte(line), &r) != nil {
					continue
				}
				tenant := r.Tenant
				if tenant == "" {
					tenant = spool.DefaultTenant
				}
				out = append(out, Quarantined{Key{tenant, r.Queue, r.Partition, r.TransactionID}, r.Reason, b})
			}
		}
	}
	return out, nil
}

// Fired sums the proxies' fault counters.
func (c *Cluster) Fired() map[string]int {
	out := map[string]int{}
	c.mu.Lock()
	for k, v := range c.spool {
		out[k] += v
	}
	c.mu.Unlock()
	for i := range c.nodes {
		if b := c.running(i); b != nil {
			for k, v := range drainCounters(b) {
				out[k] += v
			}
		}
		for k, v := range c.nodes[i].fs.Fired() {
			out[k] += v
		}
	}
	for _, n := range c.nodes {
		for k, v := range n.proxy.Fired() {
			out[k] += v
		}
	}
	if c.mesh != nil {
		for k, v := range map[string]int64{"mesh.passed": c.mesh.Passed.Load(), "mesh.dropped": c.mesh.Dropped.Load(),
			"mesh.delayed": c.mesh.Delayed.Load(), "mesh.reordered": c.mesh.Reordered.Load()} {
			if v > 0 {
				out[k] += int(v)
			}
		}
	}
	return out
}

// DSN is the run's database, reached directly (not through a broker's
// proxy), as an outside session would.
func (c *Cluster) DSN() string { return c.opts.DSN }

// Mesh is the network joining free-running brokers (nil in lockstep mode
// or with one broker).
func (c *Cluster) Mesh() *faults.MeshNet { return c.mesh }

// freePorts reserves n loopback ports for the brokers' mesh listeners; they
// keep them across restarts, as a real host keeps its port.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// newClient is one broker's HTTP client. It keeps as many idle connections
// as the run has clients: a burst of parallel pushes then reaches the broker
// together over warm connections (net/http keeps two per host by default,
// and the rest would each dial, spreading the burst out).
func newClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Timeout: 60 * time.Second, Transport: t}
}

// KillLockSessions ends every session holding an advisory lock in the
// run's database but the migration lock's: the retention leader's, when a
// pass is running. It reports how many it ended.
func (c *Cluster) KillLockSessions(ctx context.Context) (int, error) {
	pids, err := c.killLockSessions(ctx)
	return len(pids), err
}
