package httpapi

import (
	"strings"

	"github.com/queen-go/queen/queen/passes"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
)

// Answers of the system routes: maintenance, buffers, mesh, session and
// cluster.

// maintenanceStatus is GET /api/v1/system/maintenance.
type maintenanceStatus struct {
	MaintenanceMode    bool        `json:"maintenanceMode"` // push maintenance: pushes go to the file buffer
	PopMaintenanceMode bool        `json:"popMaintenanceMode"`
	BufferedMessages   int64       `json:"bufferedMessages"`
	BufferHealthy      bool        `json:"bufferHealthy"`
	BufferStats        bufferStats `json:"bufferStats"`
}

// bufferStats is the file buffer's counts, in Queen's shape.
type bufferStats struct {
	PendingCount int64       `json:"pendingCount"`
	FailedCount  int         `json:"failedCount"`
	DBHealthy    bool        `json:"dbHealthy"`
	FailedFiles  failedFiles `json:"failedFiles"`
}

// failedFiles is the buffer's failed files. Queen counts a failover's
// files and QoS 0 files apart; here every one is a failover's.
type failedFiles struct {
	Count         int     `json:"count"`
	TotalBytes    int64   `json:"totalBytes"`
	TotalMB       float64 `json:"totalMB"`
	FailoverCount int     `json:"failoverCount"`
	QoS0Count     int     `json:"qos0Count"` // always 0
}

// maintenanceSwitched is POST /api/v1/system/maintenance.
type maintenanceSwitched struct {
	MaintenanceMode  bool   `json:"maintenanceMode"`
	BufferedMessages int64  `json:"bufferedMessages"`
	BufferHealthy    bool   `json:"bufferHealthy"`
	Message          string `json:"message"` // exact text: operators' tooling greps it
}

// popMaintenanceStatus is GET and POST /api/v1/system/maintenance/pop.
type popMaintenanceStatus struct {
	PopMaintenanceMode bool   `json:"popMaintenanceMode"`
	Message            string `json:"message"`
}

// spoolStatus is GET /api/v1/status/buffers.
type spoolStatus struct {
	Pending         int64 `json:"pending"`
	Failed          int   `json:"failed"`
	DBHealthy       bool  `json:"dbHealthy"`
	Worker          int   `json:"worker"` // always 0: Queen's worker index; one buffer per broker here
	Enabled         bool  `json:"enabled"`
	MaintenanceMode bool  `json:"maintenanceMode"`
	// Dir and Quarantined are an admin's, and only with a buffer;
	// Quarantined is left out too when the files cannot be listed.
	Dir         *string                  `json:"dir,omitempty"`
	Quarantined *[]spool.QuarantinedFile `json:"quarantined,omitempty"`
	*drainCounts
	// Database is the answering broker's record of its database (a
	// field Queen's answer has not); left out when it keeps none.
	Database *databaseRecord `json:"database,omitempty"`
}

// drainCounts are the buffer drainer's counters, there only with a
// drainer.
type drainCounts struct {
	ReplayedFiles    int64 `json:"replayedFiles"`
	QuarantinedFiles int64 `json:"quarantinedFiles"`
	Cooldowns        int64 `json:"cooldowns"`
}

// meshAbsent is the mesh of a broker with no peers, as
// /api/v1/system/cluster shows it.
type meshAbsent struct {
	Enabled  bool       `json:"enabled"` // always false
	ServerID string     `json:"server_id"`
	Peers    []struct{} `json:"peers"` // always empty
}

// sharedStateAbsent is GET /api/v1/system/shared-state on a broker with no
// peers.
type sharedStateAbsent struct {
	meshAbsent
	Transport string `json:"transport"` // always "none"
	PeerCount int    `json:"peer_count"`
}

func newMeshAbsent(serverID string) meshAbsent {
	return meshAbsent{ServerID: serverID, Peers: []struct{}{}}
}

// sessionInfo is GET /api/v1/session: who the caller is and what it may
// do.
type sessionInfo struct {
	AuthEnabled bool   `json:"authEnabled"`
	Sub         string `json:"sub"`
	Tenant      string `json:"tenant"`
	Level       string `json:"level"` // "admin", "read-write" or "read-only"
	CanWrite    bool   `json:"canWrite"`
	CanAdmin    bool   `json:"canAdmin"`
	ServerID    string `json:"serverId"`
}

// clusterInfo is GET /api/v1/system/cluster.
type clusterInfo struct {
	ServerID string          `json:"serverId"`
	Brokers  []clusterBroker `json:"brokers"`
	Leaders  []clusterLeader `json:"leaders"`
	// Mesh is the mesh's own report (meshAbsent without peers), null for
	// a caller who is not an admin: its links name hosts and ports.
	Mesh         any                  `json:"mesh"`
	Timers       []clusterTimerQueue  `json:"timers"`
	KVNamespaces []clusterKVNamespace `json:"kvNamespaces"`
	// Passes are the leader passes the answering broker led since
	// PassesSince (its start), newest first, at most passes.Keep: each
	// broker keeps its own in memory. Sweeper is its share of the timer
	// sweeping, which elects no leader. Each is left out when there is
	// none (no pass led yet, no record kept, no sweeper), so the answer
	// of a broker without them is as it was.
	Passes      []leaderPass  `json:"passes,omitempty"`
	PassesSince *string       `json:"passesSince,omitempty"`
	Sweeper     *sweeperShare `json:"sweeper,omitempty"`
}

// leaderPass is one leader pass a broker led: its role, the backend pid
// of the session holding the lock, when it began, how long it took (null
// while it runs) and how it failed (null: it did not).
type leaderPass struct {
	Role       string  `json:"role"`
	Broker     string  `json:"broker"`
	Session    uint32  `json:"session"`
	Start      string  `json:"start"`
	DurationMs *int64  `json:"durationMs"`
	Error      *string `json:"error"`
}

// sweeperShare is what one broker's sweeper did since its start.
type sweeperShare struct {
	Broker string `json:"broker"`
	Cycles int64  `json:"cycles"`
	Fired  int64  `json:"fired"`  // timers it fired
	Pruned int64  `json:"pruned"` // expired KV rows it deleted
}

// clusterBroker is a broker that recorded a minute lately.
type clusterBroker struct {
	WorkerID   string `json:"workerId"`
	Hostname   string `json:"hostname"`
	Port       int    `json:"port"`
	LastMinute string `json:"lastMinute"`
	Requests   int64  `json:"requests"` // in that minute
	Self       bool   `json:"self"`     // the broker answering
}

// clusterLeader is a leader lock and its holder's server id (null
// between passes).
type clusterLeader struct {
	Name   string  `json:"name"`
	Lock   int64   `json:"lock"`
	Holder *string `json:"holder"`
}

// clusterTimerQueue is a queue's pending timers.
type clusterTimerQueue struct {
	Queue  string `json:"queue"`
	Timers int64  `json:"timers"`
	NextAt string `json:"nextAt"`
}

// clusterKVNamespace is a KV namespace and its live keys, counted up to a
// cap (Capped: there are more).
type clusterKVNamespace struct {
	Namespace string `json:"namespace"`
	Keys      int64  `json:"keys"`
	Capped    bool   `json:"capped"`
}

// newClusterInfo is v's answer on broker self; mesh as clusterInfo says.
func newClusterInfo(self string, v store.ClusterView, mesh any) clusterInfo {
	c := clusterInfo{ServerID: self, Brokers: make([]clusterBroker, len(v.Brokers)),
		Leaders: make([]clusterLeader, len(v.Leaders)), Mesh: mesh,
		Timers: make([]clusterTimerQueue, len(v.Timers)), KVNamespaces: make([]clusterKVNamespace, len(v.KVNamespaces))}
	for i, b := range v.Brokers {
		c.Brokers[i] = clusterBroker{WorkerID: b.ID, Hostname: b.Hostname, Port: b.Port,
			LastMinute: msStamp(b.LastMinute), Requests: b.Requests, Self: b.ID == self}
	}
	for i, l := range v.Leaders {
		c.Leaders[i] = clusterLeader{Name: l.Name, Lock: l.Lock, Holder: strPtr(strings.TrimPrefix(l.Holder, "queen:"))}
	}
	for i, t := range v.Timers {
		c.Timers[i] = clusterTimerQueue{Queue: t.Queue, Timers: t.Timers, NextAt: msStamp(t.NextAt)}
	}
	for i, k := range v.KVNamespaces {
		c.KVNamespaces[i] = clusterKVNamespace{Namespace: k.Namespace, Keys: k.Keys, Capped: k.Capped}
	}
	return c
}

// newLeaderPasses are ps (oldest first) as leaderPass answers of broker
// self, newest first.
func newLeaderPasses(self string, ps []passes.Pass) []leaderPass {
	out := make([]leaderPass, 0, len(ps))
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		lp := leaderPass{Role: p.Role, Broker: self, Session: p.Session, Start: msStamp(p.Start)}
		if !p.End.IsZero() {
			d := p.End.Sub(p.Start).Milliseconds()
			lp.DurationMs = &d
		}
		if p.Err != "" {
			lp.Error = &p.Err
		}
		out = append(out, lp)
	}
	return out
}
