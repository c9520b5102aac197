// Package mesh passes hints between brokers that share one PostgreSQL.
//
// Every broker dials every peer and sends only on its outbound connections;
// it receives only on the connections it accepted. A connection opens with
// a mutual challenge-response under the shared secret (handshake.go): each
// side's fresh nonce and both server ids go under HMAC-SHA256, and every
// later frame carries a sequence number and a MAC under the session key
// derived from it, so a recorded connection cannot be replayed, reordered
// or spliced. Until the handshake is done a peer gets a frame cap of
// PreAuthMaxFrame, the dead threshold as its deadline, and one of at most
// MaxPending places; a failed handshake or a bad frame closes the
// connection and is counted. Heartbeats keep a link alive; a peer with no
// inbound frame for the dead threshold counts as dead.
//
// Everything on the wire is a hint: pop wakes, maintenance flips, and the
// instruction to forget a cached queue. Messages, offsets, leases and dedup
// state never cross it. A slow or absent peer's frames are dropped, never
// queued beyond a small bound, because every path the mesh accelerates has
// a periodic floor that re-reads the database: a lost frame costs latency,
// nothing else.
//
// Socket deadlines are real time; heartbeats, reconnect backoff and the
// dead threshold follow the Clock.
package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Transport is the mesh's network seam. TCP is production; the simulator
// wraps it to drop, delay and reorder frames per link.
type Transport interface {
	Listen(addr string) (net.Listener, error)
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCP is the production transport.
type TCP struct{}

// Listen implements Transport.
func (TCP) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// Dial implements Transport; the host is resolved again on every dial.
func (TCP) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// Options configure a Mesh.
type Options struct {
	ServerID string
	// Listen is the address to accept peers on (":6633").
	Listen string
	// Peers are the brokers to dial, host:port each.
	Peers []string
	// Secret keys the handshake and the frames' MACs; empty is open mode
	// (the same exchange under an empty key, which proves nothing).
	Secret []byte
	// MaxPending caps the inbound connections that have not finished
	// the handshake; one more is closed at once and counted. Default 32.
	MaxPending int
	Heartbeat  time.Duration // default 1 s
	DeadAfter  time.Duration // default 5 s
	QueueLen   int           // frames waiting per peer before drops; default 1024
	Transport  Transport     // default TCP
	// Clock paces heartbeats and reconnects and dates inbound frames;
	// socket deadlines are real time whatever it says. Default clock.Real.
	Clock clock.Clock
	Log   *slog.Logger
	// Handle receives every frame other than HELLO and HEARTBEAT, on the
	// connection's reader goroutine: it must not block.
	Handle func(from string, f Frame)
}

// Mesh is one broker's end of the mesh.
type Mesh struct {
	o      Options
	ln     net.Listener
	peers  []*peer
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	seen    map[string]time.Time // server id -> last inbound frame
	inbound map[net.Conn]bool

	pending                                                       atomic.Int64 // inbound connections not yet authenticated
	sent, received, dropped, signatureFailures, handshakeFailures atomic.Int64
	sequenceRejections, refused                                   atomic.Int64
	refusalLog                                                    logEvery
}

type peer struct {
	addr      string
	q         chan []byte
	connected atomic.Bool
	resolved  atomic.Pointer[string] // the address the last dial reached
}

// New checks the options; nothing is bound until Start.
func New(o Options) *Mesh {
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.DeadAfter <= 0 {
		o.DeadAfter = 5 * time.Second
	}
	if o.QueueLen <= 0 {
		o.QueueLen = 1024
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 32
	}
	if o.Transport == nil {
		o.Transport = TCP{}
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Handle == nil {
		o.Handle = func(string, Frame) {}
	}
	m := &Mesh{o: o, seen: map[string]time.Time{}, inbound: map[net.Conn]bool{}}
	for _, a := range o.Peers {
		m.peers = append(m.peers, &peer{addr: a, q: make(chan []byte, o.QueueLen)})
	}
	return m
}

// Start binds the listener and starts dialing the peers.
func (m *Mesh) Start() error {
	ln, err := m.o.Transport.Listen(m.o.Listen)
	if err != nil {
		return fmt.Errorf("mesh: listen %s: %w", m.o.Listen, err)
	}
	m.ln = ln
	ctx, cancel := context.WithCancel(context.Background())
	m.base, m.cancel = ctx, cancel
	m.wg.Add(1)
	go m.accept(ctx)
	for _, p := range m.peers {
		m.wg.Add(1)
		go m.dialLoop(ctx, p)
	}
	m.o.Log.Info("mesh listening", "addr", ln.Addr().String(), "peers", m.o.Peers, "secured", len(m.o.Secret) > 0)
	return nil
}

// Addr is the bound listen address.
func (m *Mesh) Addr() string { return m.ln.Addr().String() }

// Close stops dialing and accepting and closes every connection.
func (m *Mesh) Close() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	_ = m.ln.Close()
	m.mu.Lock()
	for c := range m.inbound {
		_ = c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// Broadcast sends a hint to every peer. It never blocks: a peer that is
// down or whose queue is full loses the frame, and the drop is counted.
func (m *Mesh) Broadcast(t Type, payload any) {
	body, err := json.Marshal(payload)
	if err != nil {
		m.o.Log.Error("mesh: encoding a frame failed", "type", t, "err", err)
		return
	}
	b := Frame{Type: t, Payload: body}.encode()
	for _, p := range m.peers {
		if !p.connected.Load() {
			m.dropped.Add(1)
			continue
		}
		select {
		case p.q <- b:
		default:
			m.dropped.Add(1)
		}
	}
}

// logEvery lets a repeated warning through at most once a second, with
// how many were held back: refusals may come by the thousand.
type logEvery struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

func (l *logEvery) warn(now time.Time, log *slog.Logger, msg string, args ...any) {
	l.mu.Lock()
	if now.Sub(l.last) < time.Second {
		l.missed++
		l.mu.Unlock()
		return
	}
	missed := l.missed
	l.last, l.missed = now, 0
	l.mu.Unlock()
	log.Warn(msg, append(args, "similar_since_last", missed)...)
}
