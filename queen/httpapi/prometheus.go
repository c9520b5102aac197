package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/auth"
)

// metricsRegistry builds this server's Prometheus registry: values read at
// scrape time from the broker's parts (spool, switches, pool, admission,
// counters, sweeper), per-queue depth and DLQ depth from the database, and
// the process and Go runtime collectors. One registry per server: no
// global state.
func (s *Server) metricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge("queen_file_buffer_pending", "Spooled push events waiting to replay.", func() float64 { return float64(s.spoolPending()) })
	gauge("queen_file_buffer_failed", "Quarantined spool files.", func() float64 { return float64(s.spoolFailed()) })
	gauge("queen_file_buffer_db_healthy", "1 when the spool sees the database healthy.", func() float64 { return flag(s.bufferHealthy()) })
	gauge("queen_database_read_only", "1 while the database was last seen refusing writes (a standby the address points at).",
		func() float64 { return flag(s.databaseReadOnly()) })
	s.poolMetrics(reg)
	gauge("queen_maintenance_mode_enabled", "1 while push maintenance diverts pushes to the spool.", func() float64 { return flag(s.maint.Push()) })
	gauge("queen_pop_maintenance_mode_enabled", "1 while pops answer empty.", func() float64 { return flag(s.maint.Pop()) })
	gauge("queen_uptime_seconds", "Seconds since this broker started.", func() float64 { return s.clock.Now().Sub(s.started).Seconds() })
	cluster := func(name, help string, f func() int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help,
			ConstLabels: prometheus.Labels{"scope": "cluster"}}, func() float64 { return float64(f()) }))
	}
	cluster("queen_cluster_push_requests_total", "Push requests served by this broker.", s.stats.pushRequests.Load)
	cluster("queen_cluster_pop_requests_total", "Pop requests served by this broker.", s.stats.popRequests.Load)
	cluster("queen_cluster_ack_requests_total", "Ack requests served by this broker.", s.stats.ackRequests.Load)
	cluster("queen_cluster_transactions_total", "Transactions served by this broker.", s.stats.transactions.Load)
	cluster("queen_cluster_push_messages_total", "Messages pushed through this broker.", s.stats.pushMessages.Load)
	cluster("queen_cluster_pop_messages_total", "Messages popped through this broker.", s.stats.popMessages.Load)
	cluster("queen_cluster_ack_messages_total", "Successful acks through this broker.", s.stats.ackMessages.Load)
	cluster("queen_cluster_db_errors_total", "Database failures seen by this broker.", s.stats.dbErrors.Load)
	cluster("queen_cluster_dlq_total", "Messages dead-lettered through this broker.", s.stats.dlq.Load)
	if s.rec != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "queen_analytics_dropped_queue_rows_total",
			Help: "Queue rows of the recorded analytics not kept: past QUEEN_ANALYTICS_MAX_QUEUES queues in their minute."},
			func() float64 { return float64(s.rec.Dropped()) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "queen_analytics_dropped_minutes_total",
			Help: "Minutes of recorded analytics dropped unwritten: PostgreSQL refused their writes for an hour."},
			func() float64 { return float64(s.rec.DroppedMinutes()) }))
	}
	if s.connections != nil {
		s.connectionMetrics(reg)
	}
	if s.meshRefusals != nil {
		for _, m := range []struct {
			name, help string
			f          func(MeshRefusals) int64
		}{
			{"queen_mesh_handshake_failures_total", "Mesh connections that failed the handshake (wrong secret, junk, a replay, a timeout).", func(r MeshRefusals) int64 { return r.HandshakeFailures }},
			{"queen_mesh_signature_failures_total", "Mesh handshakes or frames whose MAC did not match.", func(r MeshRefusals) int64 { return r.SignatureFailures }},
			{"queen_mesh_sequence_rejections_total", "Mesh frames out of sequence (replayed or reordered); each closed its link.", func(r MeshRefusals) int64 { return r.SequenceRejections }},
			{"queen_mesh_connections_refused_total", "Inbound mesh connections closed unread: QUEEN_MESH_MAX_PENDING others were in their handshake.", func(r MeshRefusals) int64 { return r.ConnectionsRefused }},
		} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help},
				func() float64 { return float64(m.f(s.meshRefusals())) }))
		}
	}
	reg.MustRegister(s.queueMessages.vec)
	reg.MustRegister(&brokerCollector{s: s})
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return reg
}

// prometheus is GET /metrics/prometheus. A scrape with a tenant's token
// (not admin, not the scrape token or an allowed network) sees only that
// tenant's per-queue series: queue names are a tenant's own.
func (s *Server) prometheus(w http.ResponseWriter, r *http.Request) {
	var g prometheus.Gatherer = s.registry
	if p, _ := r.Context().Value(principalKey).(auth.Principal); p.Verified && !s.auth.IsAdmin(p) {
		g = tenantOnly(g, tenantOf(r))
	}
	promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

var (
	admissionInflight = prometheus.NewDesc("queen_admission_inflight", "Admitted database work by lane.", []string{"lane"}, nil)
	admissionWaiting  = prometheus.NewDesc("queen_admission_waiting", "Database work waiting for a slot by lane.", []string{"lane"}, nil)
	admissionBudget   = prometheus.NewDesc("queen_admission_budget", "Admission slots.", nil, nil)
	queueDepth        = prometheus.NewDesc("queen_queue_depth", "Messages pushed past the queue-mode cursor of a queue (evicted ones count until consumed past).", []string{"tenant", "queue"}, nil)
	dlqByQueue        = prometheus.NewDesc("queen_dlq_depth_by_queue", "Dead-lettered messages of a queue.", []string{"tenant", "queue"}, nil)
	dlqTotal          = prometheus.NewDesc("queen_dlq_depth", "Dead-lettered messages, all queues.", nil, prometheus.Labels{"scope": "cluster"})
	timersDue         = prometheus.NewDesc("queen_timers_due", "Timers due and not claimed (counted up to 100000): a backlog means the sweepers fall behind.", nil, nil)
	timersFired       = prometheus.NewDesc("queen_timers_fired_total", "Timers this broker fired (their message stored).", nil, nil)
	timersDuplicates  = prometheus.NewDesc("queen_timers_fire_duplicates_total", "Timers fired whose transactionId was already stored.", nil, nil)
	sweeperCycles     = prometheus.NewDesc("queen_sweeper_cycles_total", "Sweeper cycles run here.", nil, nil)
	sweeperFailures   = prometheus.NewDesc("queen_sweeper_failures_total", "Sweeper cycles that failed (retried next cycle; claims wait out their lease).", nil, nil)
	timerFireFailures = prometheus.NewDesc("queen_timers_fire_failures_total", "Timers whose own fire failed permanently; each was isolated from its batch and retried with a backoff.", nil, nil)
	timersFailed      = prometheus.NewDesc("queen_timers_failed_total", "Timers that used up QUEEN_SWEEPER_MAX_ATTEMPTS; they wait, listed with failed and lastError, for a reschedule or cancel.", nil, nil)
	kvPruned          = prometheus.NewDesc("queen_kv_expired_pruned_total", "Expired KV rows deleted by this broker's sweeper.", nil, nil)
	timersLateness    = prometheus.NewDesc("queen_timers_delivery_lateness_milliseconds", "Fire time minus deliverAt of each fired timer.", nil, nil)
)

// brokerCollector reads what has labels or needs the database at scrape
// time. A database read that fails leaves its families out of that scrape.
type brokerCollector struct{ s *Server }

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{admissionInflight, admissionWaiting, admissionBudget, queueDepth, dlqByQueue, dlqTotal,
		timersDue, timersFired, timersDuplicates, sweeperCycles, sweeperFailures, timerFireFailures, timersFailed, kvPruned, timersLateness} {
		ch <- d
	}
}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if s.arbiter != nil {
		as := s.arbiter.Stats()
		ch <- prometheus.MustNewConstMetric(admissionBudget, prometheus.GaugeValue, float64(as.Budget))
		for _, l := range admission.Lanes() {
			ch <- prometheus.MustNewConstMetric(admissionInflight, prometheus.GaugeValue, float64(as.Inflight[l]), l.String())
			ch <- prometheus.MustNewConstMetric(admissionWaiting, prometheus.GaugeValue, float64(as.Waiting[l]), l.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if depths, err := s.queueDepthsOf(ctx); err == nil {
		var dlq int64
		for _, d := range capDepths(depths, s.cfg.MetricsMaxQueues) {
			ch <- prometheus.MustNewConstMetric(queueDepth, prometheus.GaugeValue, float64(d.Depth), d.Tenant, d.Queue)
			ch <- prometheus.MustNewConstMetric(dlqByQueue, prometheus.GaugeValue, float64(d.DLQ), d.Tenant, d.Queue)
			dlq += d.DLQ
		}
		ch <- prometheus.MustNewConstMetric(dlqTotal, prometheus.GaugeValue, float64(dlq))
	}
	if due, err := s.store.DueTimers(ctx, 100000); err == nil {
		ch <- prometheus.MustNewConstMetric(timersDue, prometheus.GaugeValue, float64(due))
	}
	if s.sweeperStats == nil {
		return
	}
	st := s.sweeperStats()
	for d, v := range map[*prometheus.Desc]int64{timersFired: st.Fired, timersDuplicates: st.Duplicates, sweeperCycles: st.Cycles,
		sweeperFailures: st.Failures, kvPruned: st.Pruned, timerFireFailures: st.FireFailures, timersFailed: st.TimersFailed} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	buckets := map[float64]uint64{}
	for i, le := range st.LatenessBuckets {
		buckets[le] = uint64(st.LatenessCumulative[i])
	}
	ch <- prometheus.MustNewConstHistogram(timersLateness, uint64(st.LatenessCount), st.LatenessSum, buckets)
}

// connectionMetrics exposes the HTTP connection bound (QUEEN_MAX_CONNECTIONS).
func (s *Server) connectionMetrics(reg *prometheus.Registry) {
	for _, m := range []struct {
		name, help string
		counter    bool
		f          func(ConnectionStats) int64
	}{
		{"queen_http_connections_open", "Open HTTP connections.", false, func(c ConnectionStats) int64 { return c.Open }},
		{"queen_http_connections_max", "The bound on open HTTP connections (QUEEN_MAX_CONNECTIONS).", false, func(c ConnectionStats) int64 { return c.Max }},
		{"queen_http_connections_evicted_total", "Idle HTTP connections closed to make room for a new one at the bound.", true,
			func(c ConnectionStats) int64 { return c.Evicted }},
		{"queen_http_connections_refused_total", "New HTTP connections closed unread: the bound was reached and every open one was busy.", true,
			func(c ConnectionStats) int64 { return c.Refused }},
	} {
		f := func() float64 { return float64(m.f(s.connections())) }
		if m.counter {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, f))
		} else {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: m.name, Help: m.help}, f))
		}
	}
}
