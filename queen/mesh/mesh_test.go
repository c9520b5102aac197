package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type got struct {
	from string
	f    Frame
}

// pair starts two meshes on loopback pointed at each other.
func pair(t *testing.T, secretA, secretB string) (a, b *Mesh, toA, toB chan got) {
	t.Helper()
	toA, toB = make(chan got, 100), make(chan got, 100)
	mk := func(id, secret string, ch chan got) *Mesh {
		return New(Options{ServerID: id, Listen: "127.0.0.1:0", Secret: []byte(secret), Log: quiet,
			Heartbeat: 50 * time.Millisecond, DeadAfter: 300 * time.Millisecond,
			Handle: func(from string, f Frame) { ch <- got{from, f} }})
	}
	a, b = mk("a", secretA, toA), mk("b", secretB, toB)
	for _, m := range []*Mesh{a, b} {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
	}
	// Each learns the other's address only once both are bound.
	a.addPeer(b.Addr())
	b.addPeer(a.Addr())
	return a, b, toA, toB
}

// addPeer is for tests, whose listeners bind port 0: it dials a peer added
// after Start.
func (m *Mesh) addPeer(addr string) {
	p := &peer{addr: addr, q: make(chan []byte, m.o.QueueLen)}
	m.peers = append(m.peers, p)
	m.wg.Add(1)
	go m.dialLoop(m.base, p)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHintReachesPeer(t *testing.T) {
	a, b, _, toB := pair(t, "s3cret", "s3cret")
	waitFor(t, "a's link to b", func() bool { return a.Stats().Peers[0].Connected })
	a.Broadcast(MessageAvailableBatch, Items{Items: []Item{{Queue: "q", Partition: "p"}}})
	select {
	case g := <-toB:
		if g.from != "a" || g.f.Type != MessageAvailableBatch || !bytes.Contains(g.f.Payload, []byte(`"queue":"q"`)) {
			t.Fatalf("got %+v from %s", g.f, g.from)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b never got the hint")
	}
	waitFor(t, "b to count a alive", func() bool { return b.Alive("a") && b.Stats().ServersAlive == 1 })
	// a counts the frame once its write returned, which may be after b
	// handled it.
	waitFor(t, "a to count the frame sent", func() bool { return a.Stats().MessagesSent == 1 })
	if s := a.Stats(); s.Transport != "tcp-mesh" || s.PeerCount != 1 || s.MessagesReceived != 0 {
		t.Fatalf("a's stats: %+v", s)
	}
}

func TestWrongSecretIsRefusedAndCounted(t *testing.T) {
	a, b, _, toB := pair(t, "right", "wrong")
	waitFor(t, "b to refuse a's HELLO", func() bool { return b.Stats().SignatureFailures > 0 })
	if s := b.Stats(); s.HandshakeFailures == 0 || s.ServersAlive != 0 {
		t.Fatalf("b's stats after a bad HELLO: %+v", s)
	}
	a.Broadcast(MaintenanceModeSet, Switch{Enabled: true})
	select {
	case g := <-toB:
		t.Fatalf("b accepted a frame from an unauthenticated peer: %+v", g)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestDeadPeerIsDetectedAndFramesDropped(t *testing.T) {
	a, b, _, _ := pair(t, "s", "s")
	waitFor(t, "b to see a", func() bool { return b.Alive("a") })
	a.Close()
	waitFor(t, "b to count a dead", func() bool { return !b.Alive("a") && b.Stats().ServersDead == 1 })
	waitFor(t, "b's link to a to drop", func() bool { return !b.Stats().Peers[0].Connected })
	before := b.Stats().MessagesDropped
	b.Broadcast(QueueConfigSet, QueueRef{Queue: "q"})
	if got := b.Stats().MessagesDropped; got != before+1 {
		t.Fatalf("a frame to a dead peer was not dropped: dropped %d -> %d", before, got)
	}
}

func TestFullQueueDropsInsteadOfBlocking(t *testing.T) {
	m := New(Options{ServerID: "x", QueueLen: 2, Log: quiet})
	p := &peer{addr: "127.0.0.1:1", q: make(chan []byte, 2)}
	p.connected.Store(true) // connected but never writing: a stalled peer
	m.peers = []*peer{p}
	for range 5 {
		m.Broadcast(MessageAvailable, Item{Queue: "q"})
	}
	if got := m.dropped.Load(); got != 3 {
		t.Fatalf("dropped %d frames, want 3 (queue of 2, 5 sent)", got)
	}
}

func TestFrameLimits(t *testing.T) {
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 0}), MaxFrame); !errors.Is(err, errZeroLength) {
		t.Fatalf("zero length: %v", err)
	}
	var big [4]byte
	binary.BigEndian.PutUint32(big[:], MaxFrame+2)
	if _, err := readFrame(bytes.NewReader(big[:]), MaxFrame); err == nil {
		t.Fatal("an oversized frame was accepted")
	}
	f, err := readFrame(bytes.NewReader(Frame{Type: Heartbeat, Payload: []byte(`{}`)}.encode()), MaxFrame)
	if err != nil || f.Type != Heartbeat || string(f.Payload) != "{}" {
		t.Fatalf("round trip: %+v %v", f, err)
	}
}
