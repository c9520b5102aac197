package mesh

import (
	"net"
	"strconv"
)

// Stats is the mesh's state, as GET /api/v1/system/shared-state reports it.
type Stats struct {
	Enabled            bool        `json:"enabled"`
	ServerID           string      `json:"server_id"`
	Transport          string      `json:"transport"`
	Port               int         `json:"port"`
	PeerCount          int         `json:"peer_count"`
	Peers              []PeerStats `json:"peers"`
	ServersAlive       int         `json:"servers_alive"`
	ServersDead        int         `json:"servers_dead"`
	MessagesSent       int64       `json:"messages_sent"`
	MessagesReceived   int64       `json:"messages_received"`
	MessagesDropped    int64       `json:"messages_dropped"`
	SignatureFailures  int64       `json:"signature_failures"`
	HandshakeFailures  int64       `json:"handshake_failures"`
	SequenceRejections int64       `json:"sequence_rejections"`
	// ConnectionsRefused counts inbound connections closed unread
	// because MaxPending others were still in their handshake.
	ConnectionsRefused int64 `json:"connections_refused"`
}

// PeerStats is one configured peer.
type PeerStats struct {
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Connected  bool   `json:"connected"`
	Resolved   bool   `json:"resolved"`
	ResolvedIP string `json:"resolved_ip,omitempty"`
}

// Stats reports the links and counters. A server counts as alive when a
// frame from it arrived within the dead threshold.
func (m *Mesh) Stats() Stats {
	s := Stats{Enabled: true, ServerID: m.o.ServerID, Transport: "tcp-mesh", PeerCount: len(m.peers),
		Peers: []PeerStats{}, MessagesSent: m.sent.Load(), MessagesReceived: m.received.Load(),
		MessagesDropped: m.dropped.Load(), SignatureFailures: m.signatureFailures.Load(),
		HandshakeFailures: m.handshakeFailures.Load(), SequenceRejections: m.sequenceRejections.Load(),
		ConnectionsRefused: m.refused.Load()}
	if m.ln != nil {
		if _, port, err := net.SplitHostPort(m.ln.Addr().String()); err == nil {
			s.Port, _ = strconv.Atoi(port)
		}
	}
	for _, p := range m.peers {
		host, port, _ := net.SplitHostPort(p.addr)
		ps := PeerStats{Host: host, Connected: p.connected.Load()}
		ps.Port, _ = strconv.Atoi(port)
		if r := p.resolved.Load(); r != nil {
			ps.Resolved = true
			ps.ResolvedIP, _, _ = net.SplitHostPort(*r)
		}
		s.Peers = append(s.Peers, ps)
	}
	m.mu.Lock()
	now := m.o.Clock.Now()
	for _, t := range m.seen {
		if now.Sub(t) < m.o.DeadAfter {
			s.ServersAlive++
		} else {
			s.ServersDead++
		}
	}
	m.mu.Unlock()
	return s
}

// Alive reports whether a frame from server id arrived within the dead
// threshold.
func (m *Mesh) Alive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.seen[id]
	return ok && m.o.Clock.Now().Sub(t) < m.o.DeadAfter
}
