package faults

import (
	"context"
	"net"

	"github.com/queen-go/queen/queen/mesh"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MeshNet carries the mesh between simulated brokers over loopback TCP and
// drops, delays or reorders whole frames per link (from one broker to
// another). It relies on the mesh writing each frame in one Write.
type MeshNet struct {
	ports []int // broker i's mesh port

	mu    sync.Mutex
	links map[[2]int]*linkFault // (from, to) -> what happens to its frames

	// Counters over the whole run, across broker restarts.
	Passed, Dropped, Delayed, Reordered atomic.Int64
}

type linkFault struct {
	drop, reorder time.Time // in effect until
	delay         time.Duration
	delayUntil    time.Time
}

// NewMeshNet returns a network for brokers whose mesh ports are ports.
func NewMeshNet(ports []int) *MeshNet {
	return &MeshNet{ports: ports, links: map[[2]int]*linkFault{}}
}

// Port is broker i's mesh port.
func (n *MeshNet) Port(i int) int { return n.ports[i] }

// Peers is the peer list of broker i.
func (n *MeshNet) Peers(i int) []string {
	var out []string
	for j, p := range n.ports {
		if j != i {
			out = append(out, "127.0.0.1:"+strconv.Itoa(p))
		}
	}
	return out
}

func (n *MeshNet) link(from, to int) *linkFault {
	k := [2]int{from, to}
	if n.links[k] == nil {
		n.links[k] = &linkFault{}
	}
	return n.links[k]
}

// each applies f to the links from broker from (-1: every broker) to every
// other broker.
func (n *MeshNet) each(from int, f func(*linkFault)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.ports {
		for j := range n.ports {
			if i != j && (from < 0 || from == i) {
				f(n.link(i, j))
			}
		}
	}
}

// Drop loses every frame sent by broker from (-1: all) for d.
func (n *MeshNet) Drop(from int, d time.Duration) {
	until := time.Now().Add(d)
	n.each(from, func(l *linkFault) { l.drop = until })
}

// Delay holds every frame sent by broker from for by, for d; frames keep
// their order.
func (n *MeshNet) Delay(from int, by, d time.Duration) {
	until := time.Now().Add(d)
	n.each(from, func(l *linkFault) { l.delay, l.delayUntil = by, until })
}

// Reorder swaps consecutive frames sent by broker from, for d.
func (n *MeshNet) Reorder(from int, d time.Duration) {
	until := time.Now().Add(d)
	n.each(from, func(l *linkFault) { l.reorder = until })
}

// verdict is what happens to the next frame on a link.
func (n *MeshNet) verdict(from, to int) (drop bool, delay time.Duration, reorder bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.link(from, to)
	now := time.Now()
	if now.Before(l.delayUntil) {
		delay = l.delay
	}
	return now.Before(l.drop), delay, now.Before(l.reorder)
}

// Transport is broker from's view of the network, a mesh.Transport.
func (n *MeshNet) Transport(from int) *MeshTransport { return &MeshTransport{net: n, from: from} }

// MeshTransport dials and listens on loopback; its outbound connections
// pass each frame through the link's faults.
type MeshTransport struct {
	net  *MeshNet
	from int
}

// Listen implements mesh.Transport.
func (t *MeshTransport) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// Dial implements mesh.Transport.
func (t *MeshTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	to := -1
	if _, port, err := net.SplitHostPort(addr); err == nil {
		for i, p := range t.net.ports {
			if strconv.Itoa(p) == port {
				to = i
			}
		}
	}
	lc := &linkConn{Conn: c, net: t.net, from: t.from, to: to, out: make(chan timedFrame, 4096), done: make(chan struct{})}
	go lc.writer()
	return lc, nil
}

type timedFrame struct {
	due time.Time
	b   []byte
}

// linkConn writes frames through one goroutine, so a delayed frame holds
// back the frames behind it (order kept) and a reordered one goes out
// after the next.
type linkConn struct {
	net.Conn
	net      *MeshNet
	from, to int

	mu   sync.Mutex
	held []byte // a frame waiting to be overtaken (reorder)
	out  chan timedFrame
	done chan struct{}
	once sync.Once
}

// Write takes one frame.
func (c *linkConn) Write(b []byte) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	if len(b) > 4 && (b[4] == byte(mesh.Hello) || b[4] == byte(mesh.Proof)) {
		// The handshake passes unharmed: a link comes up, then loses,
		// delays or reorders what it carries (which the receiver's
		// sequence check turns into a closed link and a redial).
		c.mu.Lock()
		defer c.mu.Unlock()
		c.send(timedFrame{due: time.Now(), b: append([]byte(nil), b...)})
		return len(b), nil
	}
	drop, delay, reorder := c.net.verdict(c.from, c.to)
	if drop {
		c.net.Dropped.Add(1)
		return len(b), nil
	}
	f := timedFrame{due: time.Now().Add(delay), b: append([]byte(nil), b...)}
	if delay > 0 {
		c.net.Delayed.Add(1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if reorder && c.held == nil {
		c.held = f.b // goes out after the next frame, or on close
		c.net.Reordered.Add(1)
		return len(b), nil
	}
	c.send(f)
	if c.held != nil {
		c.send(timedFrame{due: f.due, b: c.held})
		c.held = nil
	}
	return len(b), nil
}

func (c *linkConn) send(f timedFrame) {
	select {
	case c.out <- f:
	default:
		c.net.Dropped.Add(1) // the link is hopelessly behind
	}
}

func (c *linkConn) writer() {
	for {
		select {
		case <-c.done:
			return
		case f := <-c.out:
			if d := time.Until(f.due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-c.done:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if _, err := c.Conn.Write(f.b); err != nil {
				_ = c.Close()
				return
			}
			c.net.Passed.Add(1)
		}
	}
}

// Close implements net.Conn.
func (c *linkConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}
