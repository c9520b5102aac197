package config

import (
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"HOSTNAME": "box"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 6632 || c.DefaultBatchSize != 1 || c.DefaultSubscriptionMode != "all" || c.DBPoolSize != 160 ||
		c.DefaultTimeout != 30*time.Second || c.MaxBodyBytes != 64<<20 || c.ServerID != "box" || c.TenancyHeader {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestParsesValues(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"PORT": "7000", "PG_DB": "a", "PG_DATABASE": "b", "DB_STATEMENT_TIMEOUT": "1500",
		"QUEEN_TENANCY_HEADER": "on", "DEFAULT_SUBSCRIPTION_MODE": "new-only", "LOG_LEVEL": "debug",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 7000 || c.PGDatabase != "b" || c.DBStatementTimeout != 1500*time.Millisecond || !c.TenancyHeader ||
		c.DefaultSubscriptionMode != "new" || c.LogLevel.String() != "DEBUG" {
		t.Fatalf("parsed: %+v", c)
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	_, err := FromEnv(env(map[string]string{
		"PORT": "http", "DB_POOL_SIZE": "0", "QUEEN_TENANCY_HEADER": "maybe", "DEFAULT_SUBSCRIPTION_MODE": "sometimes",
		"LOG_LEVEL": "loud", "POP_WAIT_BACKOFF_MULTIPLIER": "x",
		"QUEEN_PUSH_STATEMENTS": "0", "QUEEN_PUSH_BATCH_ROWS": "many", "QUEEN_SHUTDOWN_TIMEOUT_MS": "0",
		"QUEEN_BODY_READ_TIMEOUT_MS": "-5", "QUEEN_MAX_POP_BATCH": "50", "DEFAULT_BATCH_SIZE": "51",
		"QUEEN_ANALYTICS": "sometimes", "QUEEN_ANALYTICS_RETENTION_HOURS": "0", "QUEEN_ANALYTICS_MAX_QUEUES": "x",
		"QUEEN_DASHBOARD_DIR": "/nonexistent/dashboard", "STATS_INTERVAL_MS": "often", "QUEEN_MAX_POP_BYTES": "0",
	}))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, name := range []string{"PORT", "DB_POOL_SIZE", "QUEEN_TENANCY_HEADER", "DEFAULT_SUBSCRIPTION_MODE", "LOG_LEVEL",
		"POP_WAIT_BACKOFF_MULTIPLIER", "QUEEN_PUSH_STATEMENTS", "QUEEN_PUSH_BATCH_ROWS", "QUEEN_SHUTDOWN_TIMEOUT_MS",
		"QUEEN_BODY_READ_TIMEOUT_MS", "DEFAULT_BATCH_SIZE", "QUEEN_ANALYTICS", "QUEEN_ANALYTICS_RETENTION_HOURS",
		"QUEEN_ANALYTICS_MAX_QUEUES", "QUEEN_DASHBOARD_DIR", "STATS_INTERVAL_MS", "QUEEN_MAX_POP_BYTES"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

func TestMeshConfiguration(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"QUEEN_UDP_NOTIFY_PORT": "7000",
		"QUEEN_UDP_PEERS": " http://b:6633/, c ,[::1]:9", "QUEEN_SYNC_SECRET": "s"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.MeshPeers, " "); got != "b:6633 c:7000 [::1]:9" || c.MeshPort != 7000 || !c.MeshRuns() {
		t.Fatalf("legacy names: peers %q port %d runs %v", got, c.MeshPort, c.MeshRuns())
	}
	c, err = FromEnv(env(map[string]string{"QUEEN_MESH_PEERS": "b", "QUEEN_UDP_PEERS": "x", "QUEEN_SYNC_ENABLED": "false"}))
	if err != nil || c.MeshRuns() || c.MeshPeers[0] != "b:6633" {
		t.Fatalf("QUEEN_MESH_PEERS wins, sync off stops the mesh: %+v %v", c.MeshPeers, err)
	}
	if c, err := FromEnv(env(nil)); err != nil || c.MeshRuns() {
		t.Fatalf("no peers, no mesh: %v %v", c.MeshRuns(), err)
	}
	_, err = FromEnv(env(map[string]string{"QUEEN_MESH_PEERS": "b"}))
	if err == nil || !strings.Contains(err.Error(), "QUEEN_SYNC_SECRET") || !strings.Contains(err.Error(), "QUEEN_MESH_INSECURE") {
		t.Fatalf("peers with no secret must not start: %v", err)
	}
	if _, err := FromEnv(env(map[string]string{"QUEEN_MESH_PEERS": "b", "QUEEN_MESH_INSECURE": "true"})); err != nil {
		t.Fatalf("an explicit insecure mesh starts: %v", err)
	}
	_, err = FromEnv(env(map[string]string{"QUEEN_SYNC_HEARTBEAT_MS": "5000", "QUEEN_SYNC_DEAD_THRESHOLD_MS": "1000"}))
	if err == nil || !strings.Contains(err.Error(), "QUEEN_SYNC_DEAD_THRESHOLD_MS") {
		t.Fatalf("a dead threshold under the heartbeat: %v", err)
	}
}

// TestSeveralDatabaseHosts: PG_HOST names several hosts, PG_PORT one port
// for all or one per host; with more than one host only a writable server
// is taken unless PG_TARGET_SESSION_ATTRS says otherwise; DATABASE_URL
// replaces the PG_* variables.
func TestSeveralDatabaseHosts(t *testing.T) {
	for _, c := range []struct {
		env map[string]string
		dsn string
	}{
		{map[string]string{}, "host='localhost' port=5432 "},
		{map[string]string{"PG_HOST": "a,b", "PG_PORT": "6000"}, "host='a,b' port=6000 "},
		{map[string]string{"PG_HOST": "a, b", "PG_PORT": "6000,6001"}, "host='a,b' port=6000,6001 "},
		{map[string]string{"PG_HOST": "a,b", "PG_TARGET_SESSION_ATTRS": "primary"}, "target_session_attrs=primary"},
		{map[string]string{"DATABASE_URL": "postgres://u@x,y/db"}, "postgres://u@x,y/db"},
	} {
		cfg, err := FromEnv(env(c.env))
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		dsn := cfg.DSN()
		if !strings.Contains(dsn, c.dsn) {
			t.Errorf("%v: dsn %q", c.env, dsn)
		}
		several := len(cfg.hostList()) > 1 && cfg.DatabaseURL == ""
		if several && cfg.PGTargetSessionAttrs == "" && !strings.HasSuffix(dsn, " target_session_attrs=read-write") {
			t.Errorf("%v: several hosts without read-write: %q", c.env, dsn)
		}
		if !several && strings.Contains(dsn, "target_session_attrs") {
			t.Errorf("%v: one host with target_session_attrs: %q", c.env, dsn)
		}
	}
	_, err := FromEnv(env(map[string]string{"PG_HOST": "a,b,c", "PG_PORT": "1,2", "PG_TARGET_SESSION_ATTRS": "writable"}))
	if err == nil || !strings.Contains(err.Error(), "PG_PORT") || !strings.Contains(err.Error(), "PG_TARGET_SESSION_ATTRS") {
		t.Fatalf("bad host settings: %v", err)
	}
}

// The security knobs parse, and a bad one names itself at start.
func TestSecurityKnobs(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"QUEEN_METRICS_ALLOW_CIDRS": "10.0.0.0/8, ::1/128", "QUEEN_METRICS_TOKEN": "tok",
		"QUEEN_METRICS_MAX_QUEUES": "50", "QUEEN_TENANT_CLAIM": "org", "QUEEN_TENANT_TRUST_HEADER": "true", "QUEEN_MESH_MAX_PENDING": "8"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.JWT.ScrapeNets) != 2 || c.JWT.ScrapeToken != "tok" || c.MetricsMaxQueues != 50 || c.JWT.TenantClaim != "org" ||
		!c.TrustTenantHeader || c.MeshMaxPending != 8 {
		t.Fatalf("parsed: nets %v token %q max %d claim %q trust %v pending %d", c.JWT.ScrapeNets, c.JWT.ScrapeToken,
			c.MetricsMaxQueues, c.JWT.TenantClaim, c.TrustTenantHeader, c.MeshMaxPending)
	}
	d, err := FromEnv(env(nil))
	if err != nil || d.JWT.TenantClaim != "tenant" || d.MetricsMaxQueues != 1000 || d.MeshMaxPending != 32 || d.TrustTenantHeader ||
		strings.Join(d.JWT.SkipPaths, ",") != "/health,/" {
		t.Fatalf("defaults: %+v %v", d.JWT, err)
	}
	_, err = FromEnv(env(map[string]string{"QUEEN_METRICS_ALLOW_CIDRS": "10.0.0.0/8,office", "QUEEN_METRICS_MAX_QUEUES": "0",
		"QUEEN_MESH_MAX_PENDING": "none", "QUEEN_TENANT_TRUST_HEADER": "perhaps"}))
	for _, name := range []string{"QUEEN_METRICS_ALLOW_CIDRS", "QUEEN_METRICS_MAX_QUEUES", "QUEEN_MESH_MAX_PENDING", "QUEEN_TENANT_TRUST_HEADER"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

// TestHTTPEdgeKnobs: QUEEN_CORS_ORIGINS, QUEEN_HTTP_IDLE_TIMEOUT_MS and
// QUEEN_MAX_CONNECTIONS parse, default safely, and a bad value names its
// variable.
func TestHTTPEdgeKnobs(t *testing.T) {
	c, err := FromEnv(env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.CORSOrigins) != 0 || c.HTTPIdleTimeout != 60*time.Second || c.MaxConnections < 16 || c.MaxConnections > 10000 {
		t.Fatalf("defaults: cors %v idle %v max %d", c.CORSOrigins, c.HTTPIdleTimeout, c.MaxConnections)
	}
	c, err = FromEnv(env(map[string]string{"QUEEN_CORS_ORIGINS": " https://Ops.Example.com/ , http://localhost:3000,*",
		"QUEEN_HTTP_IDLE_TIMEOUT_MS": "5000", "QUEEN_MAX_CONNECTIONS": "64"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.CORSOrigins, " "); got != "https://ops.example.com http://localhost:3000 *" ||
		c.HTTPIdleTimeout != 5*time.Second || c.MaxConnections != 64 {
		t.Fatalf("parsed: cors %q idle %v max %d", got, c.HTTPIdleTimeout, c.MaxConnections)
	}
	_, err = FromEnv(env(map[string]string{"QUEEN_CORS_ORIGINS": "ops.example.com", "QUEEN_HTTP_IDLE_TIMEOUT_MS": "0",
		"QUEEN_MAX_CONNECTIONS": "0"}))
	for _, name := range []string{"QUEEN_CORS_ORIGINS", "QUEEN_HTTP_IDLE_TIMEOUT_MS", "QUEEN_MAX_CONNECTIONS"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

// TestShardsConfiguration: the shard variables are parsed once into
// Config.Shards; a bad one is a startup error naming it; none set is no
// shards.
func TestShardsConfiguration(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"QUEEN_CATALOG_URL": "postgres://c1,c2/queen",
		"QUEEN_SHARDS": "s0=postgres://a/queen;s1=postgres://b/queen", "QUEEN_PLACEMENT": "queue:orders-*=s1"}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Shards.Enabled() || c.Shards.CatalogURL != "postgres://c1,c2/queen" || len(c.Shards.Shards) != 2 || len(c.Shards.Rules) != 1 {
		t.Fatalf("shards: %+v", c.Shards)
	}
	if c, err := FromEnv(env(nil)); err != nil || c.Shards.Enabled() {
		t.Fatalf("no shards by default: %+v %v", c.Shards, err)
	}
	_, err = FromEnv(env(map[string]string{"QUEEN_CATALOG_URL": "postgres://c/queen",
		"QUEEN_SHARDS": "s0=postgres://a/queen;s0=postgres://b/queen", "QUEEN_PLACEMENT": "tenant:acme=s7", "PORT": "x"}))
	for _, w := range []string{`config: QUEEN_SHARDS: "s0": a shard named twice`, `config: QUEEN_PLACEMENT: "tenant:acme=s7"`, "PORT"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q in %v", w, err)
		}
	}
}
