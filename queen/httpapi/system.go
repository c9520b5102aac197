package httpapi

import (
	"context"
	"net/http"
	"strings"

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

// bufferStatus is GET /api/v1/status/buffers. The spool is the broker's,
// shared by every tenant: a read-only token gets the counts only; the
// directory, the quarantined files and their reasons (other tenants'
// queues, partitions and transactionIds) are an admin's (always there
// without auth).
func (s *Server) bufferStatus(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"pending": s.spoolPending(), "failed": s.spoolFailed(),
		"dbHealthy": s.dbHealthy(r.Context()), "worker": 0, "enabled": s.spool != nil,
		"maintenanceMode": s.maint.Push()}
	p, _ := r.Context().Value(principalKey).(auth.Principal)
	if s.spool != nil && s.auth.Allows(p, auth.Admin) {
		body["dir"] = s.spool.Dir()
		if q, err := s.spool.Quarantined(); err == nil {
			body["quarantined"] = q
		}
	}
	if s.drainer != nil {
		body["replayedFiles"] = s.drainer.Replayed.Load()
		body["quarantinedFiles"] = s.drainer.Quarantined.Load()
		body["cooldowns"] = s.drainer.Cooldowns.Load()
	}
	writeJSON(w, http.StatusOK, body)
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
	writeJSON(w, http.StatusOK, map[string]any{"authEnabled": s.auth != nil, "sub": p.Sub, "tenant": tenantOf(r),
		"level": level, "canWrite": canWrite, "canAdmin": canAdmin, "serverId": s.cfg.ServerID})
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
	brokers := []map[string]any{}
	for _, b := range v.Brokers {
		brokers = append(brokers, map[string]any{"workerId": b.ID, "hostname": b.Hostname, "port": b.Port,
			"lastMinute": msTime(&b.LastMinute), "requests": b.Requests, "self": b.ID == s.cfg.ServerID})
	}
	leaders := []map[string]any{}
	for _, l := range v.Leaders {
		leaders = append(leaders, map[string]any{"name": l.Name, "lock": l.Lock, "holder": nullable(strings.TrimPrefix(l.Holder, "queen:"))})
	}
	timers := []map[string]any{}
	for _, t := range v.Timers {
		timers = append(timers, map[string]any{"queue": t.Queue, "timers": t.Timers, "nextAt": msTime(&t.NextAt)})
	}
	kv := []map[string]any{}
	for _, k := range v.KVNamespaces {
		kv = append(kv, map[string]any{"namespace": k.Namespace, "keys": k.Keys, "capped": k.Capped})
	}
	// The mesh's links name hosts and ports: admins only, as on
	// /api/v1/system/shared-state.
	var mesh any
	if p, _ := r.Context().Value(principalKey).(auth.Principal); s.auth.Allows(p, auth.Admin) {
		mesh = map[string]any{"enabled": false, "server_id": s.cfg.ServerID, "peers": []any{}}
		if s.sharedState != nil {
			mesh = s.sharedState()
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"serverId": s.cfg.ServerID, "brokers": brokers, "leaders": leaders,
		"mesh": mesh, "timers": timers, "kvNamespaces": kv})
}
