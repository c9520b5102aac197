// Package queen wires the broker's parts — store, HTTP API, waker and
// background services — into a Broker with one start and two stops:
// Shutdown drains in-flight requests; Crash abandons everything at once, as
// a killed process would, leaving the database and files as they are.
package queen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/analytics"
	"github.com/queen-go/queen/queen/auth"
	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/connlimit"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/dbprobe"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/maintenance"
	"github.com/queen-go/queen/queen/mesh"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/outages"
	"github.com/queen-go/queen/queen/passes"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/sweeper"
	"github.com/queen-go/queen/queen/waker"
	"github.com/queen-go/queen/queen/writes"
)

// Options configure a Broker. Zero values are production defaults.
type Options struct {
	Config config.Config
	Clock  clock.Clock
	Logger *slog.Logger
	// DBNow injects the database's notion of now (simulator only).
	DBNow func() *time.Time
	IDs   *ids.Source
	// Listener, when set, is served instead of listening on Config.Addr().
	Listener net.Listener
	// NoBackground leaves background services to the caller (the lockstep
	// simulator steps them itself).
	NoBackground bool
	// ConfigurePool, when set, adjusts the pool configuration before the
	// pool opens (the simulator turns off wall-clock health checks).
	ConfigurePool func(*pgxpool.Config)
	// SpoolFS is the spool's filesystem; nil means the real one.
	SpoolFS spool.FS
	// MeshTransport carries the mesh; nil is TCP. The simulator wraps it
	// to drop, delay and reorder frames per link.
	MeshTransport mesh.Transport
	// Jitter spreads the database probe's backoff (a number in [0, 1));
	// nil is math/rand/v2. The simulator seeds it so runs replay.
	Jitter func() float64
	// TimerClaims, when set, is told of every timer claim the sweeper
	// takes and how it ends (sweeper.Sweeper.Observe).
	TimerClaims func(kind, token string, t store.ClaimedTimer)
	// PopClaims, when set, is told of every claim a pop made
	// (httpapi.Options.PopClaims).
	PopClaims func(httpapi.PopClaim)
	// RetentionPasses, when set, is told when each retention pass this
	// broker led began and ended (the failover test checks no two
	// brokers' passes overlap).
	RetentionPasses func(start, end time.Time)
	// LeaderPasses, when set, is told of every pass of every leader role
	// this broker leads, and of its end (leader.Lead.Passes).
	LeaderPasses func(role string, session uint32) (end func(error))
}

// Broker is one queen process.
type Broker struct {
	opts  Options
	cfg   config.Config
	log   *slog.Logger
	pool  *pgxpool.Pool
	probe *dbprobe.Prober
	store *store.Store
	names *names.Names // the store's names, cached: every path shares it
	// writes is the write policy every path that writes shares (sealing
	// with the encryption hint names forgets, the in-batch dedup).
	writes   *writes.Policy
	api      *httpapi.Server
	handler  http.Handler
	http     *http.Server
	conns    *connlimit.Limiter // QUEEN_MAX_CONNECTIONS
	listener net.Listener
	services []background.Service
	spool    *spool.Spool
	drainer  *spool.Drainer
	maint    *maintenance.State
	mesh     *mesh.Mesh // nil when this broker has no peers
	hints    *hints     // the mesh's end in this broker; nil without one
	readOnly *store.ReadOnlyWatch
	recorder *analytics.Recorder // nil with QUEEN_ANALYTICS=false
	flusher  *analytics.Flusher
	arbiter  *admission.Arbiter // sampled for the analytics' work gauges
	waker    *waker.Hub         // its parked pops, likewise
	hosts    []string           // host:port the pool may connect to, in order
	dbName   string             // the database's name, as the pool config has it
	onHost   atomic.Pointer[string]
	// outages is this broker's record of its database (server, pauses of
	// writes), in memory, for the dashboard's failover page.
	outages *outages.Record
	// passes is this broker's record of the leader passes it led, in
	// memory, for the dashboard's leaders page.
	passes *passes.Record
	// shards are the shards' databases (the first is pool, store, writes
	// and names above), others the pools of the shards but the first and
	// of the catalogue, placement the catalogue behind the placement
	// cache: all nil without shards.
	shards    []*shardPart
	others    []*pgxpool.Pool
	placement *placement
	moves     *moves // the mover and its admin routes' view; nil without shards

	cancel   context.CancelFunc // background services and request base context
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// New checks the options; nothing starts until Start.
func New(o Options) *Broker {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.IDs == nil {
		o.IDs = ids.NewSource(o.Clock, nil)
	}
	cfg := o.Config
	if cfg.Shards.Enabled() {
		// The broker's own pool, and all that follows it, is the
		// default shard's.
		cfg = shardConfig(cfg, cfg.Shards.Shards[0])
	}
	return &Broker{opts: o, cfg: cfg, log: o.Logger.With("server", o.Config.ServerID), outages: outages.New(o.Clock),
		passes: passes.New(o.Clock)}
}

// PoolConfig turns the configuration into a pgx pool configuration: pool
// size, connect timeout, and server-side statement and lock timeouts.
func PoolConfig(cfg config.Config) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(cfg.DSN())
	if err != nil {
		return nil, fmt.Errorf("database config: %w", err)
	}
	if cc := pc.ConnConfig; len(hostsOf(cc)) > 1 && cc.ValidateConnect == nil && !strings.Contains(cfg.DSN(), "target_session_attrs") {
		// DATABASE_URL named several hosts and no target_session_attrs:
		// take only the writable one, as for PG_HOST=h1,h2.
		cc.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
	pc.MaxConns = int32(cfg.DBPoolSize)
	pc.ConnConfig.ConnectTimeout = cfg.DBConnectionTimeout
	rp := pc.ConnConfig.RuntimeParams
	rp["application_name"] = "queen:" + cfg.ServerID
	rp["statement_timeout"] = fmt.Sprint(cfg.DBStatementTimeout.Milliseconds())
	rp["lock_timeout"] = fmt.Sprint(cfg.DBLockTimeout.Milliseconds())
	// Every statement is prepared once per connection and written so that
	// one plan fits every parameter value (index paths, LIMITs from
	// parameters). Custom plans would re-plan the CTEs on every call, which
	// cost more CPU than executing them.
	rp["plan_cache_mode"] = "force_generic_plan"
	return pc, nil
}

// Start connects, migrates (when QUEEN_APPLY_SCHEMA), starts the background
// services and begins serving. A database that is not up yet is retried
// until ctx ends; a permanent error (bad password, missing database) fails
// at once.
func (b *Broker) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil && b.spool != nil {
			b.spool.Abandon() // its directory's lock: a retry (or another broker) may start on it
		}
		if err != nil {
			b.closeLanes(true) // likewise each shard's lane
		}
	}()
	if err := b.openPool(ctx); err != nil {
		return err
	}
	apiOpts, err := b.prepare(ctx)
	if err != nil {
		b.pool.Close()
		b.closeOthers()
		return err
	}
	sw := b.startAPI(apiOpts)
	b.services = b.backgroundServices(sw)
	base := b.startServices()
	if err := b.serve(base); err != nil {
		return err
	}
	b.logServing()
	return nil
}

// openPool opens the database pool. Nothing is connected to yet: the pool
// dials on first use.
func (b *Broker) openPool(ctx context.Context) error {
	pc, err := b.poolConfig()
	if err != nil {
		return err
	}
	if b.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return fmt.Errorf("database pool: %w", err)
	}
	return nil
}

// poolConfig is PoolConfig with this broker's hooks: the probe's connect
// timeout, the read-only watch and the per-connection setup. It creates
// b.probe and b.readOnly, which the hooks use.
func (b *Broker) poolConfig() (*pgxpool.Config, error) {
	pc, err := PoolConfig(b.cfg)
	if err != nil {
		return nil, err
	}
	b.probe = dbprobe.New(dbprobe.Options{ConnConfig: pc.ConnConfig, Timeout: b.cfg.DBConnectionTimeout,
		Clock: b.opts.Clock, Jitter: b.opts.Jitter})
	// New pool connections take the probe's connect timeout, which grows
	// while connecting to a loaded server takes longer than configured.
	pc.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.ConnectTimeout = b.probe.ConnectTimeout()
		return nil
	}
	b.readOnly = b.newReadOnlyWatch()
	pc.ConnConfig.OnPgError = b.readOnly.OnPgError
	b.hosts, b.dbName = hostsOf(pc.ConnConfig), pc.ConnConfig.Database
	pc.AfterConnect = b.afterConnect
	if b.opts.ConfigurePool != nil {
		b.opts.ConfigurePool(pc)
	}
	return pc, nil
}

// newReadOnlyWatch closes a connection that meets a read-only server (the
// address moved to a standby), and the broker says so once each way.
func (b *Broker) newReadOnlyWatch() *store.ReadOnlyWatch {
	return &store.ReadOnlyWatch{OnChange: func(ro bool) {
		b.outages.ReadOnly(ro)
		if ro {
			b.log.Warn("database read-only: writes wait (pushes are spooled) until a writable primary answers")
			return
		}
		b.log.Info("database writable again")
	}}
}

// prepare builds everything the HTTP API needs, in order: the store, the
// spool, the maintenance switches, the push path, authentication and the
// mesh. On an error the caller closes the pool; the spool's lock is left to
// Start's deferred Abandon.
func (b *Broker) prepare(ctx context.Context) (httpapi.Options, error) {
	cipher, err := b.openStore(ctx)
	if err != nil {
		return httpapi.Options{}, err
	}
	arbiter := admission.New(b.cfg.DBPoolSize, b.cfg.AdmissionMaintShare)
	if err := b.openSpool(arbiter); err != nil {
		return httpapi.Options{}, err
	}
	return b.apiOptions(ctx, arbiter, cipher)
}

// openStore migrates (when QUEEN_APPLY_SCHEMA), opens the store and refuses
// a standby. It returns the payload cipher, nil without an encryption key.
func (b *Broker) openStore(ctx context.Context) (*crypt.Cipher, error) {
	if b.cfg.ApplySchema {
		if err := b.migrate(ctx); err != nil {
			return nil, err
		}
	}
	var cipher *crypt.Cipher
	if b.cfg.EncryptionKey != "" {
		cipher, _ = crypt.New(b.cfg.EncryptionKey, b.cfg.EncryptionKeysPrevious...) // checked when the configuration was parsed
	}
	b.store = store.New(b.pool, store.Options{DBNow: b.opts.DBNow, IDs: b.opts.IDs, TxTimeout: b.cfg.DBStatementTimeout,
		Clock: b.opts.Clock, ReadOnly: b.readOnly})
	b.writes = writes.New(b.store, writes.Options{Cipher: cipher, Clock: b.opts.Clock, TTL: b.cfg.CacheRefreshInterval})
	b.names = names.New(b.store, names.Options{Clock: b.opts.Clock, TTL: b.cfg.CacheRefreshInterval, SealHints: b.writes})
	if err := b.checkStandby(ctx); err != nil {
		return nil, err
	}
	return cipher, b.openShards(ctx, cipher)
}

// openSpool opens the file buffer and its drainer, unless FILE_BUFFER_DIR
// is empty or "off"; with shards, one lane per shard under it (lanes.go).
// The lock file names this broker and its listen address, so an operator
// can tell who holds the directory.
func (b *Broker) openSpool(arbiter *admission.Arbiter) (err error) {
	if b.cfg.FileBufferDir == "" || b.cfg.FileBufferDir == "off" {
		return nil
	}
	listen := b.cfg.Addr()
	if b.opts.Listener != nil {
		listen = b.opts.Listener.Addr().String()
	}
	holder := "serverId=" + b.cfg.ServerID + " listen=" + listen
	if b.cfg.Shards.Enabled() {
		return b.openLanes(arbiter, b.cfg.FileBufferDir, holder)
	}
	b.spool, err = spool.Open(spool.Options{Dir: b.cfg.FileBufferDir, FS: b.opts.SpoolFS, Clock: b.opts.Clock,
		EventsPerFile: b.cfg.FileBufferEventsPerFile, Log: b.log, Holder: holder,
		OnHealth: b.outages.Reachable})
	if err != nil {
		return fmt.Errorf("FILE_BUFFER_DIR: %w", err)
	}
	b.drainer = &spool.Drainer{Spool: b.spool, Arbiter: arbiter, Every: b.cfg.FileBufferFlush, MaxBatch: b.cfg.FileBufferMaxBatch,
		Ping: b.probe.Probe}
	return nil
}

// apiOptions loads the maintenance switches, builds the push path and the
// analytics recorder, and turns on authentication and the mesh: the HTTP
// API's options, all but the sweeper's and the connection limiter's.
func (b *Broker) apiOptions(ctx context.Context, arbiter *admission.Arbiter, cipher *crypt.Cipher) (httpapi.Options, error) {
	b.maint = maintenance.New(b.store, b.spool, b.log)
	retry := b.contentionRetry(b.store)
	first := &shardPart{store: b.store, writes: b.writes, names: b.names}
	if b.shards != nil {
		first = b.shards[0] // its spool lane
	}
	pushes := b.newPushPath(arbiter, cipher, retry, first)
	if err := b.maint.Load(ctx); err != nil {
		b.log.Warn("could not read the maintenance switches; assuming off until the next reconcile", "err", err)
	}
	if b.cfg.Analytics && b.cfg.Shards.Enabled() {
		b.log.Warn("recorded analytics are off with shards (not built yet)")
	} else if b.cfg.Analytics {
		b.recorder = analytics.NewRecorder(b.cfg.AnalyticsMaxQueues)
	}
	b.arbiter, b.waker = arbiter, waker.New()
	o := httpapi.Options{Config: b.cfg, Store: b.store, Writes: b.writes, Names: b.names, Analytics: b.recorder, Spool: b.spool, Drainer: b.drainer,
		Outages: b.outages, Passes: b.passes, Maintenance: b.maint, Arbiter: arbiter, Clock: b.opts.Clock, Waker: b.waker, IDs: b.opts.IDs, Logger: b.log,
		Cipher: cipher, Push: pushes, PopClaims: b.opts.PopClaims, Retry: retry}
	b.shardOptions(&o, arbiter, cipher, pushes)
	if err := b.configureAuth(&o); err != nil {
		return o, err
	}
	for _, name := range b.cfg.Ignored {
		b.log.Warn("configuration variable is set but does nothing in this broker", "variable", name)
	}
	if b.cfg.MeshRuns() {
		if err := b.startMesh(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// newPushPath is the one owner of commit-or-spool and of the replay of what
// was spooled; the drainer replays through it. With shards it spools to the
// shard's lane, asking the shard's probe (their drains replay through the
// router: routeLanes).
func (b *Broker) newPushPath(arbiter *admission.Arbiter, cipher *crypt.Cipher, retry combine.Retry, on *shardPart) *pushpath.Path {
	sp, ping := b.spool, b.probe.Probe
	if on.spool != nil {
		sp, ping = on.spool, on.probe.Probe
	}
	pushes := pushpath.New(pushpath.Options{Store: on.store, Retry: retry, Writes: on.writes, Names: on.names, Spool: sp, Diverted: b.maint.Push, Ping: ping,
		Cipher: cipher, Arbiter: arbiter, IDs: b.opts.IDs, Log: b.log,
		PushStatements: b.cfg.PushStatements, PushBatchRows: b.cfg.PushBatchRows})
	if b.drainer != nil {
		b.drainer.Replay = pushes.Replay
	}
	return pushes
}

// contentionRetry is the one contention retry of the push path's and the
// ack combiner's statements: combine's loop, bound to the store's error
// classification and statement bound (DB_STATEMENT_TIMEOUT), the ids'
// jitter (seeded, so the simulator replays it) and the broker's clock.
// The store holds statements only; which errors to retry and how long to
// pause is policy, wired here.
func (b *Broker) contentionRetry(st *store.Store) combine.Retry {
	clk := b.opts.Clock
	return combine.Retry{Bound: st.Bound, Jitter: b.opts.IDs.Jitter, Contention: store.Contention, LockTimedOut: store.LockTimedOut,
		Wait: func(ctx context.Context, d time.Duration) { clock.Sleep(ctx, clk, d) }}
}

// configureAuth sets the API's JWT authenticator when JWT_ENABLED, and logs
// where tenants come from, or that every route is open.
func (b *Broker) configureAuth(o *httpapi.Options) (err error) {
	if !b.cfg.JWTEnabled {
		b.log.Info("JWT_ENABLED is off: every route answers without authentication")
		return nil
	}
	if o.Auth, err = auth.New(b.cfg.JWT, b.opts.Clock, b.log); err != nil {
		return err
	}
	switch {
	case b.cfg.TrustTenantHeader:
		b.log.Warn("QUEEN_TENANT_TRUST_HEADER is on: with JWT on, the tenant comes from x-queen-tenant, not the token; safe only behind a gateway that strips and sets that header")
	case b.cfg.JWT.TenantClaim != "":
		b.log.Info("tenants come from the token", "claim", b.cfg.JWT.TenantClaim, "header", "a disagreeing x-queen-tenant is refused (403)")
	}
	return nil
}

// startAPI creates the sweeper (when QUEEN_SWEEPER), the connection limiter
// and the HTTP API with its handler, and wires the hints between them. It
// returns the sweeper, nil when off.
func (b *Broker) startAPI(o httpapi.Options) []*sweeper.Sweeper {
	var sws []*sweeper.Sweeper
	var sw *sweeper.Sweeper
	if b.cfg.Sweeper {
		sw = b.newSweeper(o.Arbiter, o.Cipher, &shardPart{store: b.store, writes: b.writes, names: b.names})
		sws = append(sws, b.shardSweepers(o.Arbiter, o.Cipher, sw)...)
		o.TimerHint = sw.Hint
		o.SweeperStats = func() httpapi.SweeperStats { return sweeperStats(sw) }
	}
	b.conns = connlimit.New(b.cfg.MaxConnections, b.log, b.opts.Clock.Now)
	o.Connections = b.connectionStats
	b.api = httpapi.New(o)
	b.routeLanes()
	if b.hints != nil {
		forget := b.api.ForgetQueueSeries
		b.hints.forgetSeries.Store(&forget)
	}
	b.handler = b.api.Handler()
	for _, sw := range sws {
		sw.Fired = b.api.Notify
	}
	return sws
}

// connectionStats is the connection limiter's count, as /metrics shows it.
func (b *Broker) connectionStats() httpapi.ConnectionStats {
	c := b.conns.Stats()
	return httpapi.ConnectionStats{Max: c.Max, Open: c.Open, Evicted: c.Evicted, Refused: c.Refused}
}

// backgroundServices lists the services this broker runs, in the order they
// start; sws are the sweepers, none when the sweeper is off. With shards
// the retention and queue statistics leaders run once per shard, each
// electing its leader on its shard.
func (b *Broker) backgroundServices(sws []*sweeper.Sweeper) []background.Service {
	services := []background.Service{
		&leader.Retention{Lead: b.lead(b.cfg.RetentionInterval), Batch: b.cfg.RetentionBatchSize,
			CleanupDays: b.cfg.PartitionCleanupDays, Observe: b.opts.RetentionPasses},
		&maintenance.Reconcile{State: b.maint, Clock: b.opts.Clock, Every: background.Every{Interval: b.cfg.CacheRefreshInterval}},
	}
	if b.cfg.StatsInterval > 0 {
		services = append(services, &leader.QueueStats{Lead: b.lead(b.cfg.StatsInterval)})
	}
	services = append(services, b.shardLeaders()...)
	if b.drainer != nil {
		services = append(services, b.drainer)
	}
	services = append(services, b.laneDrainers()...)
	if b.recorder != nil {
		b.flusher = b.newFlusher()
		services = append(services, b.flusher,
			&leader.Stats{Lead: b.lead(time.Minute), Retention: b.cfg.AnalyticsRetention})
	}
	for _, sw := range sws {
		services = append(services, sw)
	}
	return services
}

// startServices runs the background services, unless the caller steps them
// (Options.NoBackground). The context it returns is theirs and every
// request's; b.cancel ends it.
func (b *Broker) startServices() context.Context {
	base, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	if !b.opts.NoBackground {
		for _, svc := range b.services {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				background.Run(base, b.opts.Clock, b.log, svc)
			}()
		}
	}
	return base
}

// serve listens (unless Options.Listener is set) and serves HTTP with
// requests under base. When it cannot listen, the broker is crashed: the
// services are already running.
func (b *Broker) serve(base context.Context) (err error) {
	b.listener = b.opts.Listener
	if b.listener == nil {
		if b.listener, err = net.Listen("tcp", b.cfg.Addr()); err != nil {
			b.Crash()
			return fmt.Errorf("listen %s: %w", b.cfg.Addr(), err)
		}
	}
	// Idle keep-alive connections close after QUEEN_HTTP_IDLE_TIMEOUT_MS,
	// and at QUEEN_MAX_CONNECTIONS the idlest makes room (b.conns): idle
	// clients cannot take the descriptors the pool, spool and mesh need.
	b.http = &http.Server{Handler: b.handler, BaseContext: func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: b.cfg.HTTPIdleTimeout, ConnState: b.conns.ConnState}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := b.http.Serve(b.conns.Listen(b.listener)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("http server stopped", "err", err)
		}
	}()
	return nil
}

// logServing is the startup summary: what an operator checks first, and no
// secret.
func (b *Broker) logServing() {
	b.log.Info("queen broker serving", "addr", b.listener.Addr().String(),
		"database", b.database(), "user", b.pool.Config().ConnConfig.User,
		"pool", b.cfg.DBPoolSize, "spool", b.cfg.FileBufferDir, "tenancy", b.cfg.TenancyHeader,
		"jwt", b.cfg.JWTEnabled, "meshPeers", b.cfg.MeshPeers, "sweeper", b.cfg.Sweeper,
		"retentionInterval", b.cfg.RetentionInterval)
}

// newSweeper is this broker's timer and KV sweeper.
func (b *Broker) newSweeper(arbiter *admission.Arbiter, cipher *crypt.Cipher, on *shardPart) *sweeper.Sweeper {
	return &sweeper.Sweeper{Store: on.store, Names: on.names, Writes: on.writes, Arbiter: arbiter, Clock: b.opts.Clock, IDs: b.opts.IDs, Log: b.log, Cipher: cipher,
		Lease: b.cfg.SweeperLease, MinSleep: b.cfg.SweeperMinSleep, MaxSleep: b.cfg.SweeperMaxSleep,
		IdleMaxSleep: b.cfg.SweeperIdleMaxSleep, ClaimBatch: b.cfg.SweeperClaimBatch, PruneBatch: 1000,
		MaxAttempts: b.cfg.SweeperMaxAttempts, RetryBase: b.cfg.SweeperRetryBase, Observe: b.opts.TimerClaims}
}

func sweeperStats(sw *sweeper.Sweeper) httpapi.SweeperStats {
	cum, sum, n := sw.Stats.Lateness.Snapshot()
	return httpapi.SweeperStats{Cycles: sw.Stats.Cycles.Load(), Fired: sw.Stats.Fired.Load(),
		Duplicates: sw.Stats.Duplicates.Load(), Pruned: sw.Stats.Pruned.Load(), Failures: sw.Stats.Failures.Load(),
		FireFailures: sw.Stats.FireFailures.Load(), TimersFailed: sw.Stats.TimersFailed.Load(),
		LatenessBuckets: sweeper.LatenessBuckets, LatenessCumulative: cum, LatenessSum: sum, LatenessCount: n}
}

// startMesh binds the mesh port and dials the peers; the HTTP API and the
// maintenance switches then send their hints through it.
func (b *Broker) startMesh(api *httpapi.Options) error {
	h := &hints{wake: api.Waker, names: b.names, more: b.shardNames(), maint: b.maint, log: b.log}
	b.hints = h
	b.mesh = mesh.New(mesh.Options{ServerID: b.cfg.ServerID, Listen: net.JoinHostPort(b.cfg.Host, fmt.Sprint(b.cfg.MeshPort)),
		Peers: b.cfg.MeshPeers, Secret: []byte(b.cfg.MeshSecret), Heartbeat: b.cfg.MeshHeartbeat,
		DeadAfter: b.cfg.MeshDeadAfter, QueueLen: b.cfg.MeshQueueFrames, MaxPending: b.cfg.MeshMaxPending, Transport: b.opts.MeshTransport,
		Clock: b.opts.Clock, Log: b.log, Handle: h.handle})
	if err := b.mesh.Start(); err != nil {
		b.mesh = nil
		return fmt.Errorf("QUEEN_MESH_PORT: %w", err)
	}
	if b.cfg.MeshSecret == "" {
		b.log.Warn("mesh runs open (QUEEN_MESH_INSECURE): any host reaching the mesh port can send hints")
	}
	h.mesh = b.mesh
	b.maint.Announce(h.announce)
	api.Peers = h
	api.SharedState = func() any { return b.mesh.Stats() }
	api.MeshRefusals = func() httpapi.MeshRefusals {
		st := b.mesh.Stats()
		return httpapi.MeshRefusals{HandshakeFailures: st.HandshakeFailures, SignatureFailures: st.SignatureFailures,
			SequenceRejections: st.SequenceRejections, ConnectionsRefused: st.ConnectionsRefused}
	}
	return nil
}

func (b *Broker) migrate(ctx context.Context) error {
	return b.retryStartup(ctx, b.whatDB(), func(ctx context.Context) error { return store.Migrate(ctx, b.pool) })
}

// retryStartup runs a startup step on a database (what names it in its
// error) until it succeeds, a permanent error (bad password, missing
// database) fails it, or ctx ends; while the database is not up yet it
// retries, logging each attempt.
func (b *Broker) retryStartup(ctx context.Context, what string, step func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := step(ctx)
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		permanent := errors.As(err, &pgErr) && (pgerrcode.IsInvalidAuthorizationSpecification(pgErr.Code) ||
			pgErr.Code == pgerrcode.InvalidCatalogName || store.Classify(err) == store.Permanent)
		if permanent || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		args := []any{"attempt", attempt, "err", err}
		if b.cfg.Shards.Enabled() {
			args = append(args, "database", what)
		}
		b.log.Warn("database not reachable yet; retrying", args...)
		t := b.opts.Clock.NewTimer(min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, err)
		case <-t.C():
		}
	}
}

// Addr is the address the broker serves on.
func (b *Broker) Addr() string { return b.listener.Addr().String() }

// Handler is the broker's HTTP handler, for in-process callers.
func (b *Broker) Handler() http.Handler { return b.handler }

// Consumer runs the broker's pops, the one its pop routes use (one waker
// and one drain for both), for callers that pop without HTTP: the
// simulator.
func (b *Broker) Consumer() *consume.Consumer { return b.api.Consumer() }

// Store exposes the store, for the simulator's final reads.
func (b *Broker) Store() *store.Store { return b.store }

// Spool is the broker's file buffer (nil when disabled).
func (b *Broker) Spool() *spool.Spool { return b.spool }

// Drainer replays the spool (nil when disabled).
func (b *Broker) Drainer() *spool.Drainer { return b.drainer }

// Services are the background services, for callers that step them.
func (b *Broker) Services() []background.Service { return b.services }

// Shutdown stops gracefully: it stops accepting connections, answers
// parked long polls 204, lets requests in flight finish with their contexts
// intact (a push commits or spools, and answers), then stops background
// services, finalizes the spool's active file and closes the pool. When ctx
// ends first, the remaining requests are cut as in a crash.
func (b *Broker) Shutdown(ctx context.Context) error {
	var err error
	b.stopOnce.Do(func() {
		if canary.On("shutdown-cuts-requests") {
			b.cancel() // the old order: requests lose their contexts first
		}
		b.api.Drain()
		if err = b.http.Shutdown(ctx); err != nil {
			b.log.Warn("shutdown deadline passed; cutting the requests still running", "err", err)
			_ = b.http.Close()
		}
		b.cancel()
		b.wg.Wait()
		if b.flusher != nil {
			// The open minute too: a stopped broker leaves none behind.
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := b.flusher.Close(fctx); err != nil {
				b.log.Warn("analytics: the last minutes were not written", "err", err)
			}
			cancel()
		}
		if b.mesh != nil {
			b.mesh.Close()
		}
		if b.spool != nil {
			if err := b.spool.Close(); err != nil {
				b.log.Warn("spool: finalize at shutdown failed; the file is finalized at next start", "err", err)
			}
		}
		b.closeLanes(false)
		b.pool.Close()
		b.closeOthers()
		b.probe.Close()
		b.log.Info("queen broker stopped")
	})
	return err
}

// lead is what a leader service of this broker shares with the others: the
// store, clock and log, and its passes every interval.
func (b *Broker) lead(every time.Duration) leader.Lead { return b.leadOn(b.store, every) }

// leadOn is lead on st: a shard's leaders elect and work there.
func (b *Broker) leadOn(st *store.Store, every time.Duration) leader.Lead {
	return leader.Lead{Store: st, Clock: b.opts.Clock, Log: b.log, Every: background.Every{Interval: every},
		Passes: b.passes.Hook(b.opts.LeaderPasses)}
}

// newFlusher is the analytics flusher of this broker: its id, host and
// port on each minute, the process and the pool as gauges.
func (b *Broker) newFlusher() *analytics.Flusher {
	host, _ := os.Hostname()
	pool := func() (size, idle, active int) {
		st := b.pool.Stat()
		return int(st.MaxConns()), int(st.IdleConns()), int(st.AcquiredConns())
	}
	work := func() (waiting, parked int) {
		for _, n := range b.arbiter.Stats().Waiting {
			waiting += n
		}
		return waiting, b.waker.Parked()
	}
	return &analytics.Flusher{Recorder: b.recorder, Store: b.store, Broker: b.cfg.ServerID, Hostname: host, Port: b.cfg.Port,
		Sample: analytics.ProcessSampler(pool, work), Clock: b.opts.Clock, Log: b.log}
}

// Crash stops everything at once: open connections are cut, in-flight work
// is abandoned, nothing is cleaned up. Leases it held expire on their own.
func (b *Broker) Crash() {
	b.stopOnce.Do(func() {
		// Connections first: a handler that sees its context cancelled
		// must have nobody left to answer, as after kill -9 (cancelling
		// first let a push answer an empty 200 on a connection still open).
		if b.http != nil {
			_ = b.http.Close()
		}
		if b.cancel != nil {
			b.cancel()
		}
		b.wg.Wait()
		if b.mesh != nil {
			b.mesh.Close()
		}
		if b.spool != nil {
			// As a killed process: the active file stays .tmp, the lock
			// on the directory goes.
			b.spool.Abandon()
		}
		b.closeLanes(true)
		if b.pool != nil {
			b.pool.Close()
		}
		b.closeOthers()
		if b.probe != nil {
			b.probe.Close()
		}
	})
}
