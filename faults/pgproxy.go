// Package faults holds the simulator's fault injectors: a TCP proxy in
// front of PostgreSQL, clock skew, and a spool filesystem that fails on
// demand. Each counts what it actually did, so a scenario can require that
// its faults fired ("sometimes" coverage).
package faults

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"
)

// Mode is what a PGProxy does with traffic.
type Mode int

const (
	// Pass forwards bytes both ways.
	Pass Mode = iota
	// Delay forwards bytes after a fixed delay.
	Delay
	// Blackhole accepts connections and silently drops every byte: the
	// database looks alive but never answers.
	Blackhole
	// Refuse closes every connection, new and existing, at once.
	Refuse
)

func (m Mode) String() string {
	return [...]string{"pass", "delay", "blackhole", "refuse"}[m]
}

// PGProxy sits between one broker and PostgreSQL.
type PGProxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	mode        Mode
	delay       time.Duration
	slowConnect time.Duration
	cutAfter    time.Duration
	hold        time.Duration // longest a COMMIT is held (0: none)
	readOnly    bool          // new sessions start read-only
	rng         *rand.Rand
	conns       map[net.Conn]struct{}
	fired       map[string]int
	closed      bool

	wg sync.WaitGroup
}

// NewPGProxy listens on a free loopback port and forwards to target
// (host:port).
func NewPGProxy(target string) (*PGProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &PGProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, fired: map[string]int{},
		rng: rand.New(rand.NewPCG(uint64(ln.Addr().(*net.TCPAddr).Port), 0x4e1d))}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port is the proxy's listening port on 127.0.0.1.
func (p *PGProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetMode switches the proxy. Refuse also cuts every open connection.
func (p *PGProxy) SetMode(m Mode, delay time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = m, delay
	p.mu.Unlock()
	if m == Refuse {
		p.Reset()
	}
}

// SetHold holds every other COMMIT a client sends (a simple query, as pgx
// sends it), drawn at random, for max before passing it on, and lets the
// rest pass at once, so that transactions commit in another order than
// they ran their statements; 0 stops holding. Whatever a held transaction
// wrote stays invisible meanwhile.
func (p *PGProxy) SetHold(max time.Duration) {
	p.mu.Lock()
	p.hold = max
	p.mu.Unlock()
}

// holdFor draws how long to hold one COMMIT.
func (p *PGProxy) holdFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold <= 0 || p.rng.IntN(2) == 0 {
		return 0
	}
	return p.hold
}

// SetTarget moves the address: new connections go to target (host:port)
// and every open one is cut, as a VIP or DNS name moved to another server
// does.
func (p *PGProxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.Reset()
}

// SetReadOnly points the broker at a server that refuses writes, as an
// address moved to a standby does during a failover: every open connection
// is cut, and each new session starts with default_transaction_read_only
// on (a startup parameter), so every write in it fails with SQLSTATE 25006
// while reads still answer. Off again, new sessions are writable; the
// read-only ones already open stay read-only until the client drops them
// (a standby's sessions do not turn writable by themselves when the
// address moves back).
func (p *PGProxy) SetReadOnly(on bool) {
	p.mu.Lock()
	p.readOnly = on
	p.mu.Unlock()
	if on {
		p.Reset()
	}
}

// SetSlowConnect makes every new connection wait d before its first byte
// reaches the server, as connecting to a loaded server does; traffic on
// established connections is not slowed. Zero turns it off.
func (p *PGProxy) SetSlowConnect(d time.Duration) {
	p.mu.Lock()
	p.slowConnect = d
	p.mu.Unlock()
}

// SetBlackholeCut makes a blackholed connection close d after the first
// byte it swallowed, instead of hanging until the client gives up. The
// lockstep simulator uses it so that a blackhole ends after a bounded time
// it controls, and the broker's own timeouts can be generous enough never
// to fire on a loaded machine outside a fault: a timeout racing a slow
// machine is exactly what made runs differ. Zero is a true blackhole.
func (p *PGProxy) SetBlackholeCut(d time.Duration) {
	p.mu.Lock()
	p.cutAfter = d
	p.mu.Unlock()
}

// Reset closes every open connection (a network blip); the mode is kept.
func (p *PGProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Fired reports how often each fault touched traffic, by name
// (pg.refuse, pg.blackhole, pg.delay).
func (p *PGProxy) Fired() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.fired))
	for k, v := range p.fired {
		out[k] = v
	}
	return out
}

// Close stops the proxy and cuts every connection.
func (p *PGProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *PGProxy) state() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay
}

func (p *PGProxy) note(fault string) {
	p.mu.Lock()
	p.fired[fault]++
	p.mu.Unlock()
}

func (p *PGProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *PGProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *PGProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		mode, _ := p.state()
		if mode == Refuse {
			p.note("pg.refuse")
			client.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *PGProxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		client.Close()
		return
	}
	defer p.untrack(client)
	p.mu.Lock()
	slow := p.slowConnect
	p.mu.Unlock()
	if slow > 0 {
		p.note("pg.slow-connect")
		time.Sleep(slow)
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	fe := &frontend{}
	p.mu.Lock()
	ro := p.readOnly
	p.mu.Unlock()
	if ro && !p.startReadOnly(client, server, fe) {
		return
	}
	done := make(chan struct{}, 2)
	p.wg.Add(2)
	go p.pipe(server, client, fe, done)
	go p.pipe(client, server, nil, done)
	<-done
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst, applying the proxy's mode to each chunk; fe,
// set on the client's side, finds the COMMITs to hold.
func (p *PGProxy) pipe(dst, src net.Conn, fe *frontend, done chan<- struct{}) {
	defer p.wg.Done()
	defer func() { done <- struct{}{} }()
	var cut sync.Once
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch mode, delay := p.state(); mode {
			case Blackhole:
				p.note("pg.blackhole")
				p.cutLater(&cut, src, dst)
				continue
			case Refuse:
				p.note("pg.refuse")
				return
			case Delay:
				p.note("pg.delay")
				time.Sleep(delay)
			}
			if fe != nil && fe.scan(buf[:n]) {
				if d := p.holdFor(); d > 0 {
					p.note("pg.hold")
					time.Sleep(d)
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// startReadOnly forwards the client's first packet, a startup message
// given default_transaction_read_only=on; any other first packet (an SSL
// request) passes as it is. fe sees what was sent.
func (p *PGProxy) startReadOnly(client, server net.Conn, fe *frontend) bool {
	var hdr [8]byte
	if _, err := io.ReadFull(client, hdr[:]); err != nil {
		return false
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n < 8 || n > 1<<16 {
		return false
	}
	pkt := make([]byte, n)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(client, pkt[8:]); err != nil {
		return false
	}
	if binary.BigEndian.Uint32(hdr[4:])>>16 == 3 && pkt[n-1] == 0 {
		// Protocol 3: name/value pairs, then a zero byte.
		pkt = append(pkt[:n-1], "default_transaction_read_only\x00on\x00\x00"...)
		binary.BigEndian.PutUint32(pkt, uint32(len(pkt)))
		p.note("pg.readonly.sessions")
	}
	fe.scan(pkt)
	_, err := server.Write(pkt)
	return err == nil
}

// cutLater closes both ends of a blackholed connection after the cut
// delay, once per direction; without a cut delay the connection hangs.
func (p *PGProxy) cutLater(once *sync.Once, a, b net.Conn) {
	p.mu.Lock()
	d := p.cutAfter
	p.mu.Unlock()
	if d <= 0 {
		return
	}
	once.Do(func() {
		time.AfterFunc(d, func() {
			a.Close()
			b.Close()
		})
	})
}

// HostPort splits "host:port".
func HostPort(addr string) (string, int) {
	h, ps, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(ps)
	return h, port
}
