// Package httpapi serves Queen MQ's HTTP API over a store.Store.
//
// It owns request parsing, validation and response shapes; it holds no SQL.
// Bad input answers 4xx with {"error": "..."} naming the field and writes
// nothing; an unreachable database answers 503, never 4xx.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/analytics"
	"github.com/queen-go/queen/queen/auth"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/dashboard"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/maintenance"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/outages"
	"github.com/queen-go/queen/queen/passes"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/waker"
	"github.com/queen-go/queen/queen/writes"
)

// Version is reported by /health.
const Version = "0.1.0"

// Server holds the handlers' dependencies.
type Server struct {
	cfg config.Config
	// plane is the one database's store, names, write policy, push path
	// and consumer (with shards: the default shard's); router is nil
	// without shards, else it picks each queue's plane (planeFor).
	plane
	router  *router
	moves   Moves
	spool   *spool.Spool
	drainer *spool.Drainer
	maint   *maintenance.State
	arbiter *admission.Arbiter
	clock   clock.Clock
	wake    *waker.Hub
	peers   Peers
	ids     *ids.Source
	log     *slog.Logger
	started time.Time
	stats   counters
	// sharedState reports the mesh; nil when there is none.
	sharedState func() any
	outages     *outages.Record
	passes      *passes.Record
	// timerHint tells the local sweeper a timer is due in d; nil: none.
	timerHint func(d time.Duration)
	// meshRefusals reports the mesh's refusals; nil: no mesh.
	meshRefusals func() MeshRefusals
	// sweeperStats reports the sweeper for the metrics; nil: none.
	sweeperStats func() SweeperStats
	// connections reports the HTTP connection bound; nil: none.
	connections func() ConnectionStats
	// registry is this server's Prometheus registry; queueMessages counts
	// messages pushed and popped per queue.
	registry      *prometheus.Registry
	queueMessages *queueSeries
	rec           *analytics.Recorder
	auth          *auth.Authenticator
	cipher        *crypt.Cipher

	draining  chan struct{} // closed by Drain
	drainOnce sync.Once
}

type counters struct {
	requests, pushMessages, popMessages, ackMessages, transactions, dbErrors, dlq, buffered atomic.Int64
	pushRequests, popRequests, ackRequests                                                  atomic.Int64
}

// Options are a Server's dependencies.
type Options struct {
	Config config.Config
	Store  *store.Store
	// Writes is the write policy every write runs through (the broker's
	// one queen/writes over Store); nil: one of this server's own, sealing
	// with Cipher.
	Writes *writes.Policy
	// Names resolves names over Store, cached (the broker's one
	// queen/names, forgetting Writes' hints); nil: a cache of this
	// server's own.
	Names *names.Names
	// Analytics records the per-minute buckets (nil: none recorded).
	Analytics *analytics.Recorder
	// Spool and Drainer are nil when no file buffer is configured: pushes
	// then fail with 503 while the database is down.
	Spool       *spool.Spool
	Drainer     *spool.Drainer
	Maintenance *maintenance.State
	Arbiter     *admission.Arbiter
	Clock       clock.Clock
	Waker       *waker.Hub
	// Peers passes hints to the other brokers; nil when there are none.
	Peers  Peers
	IDs    *ids.Source
	Logger *slog.Logger
	// SharedState reports the mesh for GET /api/v1/system/shared-state;
	// nil when this broker has no peers.
	SharedState func() any
	// Outages is this broker's record of its database (server, pauses of
	// writes) for GET /api/v1/status/buffers; nil: none kept.
	Outages *outages.Record
	// Passes is this broker's record of the leader passes it led, for GET
	// /api/v1/system/cluster; nil: none kept.
	Passes *passes.Record
	// MeshRefusals reports the mesh's refusal counters for the metrics;
	// nil when this broker has no peers.
	MeshRefusals func() MeshRefusals
	// TimerHint wakes the local sweeper when a committed timer is due in
	// d (in process only); nil when this broker runs no sweeper.
	TimerHint func(d time.Duration)
	// SweeperStats reports the sweeper for /metrics/prometheus.
	SweeperStats func() SweeperStats
	// Auth checks bearer tokens (JWT_ENABLED); nil lets every request in.
	Auth *auth.Authenticator
	// Cipher seals spooled payloads and opens the payloads read back
	// sealed at rest (QUEEN_ENCRYPTION_KEY); nil: none.
	Cipher *crypt.Cipher
	// Retry is the broker's contention retry over Store, for the ack
	// combiner and a push path made here.
	Retry combine.Retry
	// Push is the push path (commit or spool); nil: one is made from the
	// options above.
	Push *pushpath.Path
	// Connections reports the HTTP connection bound (QUEEN_MAX_CONNECTIONS)
	// for /metrics/prometheus; nil when the server has none.
	Connections func() ConnectionStats
	// Shards are the planes of a broker with shards (QUEEN_SHARDS), in
	// the configured order, and Placement tells a queue's shard; nil
	// without shards. Store, Writes, Names, Push and Retry are then the
	// first shard's (the routes not routed by queue use them; Handler
	// answers 501 for those that would read one shard only).
	Shards    []Shard
	Placement Placement
	// Moves runs the admin routes of moves and placements; nil without
	// shards (they answer 501).
	Moves Moves
	// PopClaims, when set, is told of every claim a pop made, and
	// whether its client was already gone when the claim began (the
	// simulator's view of claims that delivery cannot show: one given
	// back at once still hid its partition meanwhile).
	PopClaims func(PopClaim)
}

// ConnectionStats are the HTTP connection bound's figures (connlimit.Stats).
type ConnectionStats struct {
	Max, Open, Evicted, Refused int64
}

// MeshRefusals are the mesh's counts of what it refused (mesh.Stats).
type MeshRefusals struct {
	HandshakeFailures, SignatureFailures, SequenceRejections, ConnectionsRefused int64
}

// PopClaim is one claim a pop made, for Options.PopClaims.
type PopClaim = consume.Claim

// SweeperStats are the sweeper's figures the metrics expose.
type SweeperStats struct {
	Cycles, Fired, Duplicates, Pruned, Failures int64
	FireFailures, TimersFailed                  int64
	// LatenessBuckets are upper bounds (ms); LatenessCumulative has one
	// count per bucket and a last one for +Inf.
	LatenessBuckets    []float64
	LatenessCumulative []int64
	LatenessSum        float64
	LatenessCount      int64
}

// Peers tells the other brokers what changed here. Every call is a hint
// that may be lost; it must not block.
type Peers interface {
	// MessageAvailable: these partitions of a queue got messages.
	MessageAvailable(tenant, queue string, partitionIDs []string)
	// QueueChanged: forget what is cached of this queue.
	QueueChanged(tenant, queue string, deleted bool)
}

// New returns a Server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Peers == nil {
		o.Peers = alone{}
	}
	if o.Maintenance == nil {
		o.Maintenance = maintenance.New(o.Store, o.Spool, o.Logger)
	}
	s := &Server{cfg: o.Config, spool: o.Spool, drainer: o.Drainer, maint: o.Maintenance,
		arbiter: o.Arbiter, clock: o.Clock, wake: o.Waker, peers: o.Peers, ids: o.IDs, sharedState: o.SharedState, outages: o.Outages, passes: o.Passes, meshRefusals: o.MeshRefusals, timerHint: o.TimerHint, sweeperStats: o.SweeperStats, connections: o.Connections, auth: o.Auth, cipher: o.Cipher, log: o.Logger, started: o.Clock.Now(),
		draining: make(chan struct{})}
	s.plane = s.newPlane(o, Shard{Store: o.Store, Writes: o.Writes, Names: o.Names, Push: o.Push, Retry: o.Retry})
	if len(o.Shards) > 0 {
		s.router, s.moves = s.newRouter(o), o.Moves
	}
	s.queueMessages = newQueueSeries(o.Config.MetricsMaxQueues)
	s.rec = o.Analytics
	s.registry = s.metricsRegistry()
	return s
}

// drainPing is the drain's probe, nil without one.
func (s *Server) drainPing() func(context.Context) error {
	if s.drainer == nil {
		return nil
	}
	return s.drainer.Ping
}

// alone is Peers for a broker with no mesh.
type alone struct{}

func (alone) MessageAvailable(string, string, []string) {}
func (alone) QueueChanged(string, string, bool)         {}

// Drain starts a graceful stop: parked long polls answer 204 at once and
// new ones do not park. Requests in flight keep their contexts, so a push
// commits (or spools) and answers.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// Consumer runs this server's pops; callers that pop without HTTP (the
// simulator) share its waker and drain through it.
func (s *Server) Consumer() *consume.Consumer { return s.consumer }

// route is one entry of the route table: its pattern, the access level
// it needs (declared here, never derived from the path), and its handler.
type route struct {
	pattern string
	level   auth.Level
	handle  http.HandlerFunc
}

// routes is the route table, one list per area. Every route declares its
// level: TestEveryRouteDeclaresItsLevel fails for one that does not, and the
// middleware refuses it. Public: health only. Metrics: the scrapes
// (QUEEN_METRICS_ALLOW_CIDRS, QUEEN_METRICS_TOKEN, else read-only). Admin:
// system routes, deletes of queues and groups, stats refresh. Produce:
// push and timer schedules (write-only tokens pass). ReadOnly: other reads
// and the streams state read. ReadWrite: the rest, pops included.
func (s *Server) routes() []route {
	return slices.Concat(s.messageRoutes(), s.resourceRoutes(), s.timerKVRoutes(), s.groupRoutes(), s.statusRoutes(),
		s.analyticsRoutes(), s.moveRoutes(), s.siteRoutes())
}

// messageRoutes lists the message routes: configure, push, pop, ack,
// lease extension and transactions.
func (s *Server) messageRoutes() []route {
	return []route{
		{"POST /api/v1/configure", auth.ReadWrite, s.configure},
		{"POST /api/v1/push", auth.Produce, s.push},
		{"GET /api/v1/pop/queue/{queue}", auth.ReadWrite, s.pop},
		{"GET /api/v1/pop/queue/{queue}/partition/{partition}", auth.ReadWrite, s.pop},
		{"GET /api/v1/pop", auth.ReadWrite, s.popDiscover},
		{"POST /api/v1/ack", auth.ReadWrite, s.ack},
		{"POST /api/v1/ack/batch", auth.ReadWrite, s.ackBatch},
		{"POST /api/v1/lease/{leaseId}/extend", auth.ReadWrite, s.extendLease},
		{"POST /api/v1/transaction", auth.ReadWrite, s.transaction},
	}
}

// resourceRoutes lists the dead-letter, resource, system and session routes.
func (s *Server) resourceRoutes() []route {
	return []route{
		{"GET /api/v1/dlq", auth.ReadOnly, s.listDLQ},
		{"GET /api/v1/resources/queues", auth.ReadOnly, s.listQueues},
		{"GET /api/v1/resources/queues/{queue}", auth.ReadOnly, s.getQueue},
		{"GET /api/v1/resources/queues/{queue}/depth", auth.ReadOnly, s.queueDepth},
		{"DELETE /api/v1/resources/queues/{queue}", auth.Admin, s.deleteQueue},
		{"GET /api/v1/resources/overview", auth.ReadOnly, s.overview},
		{"GET /api/v1/system/maintenance", auth.Admin, s.getMaintenance},
		{"POST /api/v1/system/maintenance", auth.Admin, s.setMaintenance},
		{"GET /api/v1/system/maintenance/pop", auth.Admin, s.getPopMaintenance},
		{"POST /api/v1/system/maintenance/pop", auth.Admin, s.setPopMaintenance},
		{"GET /api/v1/status/buffers", auth.ReadOnly, s.bufferStatus},
		{"GET /api/v1/system/shared-state", auth.Admin, s.getSharedState},
		{"GET /api/v1/system/cluster", auth.ReadOnly, s.cluster},
		{"GET /api/v1/session", auth.ReadOnly, s.session},
	}
}

// timerKVRoutes lists the timer and KV routes.
func (s *Server) timerKVRoutes() []route {
	return []route{
		{"POST /api/v1/timers", auth.Produce, s.timers},
		{"GET /api/v1/timers/{queue}", auth.ReadOnly, s.listTimers},
		{"GET /api/v1/timers/{queue}/{timerKey...}", auth.ReadOnly, s.peekTimer},
		{"DELETE /api/v1/timers/{queue}/{timerKey...}", auth.ReadWrite, s.cancelTimer},
		{"POST /api/v1/kv", auth.ReadWrite, s.kv},
		{"GET /api/v1/kv/{ns}/{key...}", auth.ReadOnly, s.kvGet},
		{"PUT /api/v1/kv/{ns}/{key...}", auth.ReadWrite, s.kvPut},
		{"DELETE /api/v1/kv/{ns}/{key...}", auth.ReadWrite, s.kvDelete},
	}
}

// groupRoutes lists the consumer-group routes.
func (s *Server) groupRoutes() []route {
	return []route{
		{"GET /api/v1/consumer-groups", auth.ReadOnly, s.listGroups},
		{"GET /api/v1/consumer-groups/lagging", auth.ReadOnly, s.laggingGroups},
		{"GET /api/v1/consumer-groups/{group}", auth.ReadOnly, s.getGroup},
		{"DELETE /api/v1/consumer-groups/{group}", auth.Admin, s.deleteGroup},
		{"DELETE /api/v1/consumer-groups/{group}/queues/{queue}", auth.Admin, s.deleteGroup},
		{"POST /api/v1/consumer-groups/{group}/queues/{queue}/seek", auth.ReadWrite, s.seekGroup},
		{"POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", auth.ReadWrite, s.seekPartition},
		{"POST /api/v1/consumer-groups/{group}/subscription", auth.ReadWrite, s.setSubscription},
	}
}

// statusRoutes lists the stats refresh, status, migration, namespace and
// task resource, and message browsing routes.
func (s *Server) statusRoutes() []route {
	return []route{
		{"POST /api/v1/stats/refresh", auth.Admin, s.refreshStats},
		{"GET /api/v1/status", auth.ReadOnly, s.status},
		{"GET /api/v1/status/queues", auth.ReadOnly, s.statusQueues},
		{"GET /api/v1/status/queues/{queue}", auth.ReadOnly, s.statusQueue},
		{"GET /api/v1/status/queues/{queue}/messages", auth.ReadOnly, s.statusQueueMessages},
		{"GET /api/v1/migration/status", auth.Admin, s.migrationUnsupported},
		{"POST /api/v1/migration/test-connection", auth.Admin, s.migrationUnsupported},
		{"POST /api/v1/migration/start", auth.Admin, s.migrationUnsupported},
		{"POST /api/v1/migration/validate", auth.Admin, s.migrationUnsupported},
		{"POST /api/v1/migration/reset", auth.Admin, s.migrationUnsupported},
		{"GET /api/v1/status/analytics", auth.ReadOnly, s.statusAnalytics},
		{"GET /api/v1/resources/namespaces", auth.ReadOnly, s.namespaceResources},
		{"GET /api/v1/resources/tasks", auth.ReadOnly, s.taskResources},
		{"GET /api/v1/messages", auth.ReadOnly, s.listMessages},
		{"GET /api/v1/messages/by-transaction", auth.ReadOnly, s.findByTransaction},
		{"GET /api/v1/messages/{partitionId}/{transactionId}", auth.ReadOnly, s.getMessage},
		{"DELETE /api/v1/messages/{partitionId}/{transactionId}", auth.ReadWrite, s.deleteMessage},
		{"POST /api/v1/messages/{partitionId}/{transactionId}/retry", auth.ReadWrite, s.retryMessage},
	}
}

// analyticsRoutes lists the analytics and trace routes.
func (s *Server) analyticsRoutes() []route {
	return []route{
		{"GET /api/v1/analytics/queue-lag", auth.ReadOnly, s.queueLag},
		{"GET /api/v1/analytics/queue-ops", auth.ReadOnly, s.queueOps},
		{"GET /api/v1/analytics/queue-parked-replicas", auth.ReadOnly, s.queueParkedReplicas},
		{"GET /api/v1/analytics/retention", auth.ReadOnly, s.retentionAnalytics},
		{"GET /api/v1/analytics/system-metrics", auth.ReadOnly, s.systemMetrics},
		{"GET /api/v1/analytics/worker-metrics", auth.ReadOnly, s.workerMetrics},
		{"GET /api/v1/analytics/postgres-stats", auth.ReadOnly, s.postgresStats},
		{"POST /api/v1/traces", auth.ReadWrite, s.recordTrace},
		{"GET /api/v1/traces/names", auth.ReadOnly, s.traceNamesList},
		{"GET /api/v1/traces/by-name/{traceName}", auth.ReadOnly, s.tracesByName},
		{"GET /api/v1/traces/{partitionId}/{transactionId}", auth.ReadOnly, s.tracesOfMessage},
	}
}

// siteRoutes lists the streams routes, the health check, the metrics scrapes and the dashboard.
func (s *Server) siteRoutes() []route {
	return []route{
		{"POST /streams/v1/queries", auth.ReadWrite, s.registerQuery},
		{"POST /streams/v1/cycle", auth.ReadWrite, s.cycle},
		{"POST /streams/v1/state/get", auth.ReadOnly, s.stateGet},
		{"GET /health", auth.Public, s.health},
		{"GET /metrics", auth.Metrics, s.metrics},
		{"GET /metrics/prometheus", auth.Metrics, s.prometheus},
		{"GET /dashboard", auth.Public, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/dashboard/", http.StatusMovedPermanently)
		}},
		{"GET /dashboard/", auth.Public, dashboard.Handler("/dashboard/").ServeHTTP},
		// Browsers ask every origin for one: no icon (another dashboard's
		// when QUEEN_DASHBOARD_DIR has one), and no 404 in their console.
		{"GET /favicon.ico", auth.Public, s.favicon},
	}
}

func (s *Server) favicon(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DashboardDir != "" {
		if _, err := os.Stat(filepath.Join(s.cfg.DashboardDir, "favicon.ico")); err == nil {
			s.externalDashboard()(w, r)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// externalDashboard serves QUEEN_DASHBOARD_DIR at every GET path no route
// claims, with history-mode fallback; API paths keep their JSON 404.
func (s *Server) externalDashboard() http.HandlerFunc {
	dir := dashboard.Dir(s.cfg.DashboardDir)
	return func(w http.ResponseWriter, r *http.Request) {
		for _, api := range []string{"/api/", "/streams/", "/metrics", "/health"} {
			if strings.HasPrefix(r.URL.Path, api) {
				writeJSON(w, http.StatusNotFound, errorAnswer{Error: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path),
					Code: "no_such_route"})
				return
			}
		}
		dir.ServeHTTP(w, r)
	}
}

// Handler returns the routed HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	levels := map[string]auth.Level{}
	rts := s.routes()
	if s.cfg.DashboardDir != "" {
		rts = append(rts, route{"GET /", auth.Public, s.externalDashboard()})
	}
	for _, rt := range rts {
		mux.HandleFunc(rt.pattern, s.shardGate(rt))
		levels[rt.pattern] = rt.level
	}
	return s.middleware(mux, levels)
}

type ctxKey int

const (
	tenantKey ctxKey = iota
	principalKey
	// patternKey is the route's pattern, for the op levels of batch routes.
	patternKey
)

// subOf is the authenticated producer identity of r: the token's sub, or
// "" without auth. A producerSub in a body is never used.
func subOf(r *http.Request) string {
	p, _ := r.Context().Value(principalKey).(auth.Principal)
	return p.Sub
}

// middleware answers CORS (QUEEN_CORS_ORIGINS only), refuses HEAD where a
// GET has effects and cross-site browser requests, checks the level,
// resolves the tenant, caps the body and refuses one that is not JSON, and
// turns unrouted requests into JSON 404s.
func (s *Server) middleware(mux *http.ServeMux, levels map[string]auth.Level) http.Handler {
	allow := allowedMethods(slices.Collect(maps.Keys(levels)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.stats.requests.Add(1)
		if s.cors(w, r) {
			return
		}
		_, pattern := mux.Handler(r)
		if pattern == "" {
			// code tells a missing route from a missing object (Queen's
			// clients copy it into their errors).
			writeJSON(w, http.StatusNotFound, errorAnswer{Error: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path),
				Code: "no_such_route"})
			return
		}
		if r.Method == http.MethodHead && !headSafe[pattern] {
			refuseHead(w, pattern, allow)
			return
		}
		if err := urlText(r); err != nil {
			writeBad(w, err)
			return
		}
		level := levels[pattern]
		if level == auth.Unset {
			writeError(w, http.StatusInternalServerError, "route declares no access level")
			return
		}
		if level != auth.Public && s.crossSiteRefused(r) {
			writeError(w, http.StatusForbidden, "cross-origin browser request refused: its origin is not in QUEEN_CORS_ORIGINS")
			return
		}
		var who auth.Principal
		if s.auth != nil {
			var denied *auth.Error
			if who, denied = s.auth.Check(r, level); denied != nil {
				writeError(w, denied.Status, denied.Msg)
				return
			}
		}
		tenant, status, msg := s.tenantFor(r, who)
		if status != 0 {
			writeError(w, status, msg)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		if r.ContentLength != 0 {
			r.Body = s.bodyDeadline(w, r.Body)
		}
		var err error
		if r.Body, err = jsonBodyOnly(r); errors.Is(err, errNotJSON) {
			writeNotJSON(w, r)
			return
		} else if err != nil {
			writeBad(w, err)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), tenantKey, tenant), principalKey, who)
		ctx = context.WithValue(ctx, patternKey, pattern)
		debug := s.log.Enabled(ctx, slog.LevelDebug)
		if !debug && s.rec == nil {
			mux.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		// The access log, at debug level only, and the recorded latency:
		// the hot path pays for the status recorder only when asked.
		began, rec := s.clock.Now(), &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		mux.ServeHTTP(rec, r.WithContext(ctx))
		now := s.clock.Now()
		s.rec.Request(now, routeKind(pattern), now.Sub(began), rec.status)
		if debug {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "tenant", tenant,
				"sub", who.Sub, "ms", now.Sub(began).Milliseconds())
		}
	})
}

// tenantFor resolves r's tenant, or the status and message refusing it.
// Without JWT (or with QUEEN_TENANT_TRUST_HEADER) the x-queen-tenant header
// decides when QUEEN_TENANCY_HEADER is on. With JWT the verified token
// decides: its QUEEN_TENANT_CLAIM, or the default tenant without one, and a
// header naming another tenant is refused (403). A request no token was
// checked for (public and skipped routes, allowed scrapes) gets the default
// tenant.
func (s *Server) tenantFor(r *http.Request, who auth.Principal) (tenant string, status int, msg string) {
	header := ""
	if s.cfg.TenancyHeader {
		if header = r.Header.Get("x-queen-tenant"); header != "" && !ids.Valid(header) {
			return "", http.StatusBadRequest, "x-queen-tenant must be a UUID"
		}
		header = strings.ToLower(header)
	}
	if s.auth == nil || s.cfg.TrustTenantHeader {
		if header != "" {
			return header, 0, ""
		}
		return config.DefaultTenant, 0, ""
	}
	if !who.Verified {
		return config.DefaultTenant, 0, ""
	}
	tenant = config.DefaultTenant
	if who.Tenant != "" {
		if !ids.Valid(who.Tenant) {
			return "", http.StatusForbidden, "the token's tenant claim is not a tenant id (a UUID)"
		}
		tenant = strings.ToLower(who.Tenant)
	}
	if header != "" && header != tenant {
		return "", http.StatusForbidden, "x-queen-tenant names another tenant than the token's"
	}
	return tenant, 0, ""
}

// bodyDeadline bounds how long reading one request body may take
// (QUEEN_BODY_READ_TIMEOUT_MS), so a client that stalls mid-body cannot
// hold a connection and a handler forever. The deadline is lifted as soon
// as the body has been read: a long poll's idle connection must not be cut.
// Requests without a body never get one. Where the writer has no
// connection (the lockstep simulator calls handlers directly), nothing
// happens.
func (s *Server) bodyDeadline(w http.ResponseWriter, body io.ReadCloser) io.ReadCloser {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(s.clock.Now().Add(s.cfg.BodyReadTimeout)) != nil {
		return body
	}
	return &deadlineBody{ReadCloser: body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// deadlineBody lifts the read deadline when the body ends. A body that
// failed (the deadline passed) keeps it, so the server's discard of the
// rest cannot wait on the stalled client either.
type deadlineBody struct {
	io.ReadCloser
	clear func()
	done  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.clear()
	}
	return n, err
}

func tenantOf(r *http.Request) string { return r.Context().Value(tenantKey).(string) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorAnswer{Error: msg})
}

// storeError answers a failed store call: 503 when the database is
// unreachable or overloaded, nothing when the client is gone, 500 otherwise.
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	if r.Context().Err() != nil {
		return
	}
	s.stats.dbErrors.Add(1)
	s.rec.DBError(s.clock.Now())
	if store.Unavailable(err) {
		s.log.Warn("database unavailable", "op", op, "err", err)
		writeError(w, http.StatusServiceUnavailable, "database unavailable: "+err.Error())
		return
	}
	s.log.Error("store failure", "op", op, "err", err)
	writeError(w, http.StatusInternalServerError, op+": "+err.Error())
}

// badRequest is a validation failure with the message to answer.
type badRequest struct {
	status int
	msg    string
}

func (b *badRequest) Error() string { return b.msg }

func bad(format string, a ...any) error {
	return &badRequest{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

func writeBad(w http.ResponseWriter, err error) {
	var b *badRequest
	if errors.As(err, &b) {
		writeError(w, b.status, b.msg)
		return
	}
	writeError(w, http.StatusBadRequest, err.Error())
}

// readBody reads the whole body, telling an oversized body (413) from an
// empty one (400). allowEmpty returns nil for an empty body.
func readBody(r *http.Request, allowEmpty bool) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &badRequest{http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body exceeds QUEEN_MAX_BODY_BYTES (%d bytes)", tooBig.Limit)}
		}
		return nil, bad("reading body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil, nil
		}
		return nil, bad("Empty request body")
	}
	// JSON text is UTF-8. encoding/json would store U+FFFD for each bad
	// byte: a name or key the client never sent.
	if field, ok := invalidUTF8(body); !ok {
		return nil, bad("%s is not valid UTF-8", field)
	}
	return body, nil
}

// readObject reads a JSON object body into its fields.
func readObject(r *http.Request, allowEmpty bool) (obj, error) {
	body, err := readBody(r, allowEmpty)
	if err != nil || body == nil {
		return obj{}, err
	}
	return decodeObject(body)
}

// decodeObject decodes a request body that must be a JSON object.
func decodeObject(body []byte) (obj, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, bad("Invalid JSON: %v", err)
	}
	if m == nil {
		return nil, bad("Invalid JSON: body must be an object")
	}
	return m, nil
}

// obj is a decoded JSON object whose fields are checked one by one, so an
// error can name the field.
type obj map[string]json.RawMessage

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// str returns a string field; absent and null are "", false.
func (o obj) str(name, path string) (string, bool, error) {
	raw, ok := o[name]
	if !ok || isNull(raw) {
		return "", false, nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", false, bad("%s must be a string", path+name)
	}
	return v, true, nil
}

func (o obj) integer(name, path string) (int, bool, error) {
	raw, ok := o[name]
	if !ok || isNull(raw) {
		return 0, false, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) {
		return 0, false, bad("%s must be an integer", path+name)
	}
	// Every integer option is stored as a PostgreSQL integer.
	if f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false, bad("%s is out of range", path+name)
	}
	return int(f), true, nil
}

func (o obj) boolean(name, path string) (bool, bool, error) {
	raw, ok := o[name]
	if !ok || isNull(raw) {
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, false, bad("%s must be a boolean", path+name)
	}
	return b, true, nil
}

func (o obj) array(name, path string) ([]json.RawMessage, bool, error) {
	raw, ok := o[name]
	if !ok || isNull(raw) {
		return nil, false, nil
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, false, bad("%s must be an array", path+name)
	}
	return a, true, nil
}

func (o obj) object(name, path string) (obj, bool, error) {
	raw, ok := o[name]
	if !ok || isNull(raw) {
		return nil, false, nil
	}
	return asObject(raw, path+name)
}

func asObject(raw json.RawMessage, path string) (obj, bool, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, false, bad("%s must be an object", path)
	}
	return m, true, nil
}

// limited returns the string field name checked against f, the table of
// what the database stores (queen/limits); absent and null are "", false.
func (o obj) limited(name string, f limits.Field, path string) (string, bool, error) {
	v, ok, err := o.str(name, path)
	if err != nil || !ok {
		return v, ok, err
	}
	return v, true, f.CheckAs(path+name, v)
}

// urlText refuses a path or query value PostgreSQL's text cannot hold.
func urlText(r *http.Request) error {
	if err := limits.Text("path", r.URL.Path); err != nil {
		return err
	}
	for k, vs := range r.URL.Query() {
		for _, v := range vs {
			if err := limits.Text(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// pathLimits checks the named path segments against the limits table.
func pathLimits(r *http.Request, fields map[string]limits.Field) error {
	for seg, f := range fields {
		if err := f.CheckAs(seg, r.PathValue(seg)); err != nil {
			return err
		}
	}
	return nil
}

// groupPath are the segments of the consumer-group routes.
var groupPath = map[string]limits.Field{"group": limits.ConsumerGroup, "queue": limits.Queue, "partition": limits.Partition}

// timestamp renders times the way Queen's C++ broker does (microseconds, Z).
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func timestampPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return timestamp(*t)
}

// admit takes a slot in lane before database work; without an arbiter it
// admits at once.
func (s *Server) admit(r *http.Request, lane admission.Lane) (func(), error) {
	if s.arbiter == nil {
		return func() {}, nil
	}
	return s.arbiter.Acquire(r.Context(), lane)
}

// hold is admit for work that may wait on a row locked elsewhere: the
// context it returns carries the slot, which the store gives back while it
// waits (admission.Away).
func (s *Server) hold(r *http.Request, lane admission.Lane) (context.Context, func(), error) {
	if s.arbiter == nil {
		return r.Context(), func() {}, nil
	}
	return s.arbiter.Hold(r.Context(), lane)
}

// statusRecorder notes the status a handler answered, for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (body
// deadlines, flushes).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
