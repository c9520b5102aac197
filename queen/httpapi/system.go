package httpapi

import (
	"context"
	"net/http"

	"github.com/queen-go/queen/queen/auth"

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
	writeJSON(w, http.StatusOK, maintenanceStatus{
		MaintenanceMode: push, PopMaintenanceMode: pop,
		BufferedMessages: s.spoolPending(), BufferHealthy: s.bufferHealthy(),
		BufferStats: bufferStats{
			PendingCount: s.spoolPending(), FailedCount: failed, DBHealthy: db,
			FailedFiles: failedFiles{Count: failed, TotalBytes: bytes,
				TotalMB: float64(bytes) / (1 << 20), FailoverCount: failed},
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
	writeJSON(w, http.StatusOK, maintenanceSwitched{MaintenanceMode: on, BufferedMessages: s.spoolPending(),
		BufferHealthy: s.bufferHealthy(), Message: msg})
}

func (s *Server) getPopMaintenance(w http.ResponseWriter, r *http.Request) {
	_, pop := s.flagsFresh(r.Context())
	writeJSON(w, http.StatusOK, popMaintenanceStatus{PopMaintenanceMode: pop, Message: popMessage(pop)})
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
	writeJSON(w, http.StatusOK, popMaintenanceStatus{PopMaintenanceMode: on, Message: popMessage(on)})
}

// bufferStatus is GET /api/v1/status/buffers. The spool is the broker's,
// shared by every tenant: a read-only token gets the counts only; the
// directory, the quarantined files and their reasons (other tenants'
// queues, partitions and transactionIds) are an admin's (always there
// without auth).
func (s *Server) bufferStatus(w http.ResponseWriter, r *http.Request) {
	body := spoolStatus{Pending: s.spoolPending(), Failed: s.spoolFailed(),
		DBHealthy: s.dbHealthy(r.Context()), Enabled: s.spool != nil, MaintenanceMode: s.maint.Push()}
	p, _ := r.Context().Value(principalKey).(auth.Principal)
	if s.spool != nil && s.auth.Allows(p, auth.Admin) {
		dir := s.spool.Dir()
		body.Dir = &dir
		if q, err := s.spool.Quarantined(); err == nil {
			body.Quarantined = &q
		}
	}
	if s.drainer != nil {
		body.drainCounts = &drainCounts{ReplayedFiles: s.drainer.Replayed.Load(),
			QuarantinedFiles: s.drainer.Quarantined.Load(), Cooldowns: s.drainer.Cooldowns.Load()}
	}
	if s.outages != nil {
		body.Database = newDatabaseRecord(s.cfg.ServerID, s.outages.View(), s.clock.Now(), s.auth.Allows(p, auth.Admin))
	}
	writeJSON(w, http.StatusOK, body)
}

// getSharedState reports the mesh: its links, the servers it hears from and
// its counters. A broker with no peers says so.
func (s *Server) getSharedState(w http.ResponseWriter, r *http.Request) {
	if s.sharedState == nil {
		writeJSON(w, http.StatusOK, sharedStateAbsent{meshAbsent: newMeshAbsent(s.cfg.ServerID), Transport: "none"})
		return
	}
	writeJSON(w, http.StatusOK, s.sharedState())
}

// session is GET /api/v1/session: who the caller is and what it may do,
// so a dashboard shows only the actions its token may take (the routes
// refuse the others anyway).
func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	p, _ := r.Context().Value(principalKey).(auth.Principal)
	canWrite, canAdmin := s.auth.Allows(p, auth.ReadWrite), s.auth.Allows(p, auth.Admin)
	level := "read-only"
	switch {
	case canAdmin:
		level = "admin"
	case canWrite:
		level = "read-write"
	}
	writeJSON(w, http.StatusOK, sessionInfo{AuthEnabled: s.auth != nil, Sub: p.Sub, Tenant: tenantOf(r),
		Level: level, CanWrite: canWrite, CanAdmin: canAdmin, ServerID: s.cfg.ServerID})
}

// cluster is GET /api/v1/system/cluster: the brokers that recorded a
// minute lately, the leader locks and their holders, this broker's mesh
// links (admins only), and the tenant's timers and KV namespaces.
func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	v, err := s.store.Cluster(r.Context(), tenantOf(r))
	if err != nil {
		s.storeError(w, r, "cluster", err)
		return
	}
	// The mesh's links name hosts and ports: admins only, as on
	// /api/v1/system/shared-state.
	var mesh any
	if p, _ := r.Context().Value(principalKey).(auth.Principal); s.auth.Allows(p, auth.Admin) {
		mesh = newMeshAbsent(s.cfg.ServerID)
		if s.sharedState != nil {
			mesh = s.sharedState()
		}
	}
	c := newClusterInfo(s.cfg.ServerID, v, mesh)
	if s.passes != nil {
		c.Passes, c.PassesSince = newLeaderPasses(s.cfg.ServerID, s.passes.Passes()), strPtr(msStamp(s.passes.Since()))
	}
	if s.sweeperStats != nil {
		st := s.sweeperStats()
		c.Sweeper = &sweeperShare{Broker: s.cfg.ServerID, Cycles: st.Cycles, Fired: st.Fired, Pruned: st.Pruned}
	}
	writeJSON(w, http.StatusOK, c)
}
