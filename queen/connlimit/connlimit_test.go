package connlimit

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server serves /fast at once and /slow until release is closed, on a
// real socket behind a Limiter of max connections.
func server(t *testing.T, max int) (addr string, l *Limiter, entered chan struct{}, release chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l = New(max, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	entered, release = make(chan struct{}, 16), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/fast", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "late")
	})
	srv := &http.Server{Handler: mux, ConnState: l.ConnState, ReadHeaderTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l.Listen(ln)) }()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String(), l, entered, release
}

// client is one raw keep-alive connection.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// answer reads one response; "" when the server closed the connection.
func (c *client) answer(t *testing.T) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer and no close within 30 s")
		}
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// closedByServer reports whether the server has closed c (a read ends).
func (c *client) closedByServer(wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func waitIdle(t *testing.T, l *Limiter, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		idle := len(l.idle)
		l.mu.Unlock()
		if idle >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections after 30 s, want %d", idle, n)
		}
	}
}

// TestIdleConnectionsMakeRoom: at the bound, a new connection closes the
// connection idle longest, not a busy one, and is served.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	addr, l, entered, release := server(t, 3)
	busy := dial(t, addr)
	busy.send(t, "/slow")
	<-entered
	idle := []*client{dial(t, addr), dial(t, addr)}
	for i, c := range idle {
		c.send(t, "/fast")
		if got := c.answer(t); got != "ok" {
			t.Fatalf("idle connection's first request: %q", got)
		}
		// The server marks a connection idle after its answer is
		// written, so the client may read it first: wait for the
		// limiter to see it, so idle[0] is the one idle longest.
		waitIdle(t, l, i+1)
	}
	next := dial(t, addr)
	next.send(t, "/fast")
	if got := next.answer(t); got != "ok" {
		t.Fatalf("a connection beyond the bound was not served: %q", got)
	}
	if !idle[0].closedByServer(30 * time.Second) {
		t.Fatal("the oldest idle connection is still open")
	}
	if idle[1].closedByServer(200 * time.Millisecond) {
		t.Fatal("a younger idle connection was closed too")
	}
	close(release)
	if got := busy.answer(t); got != "late" {
		t.Fatalf("the busy connection lost its answer: %q", got)
	}
	if s := l.Stats(); s.Evicted != 1 || s.Refused != 0 || s.Open > 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestBusyConnectionsRefuseNewOnes: when every open connection serves a
// request, a new one is closed unread, and the busy ones still answer.
func TestBusyConnectionsRefuseNewOnes(t *testing.T) {
	addr, l, entered, release := server(t, 2)
	var busy []*client
	for range 2 {
		c := dial(t, addr)
		c.send(t, "/slow")
		<-entered
		busy = append(busy, c)
	}
	extra := dial(t, addr)
	extra.send(t, "/fast")
	if got := extra.answer(t); got != "" {
		t.Fatalf("a connection beyond a busy bound was served: %q", got)
	}
	close(release)
	for _, c := range busy {
		if got := c.answer(t); got != "late" {
			t.Fatalf("a busy connection lost its answer: %q", got)
		}
	}
	if s := l.Stats(); s.Refused != 1 || s.Evicted != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Room again once the bound has idle connections: one is closed.
	waitIdle(t, l, 1)
	again := dial(t, addr)
	again.send(t, "/fast")
	if got := again.answer(t); !strings.Contains(got, "ok") {
		t.Fatalf("after the long requests ended: %q", got)
	}
}
