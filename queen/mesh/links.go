package mesh

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Reconnect backoff bounds.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 5 * time.Second
)

// dialLoop keeps an outbound connection to p, reconnecting with backoff.
func (m *Mesh) dialLoop(ctx context.Context, p *peer) {
	defer m.wg.Done()
	backoff := backoffMin
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, m.o.DeadAfter)
		conn, err := m.o.Transport.Dial(dctx, p.addr)
		cancel()
		if err != nil {
			if !sleep(ctx, m.o.Clock, backoff) {
				return
			}
			backoff = min(2*backoff, backoffMax)
			continue
		}
		backoff = backoffMin
		ra := conn.RemoteAddr().String()
		p.resolved.Store(&ra)
		// Frames queued for an earlier connection are stale hints.
		for len(p.q) > 0 {
			<-p.q
		}
		p.connected.Store(true)
		err = m.send(ctx, conn, p)
		p.connected.Store(false)
		_ = conn.Close()
		if ctx.Err() == nil {
			m.o.Log.Debug("mesh: link to peer closed", "peer", p.addr, "err", err)
		}
	}
}

// send writes the HELLO, then queued frames and heartbeats, until the
// connection fails or ctx ends. The peer never writes on this connection;
// reading it only tells when the peer closed it.
func (m *Mesh) send(ctx context.Context, conn net.Conn, p *peer) error {
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	defer func() { _ = conn.Close(); <-closed }()
	h, err := newHello(m.o.ServerID, m.o.Secret)
	if err != nil {
		return err
	}
	if err := m.write(conn, h); err != nil {
		return err
	}
	hb, _ := json.Marshal(heartbeat{ServerID: m.o.ServerID})
	beat := Frame{Type: Heartbeat, Payload: hb}.encode()
	for {
		tick := m.o.Clock.NewTimer(m.o.Heartbeat)
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-closed:
			tick.Stop()
			return io.EOF
		case b := <-p.q:
			tick.Stop()
			if err := m.write(conn, b); err != nil {
				m.dropped.Add(1)
				return err
			}
			m.sent.Add(1)
		case <-tick.C():
			if err := m.write(conn, beat); err != nil {
				return err
			}
		}
	}
}

// write sends one frame in one Write, bounded by the dead threshold.
func (m *Mesh) write(conn net.Conn, b []byte) error {
	_ = conn.SetWriteDeadline(clock.SocketDeadline(m.o.DeadAfter))
	_, err := conn.Write(b)
	return err
}

// accept serves inbound connections until the listener closes.
func (m *Mesh) accept(ctx context.Context) {
	defer m.wg.Done()
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				m.o.Log.Error("mesh: accept failed; no more inbound links", "err", err)
			}
			return
		}
		m.mu.Lock()
		if ctx.Err() != nil {
			m.mu.Unlock()
			_ = conn.Close()
			return
		}
		m.inbound[conn] = true
		m.mu.Unlock()
		m.wg.Add(1)
		go m.receive(conn)
	}
}

// receive checks the HELLO, then hands every frame to the handler. A link
// silent for the dead threshold is closed; the peer redials.
func (m *Mesh) receive(conn net.Conn) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.inbound, conn)
		m.mu.Unlock()
		_ = conn.Close()
	}()
	_ = conn.SetReadDeadline(clock.SocketDeadline(m.o.DeadAfter))
	f, err := readFrame(conn)
	if err != nil {
		m.handshakeFailures.Add(1)
		return
	}
	from, err := m.checkHello(f)
	if err != nil {
		m.handshakeFailures.Add(1)
		m.o.Log.Warn("mesh: refused a connection with a bad HELLO", "remote", conn.RemoteAddr().String())
		return
	}
	m.touch(from)
	for {
		_ = conn.SetReadDeadline(clock.SocketDeadline(m.o.DeadAfter))
		f, err := readFrame(conn)
		if err != nil {
			return
		}
		m.touch(from)
		switch f.Type {
		case Hello, Heartbeat:
		default:
			m.received.Add(1)
			m.o.Handle(from, f)
		}
	}
}

func (m *Mesh) touch(id string) {
	m.mu.Lock()
	m.seen[id] = m.o.Clock.Now()
	m.mu.Unlock()
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
