package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/store"
)

// Exact texts: operators' tooling greps them.
const (
	msgMaintenanceOn  = "Maintenance mode ENABLED. All PUSHes routing to file buffer."
	msgMaintenanceOff = "Maintenance mode DISABLED. Background processor will drain buffer to DB."
)

func (s *Server) spoolPending() int64 {
	if s.spool == nil {
		return 0
	}
	return s.spool.Pending()
}

func (s *Server) spoolFailed() int {
	if s.spool == nil {
		return 0
	}
	return s.spool.Failed()
}

// bufferHealthy is the spool's own view (true when no spool is configured).
func (s *Server) bufferHealthy() bool { return s.spool == nil || s.spool.Healthy() }

// dbHealthy is the spool's hint AND a fresh ping.
func (s *Server) dbHealthy(ctx context.Context) bool {
	if !s.bufferHealthy() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DBConnectionTimeout)
	defer cancel()
	return s.store.Ping(ctx) == nil
}

// flagsFresh reads both switches from system_state, falling back to this
// broker's own view when the database cannot answer.
func (s *Server) flagsFresh(ctx context.Context) (push, pop bool) {
	push, pop = s.maint.Push(), s.maint.Pop()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DBConnectionTimeout)
	defer cancel()
	if v, err := s.store.Flag(ctx, store.FlagMaintenance); err == nil {
		push = v
	}
	if v, err := s.store.Flag(ctx, store.FlagPopMaintenance); err == nil {
		pop = v
	}
	return push, pop
}

func (s *Server) getMaintenance(w http.ResponseWriter, r *http.Request) {
	push, pop := s.flagsFresh(r.Context())
	db := s.dbHealthy(r.Context())
	failed := s.spoolFailed()
	var bytes int64
	if s.spool != nil {
		bytes = s.spool.FailedBytes()
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"maintenanceMode": push, "popMaintenanceMode": pop,
		"bufferedMessages": s.spoolPending(), "bufferHealthy": s.bufferHealthy(),
		"bufferStats": map[string]any{
			"pendingCount": s.spoolPending(), "failedCount": failed, "dbHealthy": db,
			"failedFiles": map[string]any{"count": failed, "totalBytes": bytes,
				"totalMB": float64(bytes) / (1 << 20), "failoverCount": failed, "qos0Count": 0},
		},
	})
}

// readEnabled parses {"enabled": bool}.
func readEnabled(r *http.Request) (bool, error) {
	body, err := readObject(r, false)
	if err != nil {
		return false, err
	}
	v, ok, err := body.boolean("enabled", "")
	if err != nil || !ok {
		return false, bad("enabled (boolean) is required")
	}
	return v, nil
}

func (s *Server) setMaintenance(w http.ResponseWriter, r *http.Request) {
	on, err := readEnabled(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	if on && s.spool == nil {
		writeError(w, http.StatusConflict, "push maintenance needs a file buffer (FILE_BUFFER_DIR)")
		return
	}
	if err := s.maint.SetPush(r.Context(), on); err != nil {
		// The switch is already flipped on this broker; only the shared
		// row failed. Say so rather than pretend.
		s.storeError(w, r, "maintenance: the flag is set on this broker but not persisted", err)
		return
	}
	msg := msgMaintenanceOff
	if on {
		msg = msgMaintenanceOn
	}
	writeJSON(w, http.StatusOK, map[string]any{"maintenanceMode": on, "bufferedMessages": s.spoolPending(),
		"bufferHealthy": s.bufferHealthy(), "message": msg})
}

func (s *Server) getPopMaintenance(w http.ResponseWriter, r *http.Request) {
	_, pop := s.flagsFresh(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"popMaintenanceMode": pop, "message": popMessage(pop)})
}

func popMessage(on bool) string {
	if on {
		return "Pop maintenance mode ENABLED. All POPs return empty."
	}
	return "Pop maintenance mode DISABLED. POPs are served."
}

func (s *Server) setPopMaintenance(w http.ResponseWriter, r *http.Request) {
	on, err := readEnabled(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	if err := s.maint.SetPop(r.Context(), on); err != nil {
		s.storeError(w, r, "pop maintenance: the flag is set on this broker but not persisted", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"popMaintenanceMode": on, "message": popMessage(on)})
}

func (s *Server) bufferStatus(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"pending": s.spoolPending(), "failed": s.spoolFailed(),
		"dbHealthy": s.dbHealthy(r.Context()), "worker": 0, "enabled": s.spool != nil,
		"maintenanceMode": s.maint.Push()}
	if s.spool != nil {
		body["dir"] = s.spool.Dir()
	}
	if s.drainer != nil {
		body["replayedFiles"] = s.drainer.Replayed.Load()
		body["quarantinedFiles"] = s.drainer.Quarantined.Load()
		body["cooldowns"] = s.drainer.Cooldowns.Load()
	}
	writeJSON(w, http.StatusOK, body)
}

// prometheus renders the gauges in the Prometheus text format.
func (s *Server) prometheus(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	gauge := func(name, help string, v any, labels ...string) {
		if !strings.Contains(b.String(), "# TYPE "+name+" ") {
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		}
		lbl := ""
		if len(labels) > 0 {
			var parts []string
			for i := 0; i+1 < len(labels); i += 2 {
				parts = append(parts, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
			}
			sort.Strings(parts)
			lbl = "{" + strings.Join(parts, ",") + "}"
		}
		fmt.Fprintf(&b, "%s%s %v\n", name, lbl, v)
	}
	boolNum := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	gauge("queen_file_buffer_pending", "Spooled push events waiting to replay.", s.spoolPending())
	gauge("queen_file_buffer_failed", "Quarantined spool files.", s.spoolFailed())
	gauge("queen_file_buffer_db_healthy", "1 when the spool sees the database healthy.", boolNum(s.bufferHealthy()))
	gauge("queen_maintenance_mode_enabled", "1 while push maintenance diverts pushes to the spool.", boolNum(s.maint.Push()))
	gauge("queen_pop_maintenance_mode_enabled", "1 while pops answer empty.", boolNum(s.maint.Pop()))
	st := s.store.Pool().Stat()
	gauge("queen_db_pool_size", "Maximum database connections.", st.MaxConns())
	gauge("queen_db_pool_idle", "Idle database connections.", st.IdleConns())
	gauge("queen_db_pool_active", "Database connections in use.", st.AcquiredConns())
	if s.arbiter != nil {
		as := s.arbiter.Stats()
		gauge("queen_admission_budget", "Admission slots.", as.Budget)
		for _, l := range admission.Lanes() {
			gauge("queen_admission_inflight", "Admitted work by lane.", as.Inflight[l], "lane", l.String())
		}
		for _, l := range admission.Lanes() {
			gauge("queen_admission_waiting", "Work waiting for a slot by lane.", as.Waiting[l], "lane", l.String())
		}
	}
	counter := func(name, help string, v int64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s{scope=\"cluster\"} %d\n", name, help, name, name, v)
	}
	counter("queen_cluster_push_messages_total", "Messages pushed through this broker.", s.stats.pushMessages.Load())
	counter("queen_cluster_pop_messages_total", "Messages popped through this broker.", s.stats.popMessages.Load())
	counter("queen_cluster_ack_messages_total", "Successful acks through this broker.", s.stats.ackMessages.Load())
	counter("queen_cluster_db_errors_total", "Database failures seen by this broker.", s.stats.dbErrors.Load())
	counter("queen_cluster_dlq_total", "Messages dead-lettered through this broker.", s.stats.dlq.Load())
	if s.sweeperStats != nil {
		s.sweeperMetrics(&b, s.sweeperStats())
	}
	if due, err := s.store.DueTimers(r.Context(), 100000); err == nil {
		gauge("queen_timers_due", "Timers due and not claimed (counted up to 100000): a backlog means the sweepers fall behind.", due)
	}
	fmt.Fprintf(&b, "# HELP queen_uptime_seconds Seconds since start.\n# TYPE queen_uptime_seconds gauge\nqueen_uptime_seconds %.0f\n",
		s.clock.Now().Sub(s.started).Seconds())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

// getSharedState reports the mesh: its links, the servers it hears from and
// its counters. A broker with no peers says so.
func (s *Server) getSharedState(w http.ResponseWriter, r *http.Request) {
	if s.sharedState == nil {
		writeJSON(w, http.StatusOK, map[string]any{"enabled": false, "server_id": s.cfg.ServerID,
			"transport": "none", "peer_count": 0, "peers": []any{}})
		return
	}
	writeJSON(w, http.StatusOK, s.sharedState())
}

// sweeperMetrics writes the timer and sweeper families.
func (s *Server) sweeperMetrics(b *strings.Builder, st SweeperStats) {
	c := func(name, help string, v int64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	c("queen_timers_fired_total", "Timers this broker fired (their message stored).", st.Fired)
	c("queen_timers_fire_duplicates_total", "Timers fired whose transactionId was already stored.", st.Duplicates)
	c("queen_sweeper_cycles_total", "Sweeper cycles run here.", st.Cycles)
	c("queen_sweeper_failures_total", "Sweeper cycles that failed (retried next cycle; claims wait out their lease).", st.Failures)
	c("queen_kv_expired_pruned_total", "Expired KV rows deleted by this broker's sweeper.", st.Pruned)
	const h = "queen_timers_delivery_lateness_milliseconds"
	fmt.Fprintf(b, "# HELP %s Fire time minus deliverAt of each fired timer.\n# TYPE %s histogram\n", h, h)
	for i, le := range st.LatenessBuckets {
		fmt.Fprintf(b, "%s_bucket{le=\"%g\"} %d\n", h, le, st.LatenessCumulative[i])
	}
	fmt.Fprintf(b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", h, st.LatenessCount, h, st.LatenessSum, h, st.LatenessCount)
}
