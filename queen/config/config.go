// Package config parses the broker's configuration from the environment,
// once, into a plain struct. A malformed value is an error that names the
// variable; nothing else in the broker reads the environment.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queen-go/queen/queen/auth"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/shards"
)

// DefaultTenant is the tenant of every request when tenancy is off, and of a
// request that carries no x-queen-tenant header.
const DefaultTenant = "00000000-0000-0000-0000-000000000001"

// Config is everything the broker takes from its environment.
type Config struct {
	Host string // HOST, default 0.0.0.0
	Port int    // PORT, default 6632

	PGHost string // PG_HOST, default localhost; h1,h2[,h3] names several (see DSN)
	PGPort int    // PG_PORT, default 5432: every host's port
	// PGPorts is PG_PORT given as a list, one port per PG_HOST host.
	PGPorts []int
	// PGTargetSessionAttrs is PG_TARGET_SESSION_ATTRS (libpq's
	// target_session_attrs: any, read-write, primary, ...); empty means
	// read-write when more than one host is named, else any.
	PGTargetSessionAttrs string
	// DatabaseURL is DATABASE_URL: a full connection string (URL or libpq
	// keywords) that replaces every PG_* variable.
	DatabaseURL string
	// RequireSyncStandby is QUEEN_REQUIRE_SYNC_STANDBY, default false: refuse
	// to start when the primary has no synchronous standby (otherwise a
	// warning), since a failover to an asynchronous standby loses commits
	// PostgreSQL acknowledged.
	RequireSyncStandby bool
	PGUser             string // PG_USER, default postgres
	PGPassword         string // PG_PASSWORD, default postgres
	PGDatabase         string // PG_DATABASE, else PG_DB, default postgres
	PGUseSSL           bool   // PG_USE_SSL, default false
	// Shards are QUEEN_CATALOG_URL, QUEEN_SHARDS and QUEEN_PLACEMENT
	// (queen/shards); none set, the zero value: one database, as ever.
	Shards shards.Config

	DBPoolSize          int           // DB_POOL_SIZE, default 160
	DBConnectionTimeout time.Duration // DB_CONNECTION_TIMEOUT (ms), default 2000
	DBStatementTimeout  time.Duration // DB_STATEMENT_TIMEOUT (ms), default 30000
	DBLockTimeout       time.Duration // DB_LOCK_TIMEOUT (ms), default 10000

	DefaultTimeout          time.Duration // DEFAULT_TIMEOUT / POP_DEFAULT_TIMEOUT_MS (ms), default 30000
	DefaultBatchSize        int           // DEFAULT_BATCH_SIZE, default 1
	MaxPopBatch             int           // QUEEN_MAX_POP_BATCH, default 10000: the largest batch (and partitions) one pop may ask for
	MaxPopBytes             int64         // QUEEN_MAX_POP_BYTES, default 16 MiB: one pop answer's payload bytes (as written; always one message)
	DefaultSubscriptionMode string        // DEFAULT_SUBSCRIPTION_MODE: all|new, default all

	PopWaitInitial   time.Duration // POP_WAIT_INITIAL_INTERVAL_MS, default 100
	PopWaitThreshold int           // POP_WAIT_BACKOFF_THRESHOLD, default 3
	PopWaitFactor    float64       // POP_WAIT_BACKOFF_MULTIPLIER, default 2.0
	PopWaitMax       time.Duration // POP_WAIT_MAX_INTERVAL_MS, default 1000

	RetentionInterval  time.Duration // RETENTION_INTERVAL (ms), default 5000
	RetentionBatchSize int           // RETENTION_BATCH_SIZE, default 1000
	// StatsInterval is STATS_INTERVAL_MS, default 10000: how often the
	// queue-statistics leader refreshes queen.queue_stats; 0 stops it.
	StatsInterval time.Duration
	// PARTITION_CLEANUP_DAYS, default 30: empty partitions idle this long
	// are removed by the retention leader; 0 keeps them.
	PartitionCleanupDays int

	FileBufferDir           string        // FILE_BUFFER_DIR, default /var/lib/queen/buffers
	FileBufferFlush         time.Duration // FILE_BUFFER_FLUSH_MS, default 100
	FileBufferMaxBatch      int           // FILE_BUFFER_MAX_BATCH, default 100
	FileBufferEventsPerFile int           // FILE_BUFFER_EVENTS_PER_FILE, default 10000
	CacheRefreshInterval    time.Duration // QUEEN_CACHE_REFRESH_INTERVAL_MS, default 60000
	AdmissionMaintShare     float64       // QUEEN_ADMISSION_SHARE_MAINT, default 0.05
	BodyReadTimeout         time.Duration // QUEEN_BODY_READ_TIMEOUT_MS, default 30000: reading one request body
	ShutdownTimeout         time.Duration // QUEEN_SHUTDOWN_TIMEOUT_MS, default 30000: graceful stop deadline
	PushStatements          int           // QUEEN_PUSH_STATEMENTS, default 1: combined push statements in flight
	PushBatchRows           int           // QUEEN_PUSH_BATCH_ROWS, default 1000: rows in one combined push statement
	AckStatements           int           // QUEEN_ACK_STATEMENTS, default 1: combined completion (ack) statements in flight
	PopStatements           int           // QUEEN_POP_STATEMENTS, default 1: combined one-partition pop statements in flight

	// The mesh (hints between brokers): runs only when MeshEnabled and at
	// least one peer is configured.
	MeshPort        int           // QUEEN_MESH_PORT, else QUEEN_UDP_NOTIFY_PORT, default 6633
	MeshPeers       []string      // QUEEN_MESH_PEERS, else QUEEN_UDP_PEERS: host[:port], comma-separated
	MeshEnabled     bool          // QUEEN_SYNC_ENABLED, default true
	MeshSecret      string        // QUEEN_SYNC_SECRET: HMAC key of the HELLO; required with peers
	MeshInsecure    bool          // QUEEN_MESH_INSECURE, default false: allow peers with no secret
	MeshHeartbeat   time.Duration // QUEEN_SYNC_HEARTBEAT_MS, default 1000
	MeshDeadAfter   time.Duration // QUEEN_SYNC_DEAD_THRESHOLD_MS, default 5000
	MeshQueueFrames int           // QUEEN_MESH_QUEUE, default 1024: frames waiting per peer before drops
	MeshMaxPending  int           // QUEEN_MESH_MAX_PENDING, default 32: inbound connections still in their handshake
	// MetricsMaxQueues (QUEEN_METRICS_MAX_QUEUES, default 1000) bounds the
	// (tenant, queue) label pairs of the per-queue metric families.
	MetricsMaxQueues int
	// Recorded analytics (SPEC "Recorded analytics").
	Analytics          bool          // QUEEN_ANALYTICS, default true: record per-minute buckets
	AnalyticsRetention time.Duration // QUEEN_ANALYTICS_RETENTION_HOURS, default 168 (7 days)
	AnalyticsMaxQueues int           // QUEEN_ANALYTICS_MAX_QUEUES, default 10000: queue rows per broker per minute
	DashboardDir       string        // QUEEN_DASHBOARD_DIR: serve another static dashboard at /dashboard-ext (history-mode fallback)

	// Timers, KV and the sweeper.
	Sweeper               bool          // QUEEN_SWEEPER, default true: fire timers and prune KV here
	SweeperMinSleep       time.Duration // QUEEN_SWEEPER_MIN_SLEEP_MS, default 5
	SweeperMaxSleep       time.Duration // QUEEN_SWEEPER_MAX_SLEEP_MS, default 1000
	SweeperIdleMaxSleep   time.Duration // QUEEN_SWEEPER_IDLE_MAX_SLEEP_MS, default 1000 (see SPEC)
	SweeperLease          time.Duration // QUEEN_SWEEPER_LEASE_MS, default 30000
	SweeperClaimBatch     int           // QUEEN_SWEEPER_CLAIM_BATCH, default 200
	SweeperMaxAttempts    int           // QUEEN_SWEEPER_MAX_ATTEMPTS, default 5: permanent fire failures before a timer is failed
	SweeperRetryBase      time.Duration // QUEEN_SWEEPER_RETRY_BASE_MS, default 1000: backoff after a timer's first fire failure, doubling
	TimersMaxPayloadBytes int           // QUEEN_TIMERS_MAX_PAYLOAD_BYTES, default 1 MiB
	TimersMaxHorizon      time.Duration // QUEEN_TIMERS_MAX_HORIZON_S, default 90 days
	TimersMaxOpsPerCall   int           // QUEEN_TIMERS_MAX_OPS_PER_CALL, default 256
	KVMaxValueBytes       int           // QUEEN_KV_MAX_VALUE_BYTES, default 65536
	KVMaxKeyBytes         int           // QUEEN_KV_MAX_KEY_BYTES, default 512
	KVMaxOpsPerCall       int           // QUEEN_KV_MAX_OPS_PER_CALL, default 256
	KVMaxKeysPerCall      int           // QUEEN_KV_MAX_KEYS_PER_CALL, default 1024
	KVMaxReadBytes        int           // QUEEN_KV_MAX_READ_BYTES, default 4 MiB
	KVPrefixLimit         int           // QUEEN_KV_PREFIX_LIMIT, default 1000: getPrefix's largest limit

	// JWT (Queen's JWT_* variables): every route but the public ones needs
	// a bearer token when JWTEnabled.
	JWTEnabled bool        // JWT_ENABLED, default false
	JWT        auth.Config // JWT_ALGORITHM (HS256), JWT_SECRET, JWT_PUBLIC_KEY, JWT_JWKS_URL, ...

	// EncryptionKey is QUEEN_ENCRYPTION_KEY (64 hex characters): the
	// AES-256-GCM key of queues with encryptionEnabled; empty: none.
	EncryptionKey string
	// EncryptionKeysPrevious is QUEEN_ENCRYPTION_KEYS_PREVIOUS, a comma
	// list of keys that still open what they sealed but never seal: a key
	// rotation keeps the old key here until nothing sealed under it is
	// left (messages, timers, spool files).
	EncryptionKeysPrevious []string

	// Ignored are Queen's variables that are set but do nothing here, so
	// the broker can say so at startup.
	Ignored []string

	ServerID      string // QUEEN_SERVER_ID, default $HOSTNAME, else queen-<8hex>
	TenancyHeader bool   // QUEEN_TENANCY_HEADER, default false
	// TrustTenantHeader (QUEEN_TENANT_TRUST_HEADER, default false): with
	// JWT on, take the tenant from x-queen-tenant rather than from the
	// token's claim; for a gateway that strips and sets the header.
	TrustTenantHeader bool
	MaxBodyBytes      int64      // QUEEN_MAX_BODY_BYTES, default 64 MiB
	ApplySchema       bool       // QUEEN_APPLY_SCHEMA, default true
	LogLevel          slog.Level // LOG_LEVEL: debug|info|warn|error, default info
	LogJSON           bool       // QUEEN_LOG_JSON, default false

	// CORSOrigins (QUEEN_CORS_ORIGINS, comma-separated) are the browser
	// origins allowed to call the API cross-origin; "*" only when listed.
	// Empty, the default: no CORS headers, and cross-site browser requests
	// are refused.
	CORSOrigins []string
	// HTTPIdleTimeout (QUEEN_HTTP_IDLE_TIMEOUT_MS, default 60000) closes a
	// keep-alive connection idle this long.
	HTTPIdleTimeout time.Duration
	// MaxConnections (QUEEN_MAX_CONNECTIONS) bounds open HTTP connections;
	// default min(10000, RLIMIT_NOFILE/2). At the bound the oldest idle
	// connection is closed to make room; with none idle the new one is.
	MaxConnections int
}

// Default returns the configuration with every default applied.
func Default() Config {
	return Config{
		Host: "0.0.0.0", Port: 6632,
		PGHost: "localhost", PGPort: 5432, PGUser: "postgres", PGPassword: "postgres", PGDatabase: "postgres",
		DBPoolSize:              160,
		DBConnectionTimeout:     2 * time.Second,
		DBStatementTimeout:      30 * time.Second,
		DBLockTimeout:           10 * time.Second,
		DefaultTimeout:          30 * time.Second,
		DefaultBatchSize:        1,
		MaxPopBatch:             10000,
		MaxPopBytes:             16 << 20,
		DefaultSubscriptionMode: "all",
		PopWaitInitial:          100 * time.Millisecond,
		PopWaitThreshold:        3,
		PopWaitFactor:           2.0,
		PopWaitMax:              time.Second,
		RetentionInterval:       5 * time.Second,
		StatsInterval:           10 * time.Second,
		RetentionBatchSize:      1000,
		MaxBodyBytes:            64 << 20,
		FileBufferDir:           "/var/lib/queen/buffers",
		FileBufferFlush:         100 * time.Millisecond,
		FileBufferMaxBatch:      100,
		FileBufferEventsPerFile: 10000,
		CacheRefreshInterval:    60 * time.Second,
		AdmissionMaintShare:     0.05,
		BodyReadTimeout:         30 * time.Second,
		ShutdownTimeout:         30 * time.Second,
		PushStatements:          1,
		PushBatchRows:           1000,
		AckStatements:           1,
		PopStatements:           1,
		MeshPort:                6633,
		MeshEnabled:             true,
		MeshHeartbeat:           time.Second,
		MeshDeadAfter:           5 * time.Second,
		MeshQueueFrames:         1024,
		MeshMaxPending:          32,
		MetricsMaxQueues:        1000,
		Analytics:               true,
		AnalyticsRetention:      168 * time.Hour,
		AnalyticsMaxQueues:      10000,
		PartitionCleanupDays:    30,
		Sweeper:                 true,
		SweeperMinSleep:         5 * time.Millisecond,
		SweeperMaxSleep:         time.Second,
		SweeperIdleMaxSleep:     time.Second,
		SweeperLease:            30 * time.Second,
		SweeperClaimBatch:       200,
		SweeperMaxAttempts:      5,
		SweeperRetryBase:        time.Second,
		TimersMaxPayloadBytes:   1 << 20,
		TimersMaxHorizon:        90 * 24 * time.Hour,
		TimersMaxOpsPerCall:     256,
		KVMaxValueBytes:         65536,
		KVMaxKeyBytes:           512,
		KVMaxOpsPerCall:         256,
		KVMaxKeysPerCall:        1024,
		KVMaxReadBytes:          4 << 20,
		KVPrefixLimit:           1000,
		JWT: auth.Config{Algorithm: "HS256", JWKSRefresh: time.Hour, JWKSTimeout: 5 * time.Second, ClockSkew: 30 * time.Second,
			SkipPaths: []string{"/health", "/"}, RolesClaim: "role", RolesArrayClaim: "roles", TenantClaim: "tenant",
			RoleAdmin: "admin", RoleReadWrite: "read-write", RoleReadOnly: "read-only", RoleWriteOnly: "write-only"},
		ApplySchema:     true,
		LogLevel:        slog.LevelInfo,
		HTTPIdleTimeout: 60 * time.Second,
		MaxConnections:  DefaultMaxConnections(),
	}
}

// DefaultMaxConnections is min(10000, half the process's open-file limit):
// the other half stays for the database pool, the spool and the mesh, so
// idle HTTP clients cannot starve them of descriptors.
func DefaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 10000
	}
	return int(max(16, min(10000, lim.Cur/2)))
}

// FromEnv parses the configuration. getenv is os.Getenv in production; tests
// pass a map lookup. Every malformed variable is reported, not just the first.
//
// The groups are read in a fixed order, and the order matters twice: errors
// are reported in it, and a few variables read one parsed before them (the
// mesh peers take QUEEN_MESH_PORT's port; the checks see everything).
func FromEnv(getenv func(string) string) (Config, error) {
	c := Default()
	p := parser{getenv: getenv}
	p.str("HOST", &c.Host)
	p.intRange("PORT", &c.Port, 1, 65535)
	p.postgres(&c)
	p.shards(&c)
	p.pop(&c)
	p.housekeeping(&c)
	p.fileBuffer(&c)
	p.engine(&c)
	p.mesh(&c)
	p.observability(&c)
	p.sweeper(&c)
	p.timers(&c)
	p.kv(&c)
	p.jwt(&c)
	p.encryptionKey(&c)
	p.previousKeys(&c)
	p.ignored(&c)
	p.serving(&c)
	p.defaultServerID(&c)
	p.check(&c)
	return c, errors.Join(p.errs...)
}

// postgres reads where the database is, how to log in and the pool's
// limits. PG_DATABASE is read after PG_DB, so it wins when both are set.
func (p *parser) postgres(c *Config) {
	p.str("PG_HOST", &c.PGHost)
	p.ports("PG_PORT", c)
	p.str("PG_TARGET_SESSION_ATTRS", &c.PGTargetSessionAttrs)
	p.str("DATABASE_URL", &c.DatabaseURL)
	p.boolean("QUEEN_REQUIRE_SYNC_STANDBY", &c.RequireSyncStandby)
	p.str("PG_USER", &c.PGUser)
	p.str("PG_PASSWORD", &c.PGPassword)
	p.str("PG_DB", &c.PGDatabase)
	p.str("PG_DATABASE", &c.PGDatabase)
	p.boolean("PG_USE_SSL", &c.PGUseSSL)
	p.intRange("DB_POOL_SIZE", &c.DBPoolSize, 1, 10000)
	p.millis("DB_CONNECTION_TIMEOUT", &c.DBConnectionTimeout)
	p.millis("DB_STATEMENT_TIMEOUT", &c.DBStatementTimeout)
	p.millis("DB_LOCK_TIMEOUT", &c.DBLockTimeout)
}

// shards reads the shard configuration; queen/shards parses and checks it
// and names the variable and part of each bad value.
func (p *parser) shards(c *Config) {
	cfg, err := shards.Parse(p.getenv(shards.CatalogVar), p.getenv(shards.ShardsVar), p.getenv(shards.PlacementVar))
	if err != nil {
		for _, e := range unjoin(err) {
			p.errs = append(p.errs, fmt.Errorf("config: %w", e))
		}
		return
	}
	c.Shards = cfg
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// pop reads a pop's defaults and bounds and how a waiting pop backs off.
// DEFAULT_TIMEOUT is read after POP_DEFAULT_TIMEOUT_MS, so it wins.
func (p *parser) pop(c *Config) {
	p.millis("POP_DEFAULT_TIMEOUT_MS", &c.DefaultTimeout)
	p.millis("DEFAULT_TIMEOUT", &c.DefaultTimeout)
	p.intRange("DEFAULT_BATCH_SIZE", &c.DefaultBatchSize, 1, 100000)
	p.intRange("QUEEN_MAX_POP_BATCH", &c.MaxPopBatch, 1, 1000000)
	var popBytes int
	if p.intRange("QUEEN_MAX_POP_BYTES", &popBytes, 1, 1<<40) {
		c.MaxPopBytes = int64(popBytes)
	}
	p.subscriptionMode("DEFAULT_SUBSCRIPTION_MODE", &c.DefaultSubscriptionMode)
	p.millis("POP_WAIT_INITIAL_INTERVAL_MS", &c.PopWaitInitial)
	p.intRange("POP_WAIT_BACKOFF_THRESHOLD", &c.PopWaitThreshold, 0, 1000)
	p.float("POP_WAIT_BACKOFF_MULTIPLIER", &c.PopWaitFactor, 1, 100)
	p.millis("POP_WAIT_MAX_INTERVAL_MS", &c.PopWaitMax)
}

// subscriptionMode reads a subscription mode, all or new, in any of the
// spellings NormalizeSubscriptionMode accepts.
func (p *parser) subscriptionMode(name string, dst *string) {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return
	}
	if m, ok := NormalizeSubscriptionMode(v); ok {
		*dst = m
	} else {
		p.fail(name, v, "want all or new")
	}
}

// housekeeping reads how often retention and statistics run and how much
// they do at a time.
func (p *parser) housekeeping(c *Config) {
	p.millis("RETENTION_INTERVAL", &c.RetentionInterval)
	p.millis("STATS_INTERVAL_MS", &c.StatsInterval)
	p.intRange("RETENTION_BATCH_SIZE", &c.RetentionBatchSize, 1, 1000000)
	p.intRange("PARTITION_CLEANUP_DAYS", &c.PartitionCleanupDays, 0, 36500)
}

// fileBuffer reads the FILE_BUFFER_* variables.
func (p *parser) fileBuffer(c *Config) {
	p.str("FILE_BUFFER_DIR", &c.FileBufferDir)
	p.millis("FILE_BUFFER_FLUSH_MS", &c.FileBufferFlush)
	p.intRange("FILE_BUFFER_MAX_BATCH", &c.FileBufferMaxBatch, 1, 100000)
	p.intRange("FILE_BUFFER_EVENTS_PER_FILE", &c.FileBufferEventsPerFile, 1, 10000000)
}

// engine reads the broker's internal tuning: caches, admission, shutdown,
// body reads and how pushes and acks are cut into statements.
func (p *parser) engine(c *Config) {
	p.millis("QUEEN_CACHE_REFRESH_INTERVAL_MS", &c.CacheRefreshInterval)
	p.float("QUEEN_ADMISSION_SHARE_MAINT", &c.AdmissionMaintShare, 0, 1)
	p.millis("QUEEN_SHUTDOWN_TIMEOUT_MS", &c.ShutdownTimeout)
	p.millis("QUEEN_BODY_READ_TIMEOUT_MS", &c.BodyReadTimeout)
	p.intRange("QUEEN_PUSH_STATEMENTS", &c.PushStatements, 1, 1000)
	p.intRange("QUEEN_PUSH_BATCH_ROWS", &c.PushBatchRows, 1, 100000)
	p.intRange("QUEEN_ACK_STATEMENTS", &c.AckStatements, 1, 1000)
	p.intRange("QUEEN_POP_STATEMENTS", &c.PopStatements, 1, 1000)
}

// mesh reads the broker mesh. The port is read first because a peer named
// without one takes it; the QUEEN_MESH_* names win over the older
// QUEEN_UDP_* ones.
func (p *parser) mesh(c *Config) {
	p.intRange("QUEEN_UDP_NOTIFY_PORT", &c.MeshPort, 1, 65535)
	p.intRange("QUEEN_MESH_PORT", &c.MeshPort, 1, 65535)
	peers := p.getenv("QUEEN_MESH_PEERS")
	if strings.TrimSpace(peers) == "" {
		peers = p.getenv("QUEEN_UDP_PEERS")
	}
	c.MeshPeers = parsePeers(peers, c.MeshPort)
	p.boolean("QUEEN_SYNC_ENABLED", &c.MeshEnabled)
	p.str("QUEEN_SYNC_SECRET", &c.MeshSecret)
	p.boolean("QUEEN_MESH_INSECURE", &c.MeshInsecure)
	p.millis("QUEEN_SYNC_HEARTBEAT_MS", &c.MeshHeartbeat)
	p.millis("QUEEN_SYNC_DEAD_THRESHOLD_MS", &c.MeshDeadAfter)
	p.intRange("QUEEN_MESH_QUEUE", &c.MeshQueueFrames, 1, 1<<20)
	p.intRange("QUEEN_MESH_MAX_PENDING", &c.MeshMaxPending, 1, 1<<16)
}

// observability reads the metrics, analytics and dashboard variables.
func (p *parser) observability(c *Config) {
	p.intRange("QUEEN_METRICS_MAX_QUEUES", &c.MetricsMaxQueues, 1, 1<<20)
	p.boolean("QUEEN_ANALYTICS", &c.Analytics)
	hours := int(c.AnalyticsRetention / time.Hour)
	if p.intRange("QUEEN_ANALYTICS_RETENTION_HOURS", &hours, 1, 24*3660) {
		c.AnalyticsRetention = time.Duration(hours) * time.Hour
	}
	p.intRange("QUEEN_ANALYTICS_MAX_QUEUES", &c.AnalyticsMaxQueues, 1, 1<<20)
	p.dashboardDir("QUEEN_DASHBOARD_DIR", &c.DashboardDir)
}

// dashboardDir reads a directory to serve the dashboard from. It is
// checked now, so a wrong path fails at startup rather than as a 404.
func (p *parser) dashboardDir(name string, dst *string) {
	p.str(name, dst)
	if *dst == "" {
		return
	}
	if st, err := os.Stat(filepath.Join(*dst, "index.html")); err != nil || st.IsDir() {
		p.fail(name, *dst, "is not a dashboard build: it holds no index.html")
	}
}

// sweeper reads the QUEEN_SWEEPER_* variables.
func (p *parser) sweeper(c *Config) {
	p.boolean("QUEEN_SWEEPER", &c.Sweeper)
	p.millis("QUEEN_SWEEPER_MIN_SLEEP_MS", &c.SweeperMinSleep)
	p.millis("QUEEN_SWEEPER_MAX_SLEEP_MS", &c.SweeperMaxSleep)
	p.millis("QUEEN_SWEEPER_IDLE_MAX_SLEEP_MS", &c.SweeperIdleMaxSleep)
	p.millis("QUEEN_SWEEPER_LEASE_MS", &c.SweeperLease)
	p.intRange("QUEEN_SWEEPER_CLAIM_BATCH", &c.SweeperClaimBatch, 1, 100000)
	p.intRange("QUEEN_SWEEPER_MAX_ATTEMPTS", &c.SweeperMaxAttempts, 1, 1000)
	p.millis("QUEEN_SWEEPER_RETRY_BASE_MS", &c.SweeperRetryBase)
}

// timers reads the QUEEN_TIMERS_* limits.
func (p *parser) timers(c *Config) {
	p.intRange("QUEEN_TIMERS_MAX_PAYLOAD_BYTES", &c.TimersMaxPayloadBytes, 1, 1<<30)
	var horizon int
	if p.intRange("QUEEN_TIMERS_MAX_HORIZON_S", &horizon, 1, 100*365*24*3600) {
		c.TimersMaxHorizon = time.Duration(horizon) * time.Second
	}
	p.intRange("QUEEN_TIMERS_MAX_OPS_PER_CALL", &c.TimersMaxOpsPerCall, 1, 100000)
}

// kv reads the QUEEN_KV_* limits. A key may not exceed limits.MaxKVKeyBytes,
// the most the store's index holds.
func (p *parser) kv(c *Config) {
	p.intRange("QUEEN_KV_MAX_VALUE_BYTES", &c.KVMaxValueBytes, 1, 1<<30)
	p.intRange("QUEEN_KV_MAX_KEY_BYTES", &c.KVMaxKeyBytes, 1, limits.MaxKVKeyBytes)
	p.intRange("QUEEN_KV_MAX_OPS_PER_CALL", &c.KVMaxOpsPerCall, 1, 100000)
	p.intRange("QUEEN_KV_MAX_KEYS_PER_CALL", &c.KVMaxKeysPerCall, 1, 1000000)
	p.intRange("QUEEN_KV_MAX_READ_BYTES", &c.KVMaxReadBytes, 1, 1<<30)
	p.intRange("QUEEN_KV_PREFIX_LIMIT", &c.KVPrefixLimit, 1, 1000000)
}

// encryptionKey reads QUEEN_ENCRYPTION_KEY, the key that seals. An error
// never shows the key: it is a secret.
func (p *parser) encryptionKey(c *Config) {
	v := strings.TrimSpace(p.getenv("QUEEN_ENCRYPTION_KEY"))
	if v == "" {
		return
	}
	if _, err := crypt.New(v); err != nil {
		p.fail("QUEEN_ENCRYPTION_KEY", "(hidden)", err.Error())
	} else {
		c.EncryptionKey = v
	}
}

// previousKeys reads QUEEN_ENCRYPTION_KEYS_PREVIOUS, the retired keys that
// still open what they sealed. They only make sense beside a current key,
// so it must be read after QUEEN_ENCRYPTION_KEY.
func (p *parser) previousKeys(c *Config) {
	v := strings.TrimSpace(p.getenv("QUEEN_ENCRYPTION_KEYS_PREVIOUS"))
	if v == "" {
		return
	}
	for _, k := range strings.Split(v, ",") {
		c.EncryptionKeysPrevious = append(c.EncryptionKeysPrevious, strings.TrimSpace(k))
	}
	// A placeholder sealing key: this checks only the previous keys.
	switch _, err := crypt.New(strings.Repeat("0", 64), c.EncryptionKeysPrevious...); {
	case err != nil:
		p.fail("QUEEN_ENCRYPTION_KEYS_PREVIOUS", "(hidden)", err.Error())
	case c.EncryptionKey == "":
		p.fail("QUEEN_ENCRYPTION_KEYS_PREVIOUS", "(hidden)", "needs QUEEN_ENCRYPTION_KEY (the key that seals)")
	}
}

// ignored records which of ignoredVars are set.
func (p *parser) ignored(c *Config) {
	for _, name := range ignoredVars {
		if strings.TrimSpace(p.getenv(name)) != "" {
			c.Ignored = append(c.Ignored, name)
		}
	}
}

// serving reads the broker's identity, tenancy, HTTP serving and logging.
func (p *parser) serving(c *Config) {
	p.str("QUEEN_SERVER_ID", &c.ServerID)
	p.boolean("QUEEN_TENANCY_HEADER", &c.TenancyHeader)
	p.boolean("QUEEN_TENANT_TRUST_HEADER", &c.TrustTenantHeader)
	var body int
	if p.intRange("QUEEN_MAX_BODY_BYTES", &body, 1, 1<<40) {
		c.MaxBodyBytes = int64(body)
	}
	p.boolean("QUEEN_APPLY_SCHEMA", &c.ApplySchema)
	p.corsOrigins("QUEEN_CORS_ORIGINS", &c.CORSOrigins)
	p.millis("QUEEN_HTTP_IDLE_TIMEOUT_MS", &c.HTTPIdleTimeout)
	p.intRange("QUEEN_MAX_CONNECTIONS", &c.MaxConnections, 1, 1<<24)
	p.boolean("QUEEN_LOG_JSON", &c.LogJSON)
	p.logLevel("LOG_LEVEL", &c.LogLevel)
}

// logLevel reads a slog level: debug, info, warn or error.
func (p *parser) logLevel(name string, dst *slog.Level) {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(v)); err != nil {
		p.fail(name, v, "want debug, info, warn or error")
	} else {
		*dst = lvl
	}
}

// defaultServerID names a broker that QUEEN_SERVER_ID left unnamed: after
// the host, which is stable across restarts, else a random name.
func (p *parser) defaultServerID(c *Config) {
	if c.ServerID == "" {
		c.ServerID = p.getenv("HOSTNAME")
	}
	if c.ServerID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ServerID = "queen-" + hex.EncodeToString(b[:])
	}
}

// check reports values that are each well formed but make no sense, alone
// or together. It runs after everything is read, since a check may span
// variables from several groups.
func (p *parser) check(c *Config) {
	p.positive("FILE_BUFFER_FLUSH_MS", c.FileBufferFlush)
	p.positive("QUEEN_CACHE_REFRESH_INTERVAL_MS", c.CacheRefreshInterval)
	p.positive("QUEEN_BODY_READ_TIMEOUT_MS", c.BodyReadTimeout)
	p.positive("QUEEN_HTTP_IDLE_TIMEOUT_MS", c.HTTPIdleTimeout)
	p.positive("QUEEN_SHUTDOWN_TIMEOUT_MS", c.ShutdownTimeout)
	if c.DefaultBatchSize > c.MaxPopBatch {
		p.fail("DEFAULT_BATCH_SIZE", p.getenv("DEFAULT_BATCH_SIZE"), fmt.Sprintf("must not exceed QUEEN_MAX_POP_BATCH (%d)", c.MaxPopBatch))
	}
	p.positive("DB_CONNECTION_TIMEOUT", c.DBConnectionTimeout)
	if c.MeshRuns() && c.MeshSecret == "" && !c.MeshInsecure {
		p.fail("QUEEN_SYNC_SECRET", "", "peers are configured (QUEEN_MESH_PEERS) but no secret: set one, "+
			"byte-identical on every broker, or QUEEN_MESH_INSECURE=true to run the mesh open")
	}
	if c.SweeperMaxSleep <= 0 || c.SweeperMinSleep > c.SweeperMaxSleep {
		p.fail("QUEEN_SWEEPER_MAX_SLEEP_MS", p.getenv("QUEEN_SWEEPER_MAX_SLEEP_MS"), "must be positive and at least QUEEN_SWEEPER_MIN_SLEEP_MS")
	}
	if n := len(c.hostList()); len(c.PGPorts) > 1 && len(c.PGPorts) != n {
		p.fail("PG_PORT", p.getenv("PG_PORT"), fmt.Sprintf("%d ports for %d PG_HOST hosts: give one port, or one per host", len(c.PGPorts), n))
	}
	if !validSessionAttrs[c.PGTargetSessionAttrs] {
		p.fail("PG_TARGET_SESSION_ATTRS", c.PGTargetSessionAttrs, "not one of any, read-write, read-only, primary, standby, prefer-standby")
	}
	p.positive("QUEEN_SWEEPER_LEASE_MS", c.SweeperLease)
	if c.MeshHeartbeat <= 0 || c.MeshDeadAfter <= c.MeshHeartbeat {
		p.fail("QUEEN_SYNC_DEAD_THRESHOLD_MS", p.getenv("QUEEN_SYNC_DEAD_THRESHOLD_MS"),
			"must exceed a positive QUEEN_SYNC_HEARTBEAT_MS")
	}
}

// positive reports a duration that is zero: millis accepts 0, but these
// durations are intervals or deadlines that 0 would break.
func (p *parser) positive(name string, d time.Duration) {
	if d <= 0 {
		p.fail(name, p.getenv(name), "must be positive")
	}
}

// ignoredVars are Queen variables this broker accepts and does nothing
// with: each set one is named in a startup warning.
var ignoredVars = []string{"NUM_WORKERS", "EVICTION_INTERVAL", "EVICTION_BATCH_SIZE",
	"METRICS_RETENTION_DAYS", "METRICS_FLUSH_MS", "QUEEN_HOTLIST", "QUEEN_KV_TRUSTED_PROXY",
	"PG_SSL_REJECT_UNAUTHORIZED", "DB_IDLE_TIMEOUT"}

// jwt reads the JWT_* variables.
func (p *parser) jwt(c *Config) {
	p.boolean("JWT_ENABLED", &c.JWTEnabled)
	j := &c.JWT
	p.str("JWT_ALGORITHM", &j.Algorithm)
	p.str("JWT_SECRET", &j.Secret)
	p.str("JWT_PUBLIC_KEY", &j.PublicKeyPEM)
	j.PublicKeyPEM = strings.ReplaceAll(j.PublicKeyPEM, `\n`, "\n") // a PEM in one env line
	p.str("JWT_JWKS_URL", &j.JWKSURL)
	var secs int
	if p.intRange("JWT_JWKS_REFRESH_INTERVAL", &secs, 1, 86400*365) {
		j.JWKSRefresh = time.Duration(secs) * time.Second
	}
	p.millis("JWT_JWKS_TIMEOUT_MS", &j.JWKSTimeout)
	p.str("JWT_ISSUER", &j.Issuer)
	p.str("JWT_AUDIENCE", &j.Audience)
	if p.intRange("JWT_CLOCK_SKEW", &secs, 0, 86400) {
		j.ClockSkew = time.Duration(secs) * time.Second
	}
	if v := p.getenv("JWT_SKIP_PATHS"); v != "" {
		j.SkipPaths = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				j.SkipPaths = append(j.SkipPaths, s)
			}
		}
	}
	p.str("JWT_ROLES_CLAIM", &j.RolesClaim)
	p.str("JWT_ROLES_ARRAY_CLAIM", &j.RolesArrayClaim)
	p.str("JWT_ROLE_ADMIN", &j.RoleAdmin)
	p.str("JWT_ROLE_READ_WRITE", &j.RoleReadWrite)
	p.str("JWT_ROLE_READ_ONLY", &j.RoleReadOnly)
	p.str("JWT_ROLE_WRITE_ONLY", &j.RoleWriteOnly)
	p.str("QUEEN_TENANT_CLAIM", &j.TenantClaim)
	p.str("QUEEN_METRICS_TOKEN", &j.ScrapeToken)
	for _, v := range strings.Split(p.getenv("QUEEN_METRICS_ALLOW_CIDRS"), ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		n, err := netip.ParsePrefix(v)
		if err != nil {
			p.fail("QUEEN_METRICS_ALLOW_CIDRS", v, "want CIDR networks, comma-separated (10.0.0.0/8,::1/128)")
			continue
		}
		j.ScrapeNets = append(j.ScrapeNets, n.Masked())
	}
}

// MeshRuns reports whether this broker joins a mesh: sync enabled and at
// least one peer.
func (c Config) MeshRuns() bool { return c.MeshEnabled && len(c.MeshPeers) > 0 }

// parsePeers splits a peer list: comma-separated host[:port], an
// http(s):// prefix and a trailing slash tolerated, port defaulting to the
// mesh port.
func parsePeers(v string, port int) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		p = strings.TrimPrefix(strings.TrimPrefix(p, "http://"), "https://")
		p = strings.TrimSuffix(p, "/")
		if p == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(p); err != nil {
			p = net.JoinHostPort(strings.Trim(p, "[]"), strconv.Itoa(port))
		}
		out = append(out, p)
	}
	return out
}

// NormalizeSubscriptionMode maps the accepted spellings to all or new.
func NormalizeSubscriptionMode(v string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "all":
		return "all", true
	case "new", "new-only", "new_only", "newonly":
		return "new", true
	}
	return "", false
}

// DSN renders the PostgreSQL connection string: DATABASE_URL as given, or
// the PG_* variables. Several hosts are tried in order (libpq's multi-host
// rule); with more than one, only a read-write server is taken unless
// PG_TARGET_SESSION_ATTRS says otherwise, so the broker follows a failover
// to whichever host was promoted.
func (c Config) DSN() string {
	if c.DatabaseURL != "" {
		return c.DatabaseURL
	}
	ssl := "disable"
	if c.PGUseSSL {
		ssl = "require"
	}
	ports := fmt.Sprint(c.PGPort)
	if len(c.PGPorts) > 1 {
		ps := make([]string, len(c.PGPorts))
		for i, n := range c.PGPorts {
			ps[i] = fmt.Sprint(n)
		}
		ports = strings.Join(ps, ",")
	}
	dsn := fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=%s",
		quote(strings.Join(c.hostList(), ",")), ports, quote(c.PGUser), quote(c.PGPassword), quote(c.PGDatabase), ssl)
	if attrs := c.sessionAttrs(); attrs != "" {
		dsn += " target_session_attrs=" + attrs
	}
	return dsn
}

func (c Config) hostList() []string {
	var out []string
	for _, h := range strings.Split(c.PGHost, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// sessionAttrs is the target_session_attrs the PG_* connection string
// carries: the configured one, else read-write for several hosts.
func (c Config) sessionAttrs() string {
	if c.PGTargetSessionAttrs != "" {
		return c.PGTargetSessionAttrs
	}
	if len(c.hostList()) > 1 {
		return "read-write"
	}
	return ""
}

var validSessionAttrs = map[string]bool{"": true, "any": true, "read-write": true, "read-only": true,
	"primary": true, "standby": true, "prefer-standby": true}

// Addr is the HTTP listen address.
func (c Config) Addr() string { return fmt.Sprintf("%s:%d", c.Host, c.Port) }

func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) fail(name, val, why string) {
	p.errs = append(p.errs, fmt.Errorf("config: %s=%q: %s", name, val, why))
}

func (p *parser) str(name string, dst *string) {
	if v := p.getenv(name); v != "" {
		*dst = v
	}
}

func (p *parser) intRange(name string, dst *int, lo, hi int) bool {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.fail(name, v, "not an integer")
		return false
	}
	if n < lo || n > hi {
		p.fail(name, v, fmt.Sprintf("out of range [%d, %d]", lo, hi))
		return false
	}
	*dst = n
	return true
}

// ports reads PG_PORT: one port for every host, or a comma list of one
// per host.
func (p *parser) ports(name string, c *Config) {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return
	}
	var ports []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 65535 {
			p.fail(name, v, "not a port (1-65535) or a comma list of ports")
			return
		}
		ports = append(ports, n)
	}
	c.PGPort = ports[0]
	if len(ports) > 1 {
		c.PGPorts = ports
	}
}

// corsOrigins reads a comma list of browser origins (scheme://host[:port],
// as a browser sends them in Origin), or "*".
func (p *parser) corsOrigins(name string, dst *[]string) {
	for _, v := range strings.Split(p.getenv(name), ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if v != "*" {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
				u.RawQuery != "" || u.Fragment != "" || u.User != nil {
				p.fail(name, v, "want origins scheme://host[:port], comma-separated (https://ops.example.com), or *")
				continue
			}
			v = strings.ToLower(u.Scheme + "://" + u.Host)
		}
		*dst = append(*dst, v)
	}
}

func (p *parser) millis(name string, dst *time.Duration) {
	var n int
	if p.intRange(name, &n, 0, 1<<31-1) {
		*dst = time.Duration(n) * time.Millisecond
	}
}

func (p *parser) float(name string, dst *float64, lo, hi float64) {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < lo || f > hi {
		p.fail(name, v, fmt.Sprintf("want a number in [%g, %g]", lo, hi))
		return
	}
	*dst = f
}

func (p *parser) boolean(name string, dst *bool) {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return
	}
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		*dst = true
	case "false", "0", "no", "off":
		*dst = false
	default:
		p.fail(name, v, "want true/false, 1/0, yes/no or on/off")
	}
}
