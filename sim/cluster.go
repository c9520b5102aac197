package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
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
}

// Cluster is a set of brokers in this process sharing one database.
type Cluster struct {
	mu    sync.Mutex // guards node up/broker (free-running faults race requests)
	opts  ClusterOptions
	host  string
	port  int
	nodes []*node
	// AppPrefix is the application_name prefix of every broker connection,
	// for the leak check.
	AppPrefix string
}

type node struct {
	idx      int
	proxy    *faults.PGProxy
	broker   *queen.Broker
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
	c := &Cluster{opts: o, host: pc.Host, port: int(pc.Port), AppPrefix: fmt.Sprintf("queen:sim-%x-", o.Seed)}
	for i := 0; i < o.Brokers; i++ {
		p, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", pc.Host, pc.Port))
		if err != nil {
			c.Close()
			return nil, err
		}
		n := &node{idx: i, proxy: p, client: &http.Client{Timeout: 60 * time.Second}}
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

// Start (re)starts broker i.
func (c *Cluster) Start(ctx context.Context, i int) error {
	n := c.nodes[i]
	cfg := config.Default()
	cfg.Host, cfg.Port = "127.0.0.1", 0
	cfg.PGHost, cfg.PGPort, cfg.PGUser, cfg.PGPassword, cfg.PGDatabase = "127.0.0.1", n.proxy.Port(), "postgres", "", c.dbName()
	cfg.DBPoolSize = 8
	cfg.DBConnectionTimeout = 300 * time.Millisecond
	cfg.DBStatementTimeout = 2 * time.Second
	cfg.ServerID = fmt.Sprintf("%s%d", strings.TrimPrefix(c.AppPrefix, "queen:"), i)
	cfg.TenancyHeader = true
	cfg.ApplySchema = false
	cfg.PopWaitInitial, cfg.PopWaitMax = 20*time.Millisecond, 100*time.Millisecond
	logw := c.opts.Log
	if logw == nil {
		logw = io.Discard
	}
	opts := queen.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logw, nil))}
	if c.opts.Lockstep {
		skewed := clock.Skewed{Base: c.opts.PG, Offset: n.skew}
		opts.Clock = skewed
		opts.DBNow = func() *time.Time { t := c.opts.PG.Now(); return &t }
		// Ids are seeded per broker and per restart, so a run replays.
		src := rand.NewChaCha8(seedBytes(c.opts.Seed, uint64(i), uint64(n.restarts)))
		opts.IDs = ids.NewSource(skewed, src)
		opts.NoBackground = true
		opts.ConfigurePool = func(pc *pgxpool.Config) {
			// Wall-clock pool maintenance would make runs differ.
			pc.HealthCheckPeriod = time.Hour
			pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
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
	n.broker, n.up = b, true
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
	}
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

// Up reports whether broker i is running.
func (c *Cluster) Up(i int) bool { return c.running(i) != nil }

// Proxy is broker i's path to PostgreSQL.
func (c *Cluster) Proxy(i int) *faults.PGProxy { return c.nodes[i].proxy }

// SetSkew sets broker i's clock offset; it applies from its next start in
// lockstep mode (the clock is fixed at start).
func (c *Cluster) SetSkew(i int, d time.Duration) { c.nodes[i].skew = d }

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

// Shutdown drains every running broker.
func (c *Cluster) Shutdown(ctx context.Context) {
	for i := range c.nodes {
		if b := c.take(i); b != nil {
			_ = b.Shutdown(ctx)
		}
	}
}

// Close crashes whatever still runs and stops the proxies.
func (c *Cluster) Close() {
	for i, n := range c.nodes {
		c.Crash(i)
		n.client.CloseIdleConnections()
		n.proxy.Close()
	}
}

// Fired sums the proxies' fault counters.
func (c *Cluster) Fired() map[string]int {
	out := map[string]int{}
	for _, n := range c.nodes {
		for k, v := range n.proxy.Fired() {
			out[k] += v
		}
	}
	return out
}
