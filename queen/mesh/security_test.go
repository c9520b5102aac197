package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// listener starts a mesh that only accepts (no peers), with secret.
func listener(t *testing.T, secret string) (*Mesh, chan got) {
	t.Helper()
	return listenerDeadAfter(t, secret, 500*time.Millisecond)
}

// listenerDeadAfter is listener with its own dead threshold, which also
// bounds how long a handshake may hold its place.
func listenerDeadAfter(t *testing.T, secret string, deadAfter time.Duration) (*Mesh, chan got) {
	t.Helper()
	ch := make(chan got, 100)
	m := New(Options{ServerID: "b", Listen: "127.0.0.1:0", Secret: []byte(secret), Log: quiet,
		Heartbeat: 50 * time.Millisecond, DeadAfter: deadAfter,
		Handle: func(from string, f Frame) { ch <- got{from, f} }})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, ch
}

// recorder is a connection that keeps what its owner wrote.
type recorder struct {
	net.Conn
	wrote bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote.Write(b)
	return r.Conn.Write(b)
}

// dialAs runs a dialer's handshake against m's listener and returns the
// connection (recording what it wrote) and its session.
func dialAs(t *testing.T, m *Mesh, id, secret string) (*recorder, *session) {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rec := &recorder{Conn: c}
	sess, _, err := dialHandshake(rec, id, []byte(secret))
	if err != nil {
		t.Fatalf("handshake as %s: %v", id, err)
	}
	return rec, sess
}

func expectNothing(t *testing.T, ch chan got, what string) {
	t.Helper()
	select {
	case g := <-ch:
		t.Fatalf("%s: the receiver handled %+v from %s", what, g.f, g.from)
	case <-time.After(300 * time.Millisecond):
	}
}

func maintenance() []byte {
	return Frame{Type: MaintenanceModeSet, Payload: []byte(`{"enabled":true}`)}.encode()
}

// A recorded connection (HELLO, PROOF and a sealed MAINTENANCE frame) sent
// again on a new connection is refused: the acceptor's fresh nonce makes
// the recorded PROOF wrong. Before, the receiver never challenged, and a
// replayed HELLO followed by a MAINTENANCE frame was handled.
func TestReplayedHandshakeIsRefused(t *testing.T) {
	m, ch := listener(t, "s3cret")
	rec, sess := dialAs(t, m, "a", "s3cret")
	if _, err := rec.Write(sess.seal(maintenance())); err != nil {
		t.Fatal(err)
	}
	if g := <-ch; g.from != "a" || g.f.Type != MaintenanceModeSet {
		t.Fatalf("the genuine frame: %+v from %s", g.f, g.from)
	}
	before := m.Stats()
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.Copy(io.Discard, c) // the challenge, unread by a replayer
	if _, err := c.Write(rec.wrote.Bytes()); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, ch, "a replayed connection")
	waitFor(t, "the replay to be counted", func() bool {
		s := m.Stats()
		return s.SignatureFailures > before.SignatureFailures && s.HandshakeFailures > before.HandshakeFailures
	})
}

// On an authenticated link, a frame replayed, reordered or spliced in from
// another connection is refused and closes the link.
func TestReplayedReorderedAndSplicedFramesAreRefused(t *testing.T) {
	m, ch := listener(t, "s3cret")
	for _, tc := range []struct {
		name  string
		frame func(own, other *session) [][]byte
		count func(Stats) int64
	}{
		{"replayed", func(own, _ *session) [][]byte {
			f := own.seal(maintenance())
			return [][]byte{f, f}
		}, func(s Stats) int64 { return s.SequenceRejections }},
		{"reordered", func(own, _ *session) [][]byte {
			first, second := own.seal(maintenance()), own.seal(maintenance())
			return [][]byte{second, first}
		}, func(s Stats) int64 { return s.SequenceRejections }},
		{"spliced", func(_, other *session) [][]byte {
			return [][]byte{other.seal(maintenance())}
		}, func(s Stats) int64 { return s.SignatureFailures }},
		{"unsealed", func(*session, *session) [][]byte {
			return [][]byte{maintenance()}
		}, func(s Stats) int64 { return s.SignatureFailures }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, own := dialAs(t, m, "a", "s3cret")
			_, other := dialAs(t, m, "c", "s3cret")
			frames := tc.frame(own, other)
			before := tc.count(m.Stats())
			for _, f := range frames {
				_, _ = rec.Write(f)
			}
			handled := 0
			for done := false; !done; {
				select {
				case <-ch:
					handled++
				case <-time.After(300 * time.Millisecond):
					done = true
				}
			}
			// A replayed or reordered pair may get its first frame in;
			// never the second.
			if handled >= len(frames) {
				t.Fatalf("%d of %d frames handled", handled, len(frames))
			}
			waitFor(t, "the refusal to be counted", func() bool { return tc.count(m.Stats()) > before })
			// The link is closed: the refused frame's connection reads EOF.
			_ = rec.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := rec.Read(make([]byte, 1)); err == nil || errors.Is(err, errBadSeal) {
				t.Fatalf("the link stayed open after a refused frame: %v", err)
			}
		})
	}
}

func TestSessionOpenChecksMACAndSequence(t *testing.T) {
	a, b := newSession([]byte("k")), newSession([]byte("k"))
	read := func(wire []byte) (Frame, error) {
		f, err := readFrame(bytes.NewReader(wire), MaxFrame+sealSize)
		if err != nil {
			return Frame{}, err
		}
		return b.open(f)
	}
	one := a.seal(maintenance())
	if f, err := read(one); err != nil || f.Type != MaintenanceModeSet || string(f.Payload) != `{"enabled":true}` {
		t.Fatalf("a genuine frame: %+v %v", f, err)
	}
	if _, err := read(one); !errors.Is(err, errBadSeq) {
		t.Fatalf("a replayed frame: %v", err)
	}
	two := a.seal(maintenance())
	two[6] ^= 1 // a payload byte changed in flight
	if _, err := read(two); !errors.Is(err, errBadSeal) {
		t.Fatalf("a tampered frame: %v", err)
	}
	if _, err := read(newSession([]byte("other")).seal(maintenance())); !errors.Is(err, errBadSeal) {
		t.Fatalf("a frame under another key: %v", err)
	}
}

// The acceptor must prove the secret too: a dialer refuses a CHALLENGE
// under the wrong secret, so a broker never sends hints to an impostor.
func TestDialerRefusesAnAcceptorWithoutTheSecret(t *testing.T) {
	m, _ := listener(t, "wrong")
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := dialHandshake(c, "a", []byte("right")); !errors.Is(err, errBadMAC) {
		t.Fatalf("dialer accepted an acceptor under another secret: %v", err)
	}
}

// A thousand unauthenticated connections, half of them sending a length
// prefix that claims 16 MiB, keep the heap within a few MiB: before the
// handshake a frame is capped at PreAuthMaxFrame, and connections past
// MaxPending are closed unread. Before, eight such writes grew the heap by
// 127 MiB.
func TestUnauthenticatedConnectionsStayCheap(t *testing.T) {
	// Every other connection sends two bytes of a header and holds its
	// place until the dead threshold, long here: the places fill however
	// fast the acceptor turns the junk away, so the cap is reached on a
	// busy machine too (with every connection junk, a loaded machine could
	// refuse each before the next came, and none past the cap).
	m, _ := listenerDeadAfter(t, "s3cret", 30*time.Second)
	junk := make([]byte, 5)
	binary.BigEndian.PutUint32(junk, 16<<20)
	junk[4] = byte(Hello)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	conns := make([]net.Conn, 0, 1000)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 1000 {
		c, err := net.Dial("tcp", m.Addr())
		if err != nil {
			t.Fatalf("after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
		if len(conns)%2 == 0 {
			_, _ = c.Write(junk[:2])
		} else {
			_, _ = c.Write(junk)
		}
	}
	waitFor(t, "the connections past the cap to be refused", func() bool { return m.Stats().ConnectionsRefused > 0 })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("1000 junk connections: heap grew %d KiB, %d refused, %d handshake failures", grew>>10, m.Stats().ConnectionsRefused, m.Stats().HandshakeFailures)
	if grew > 8<<20 {
		t.Fatalf("1000 unauthenticated connections grew the heap by %d MiB", grew>>20)
	}
	// The pending places come back: a genuine peer still gets in.
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	waitFor(t, "the pending places to free", func() bool { return m.pending.Load() == 0 })
	dialAs(t, m, "a", "s3cret")
}

// A handshake that never finishes is cut at the dead threshold.
func TestSilentHandshakeIsCutAtTheDeadline(t *testing.T) {
	m, _ := listener(t, "s3cret")
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the acceptor wrote to a connection that sent nothing")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a silent handshake held its place for %v (dead threshold 500ms)", d)
	}
	waitFor(t, "the place to free", func() bool { return m.pending.Load() == 0 })
}

// FuzzReadFrame: whatever the bytes, readFrame does not panic, returns at
// most max payload bytes, and reads no more than the frame it returns (a
// length past the cap is refused after its 4-byte prefix, before any
// allocation of that size).
func FuzzReadFrame(f *testing.F) {
	f.Add(Frame{Type: Heartbeat, Payload: []byte(`{}`)}.encode())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 4})
	f.Add(newSession([]byte("k")).seal(maintenance()))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		fr, err := readFrame(r, PreAuthMaxFrame)
		read := len(in) - r.Len()
		if err != nil {
			if len(in) >= 4 && binary.BigEndian.Uint32(in)-1 > PreAuthMaxFrame && read > 4 {
				t.Fatalf("read %d bytes of a frame whose length exceeds the cap", read)
			}
			return
		}
		if len(fr.Payload) > PreAuthMaxFrame || read != 5+len(fr.Payload) {
			t.Fatalf("frame of %d bytes after reading %d", len(fr.Payload), read)
		}
	})
}

// FuzzAcceptHandshake: whatever a peer without the secret sends, the
// acceptor does not panic, does not authenticate it, and reads no more
// than two pre-authentication frames.
func FuzzAcceptHandshake(f *testing.F) {
	var seed bytes.Buffer
	seed.Write(Frame{Type: Hello, Payload: []byte(`{"server_id":"a","nonce":"00112233445566778899aabbccddeeff"}`)}.encode())
	seed.Write(Frame{Type: Proof, Payload: []byte(`{"mac":"00"}`)}.encode())
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 1, 0, 4, '{'})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		conn := struct {
			io.Reader
			io.Writer
		}{r, io.Discard}
		if _, _, err := acceptHandshake(conn, "b", []byte("s3cret")); err == nil {
			t.Fatal("a peer without the secret was authenticated")
		}
		if read := len(in) - r.Len(); read > 2*(5+PreAuthMaxFrame) {
			t.Fatalf("read %d bytes before authentication", read)
		}
	})
}
