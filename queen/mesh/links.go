package mesh

import (
	"context"
	"encoding/json"
	"errors"
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

// send runs the handshake, then writes queued frames and heartbeats,
// each sealed under the session, until the connection fails or ctx ends.
// After the handshake the peer never writes on this connection; reading
// it only tells when the peer closed it.
func (m *Mesh) send(ctx context.Context, conn net.Conn, p *peer) error {
	_ = conn.SetDeadline(clock.SocketDeadline(m.o.DeadAfter))
	sess, peerID, err := dialHandshake(conn, m.o.ServerID, m.o.Secret)
	if err != nil {
		m.handshakeFailures.Add(1)
		if errors.Is(err, errBadMAC) {
			m.signatureFailures.Add(1)
			m.refusalLog.warn(m.o.Clock.Now(), m.o.Log, "mesh: peer failed the handshake (wrong QUEEN_SYNC_SECRET?)", "peer", p.addr, "server_id", peerID)
		}
		return err
	}
	_ = conn.SetDeadline(time.Time{})
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	defer func() { _ = conn.Close(); <-closed }()
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
			if err := m.write(conn, sess.seal(b)); err != nil {
				m.dropped.Add(1)
				return err
			}
			m.sent.Add(1)
		case <-tick.C():
			if err := m.write(conn, sess.seal(beat)); err != nil {
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

// accept serves inbound connections until the listener closes. At most
// MaxPending may be in their handshake at once; another is closed at once.
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
		if m.pending.Add(1) > int64(m.o.MaxPending) {
			m.pending.Add(-1)
			m.refused.Add(1)
			m.refusalLog.warn(m.o.Clock.Now(), m.o.Log, "mesh: refused a connection: too many unauthenticated connections",
				"remote", conn.RemoteAddr().String(), "max_pending", m.o.MaxPending)
			_ = conn.Close()
			continue
		}
		m.mu.Lock()
		if ctx.Err() != nil {
			m.mu.Unlock()
			m.pending.Add(-1)
			_ = conn.Close()
			return
		}
		m.inbound[conn] = true
		m.mu.Unlock()
		m.wg.Add(1)
		go m.receive(conn)
	}
}

// receive runs the handshake, then opens every frame and hands it to the
// handler. A frame whose MAC or sequence number is wrong closes the link;
// so does silence for the dead threshold. The peer redials.
func (m *Mesh) receive(conn net.Conn) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.inbound, conn)
		m.mu.Unlock()
		_ = conn.Close()
	}()
	sess, from, err := m.admit(conn)
	if err != nil {
		return
	}
	m.touch(from)
	for {
		_ = conn.SetReadDeadline(clock.SocketDeadline(m.o.DeadAfter))
		f, err := readFrame(conn, MaxFrame+sealSize)
		if err == nil {
			f, err = sess.open(f)
		}
		if err != nil {
			m.refuseFrame(from, conn, err)
			return
		}
		m.touch(from)
		switch f.Type {
		case Hello, Challenge, Proof, Heartbeat:
		default:
			m.received.Add(1)
			m.o.Handle(from, f)
		}
	}
}

// admit runs the acceptor's handshake under the pre-authentication bounds
// (the dead threshold as its deadline, PreAuthMaxFrame) and gives the
// connection's pending place back, whatever the outcome.
func (m *Mesh) admit(conn net.Conn) (*session, string, error) {
	defer m.pending.Add(-1)
	_ = conn.SetDeadline(clock.SocketDeadline(m.o.DeadAfter))
	sess, from, err := acceptHandshake(conn, m.o.ServerID, m.o.Secret)
	_ = conn.SetDeadline(time.Time{})
	if err != nil {
		m.handshakeFailures.Add(1)
		if errors.Is(err, errBadMAC) {
			m.signatureFailures.Add(1)
		}
		m.refusalLog.warn(m.o.Clock.Now(), m.o.Log, "mesh: refused a connection that failed the handshake",
			"remote", conn.RemoteAddr().String(), "server_id", from, "err", err)
	}
	return sess, from, err
}

// refuseFrame counts and logs why an authenticated link was closed: a
// frame that failed its MAC or came out of sequence (a replay, a splice,
// a reordering) is refused; a read error is the link ending.
func (m *Mesh) refuseFrame(from string, conn net.Conn, err error) {
	switch {
	case errors.Is(err, errBadSeq):
		m.sequenceRejections.Add(1)
	case errors.Is(err, errBadSeal):
		m.signatureFailures.Add(1)
	default:
		return
	}
	m.refusalLog.warn(m.o.Clock.Now(), m.o.Log, "mesh: closed a link on a refused frame", "server_id", from,
		"remote", conn.RemoteAddr().String(), "err", err)
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
