package queen_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/store/storetest"
)

// idleConn is a raw keep-alive connection that sent one GET /health.
type idleConn struct {
	net.Conn
	r *bufio.Reader
}

func openIdle(t *testing.T, addr string) *idleConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ic := &idleConn{Conn: c, r: bufio.NewReader(c)}
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(ic.r, nil)
	if err != nil {
		t.Fatalf("GET /health on a new connection: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return ic
}

// closedByServer reports whether the broker closed c within wait.
func (c *idleConn) closedByServer(wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// metric reads one sample of /metrics/prometheus.
func metric(t *testing.T, client *http.Client, base, name string) float64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("no %s in the metrics", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestIdleConnectionsAreBounded: a client that leaves many idle keep-alive
// connections (one GET /health each) cannot exhaust the broker: beyond
// QUEEN_MAX_CONNECTIONS the longest idle ones are closed to make room, a
// long poll in flight is never among them and gets its message, /health
// answers, and the metrics count what was closed. Before, no connection
// was ever closed (20,000 exhausted the descriptors).
func TestIdleConnectionsAreBounded(t *testing.T) {
	cfg := testConfig(t, storetest.DSN(t))
	cfg.MaxConnections = 8
	b := start(t, cfg)
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	base := "http://" + b.Addr()
	// Every request of the test itself on its own connection: a reused
	// one may be among those closed.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	var idle []*idleConn
	for range 20 {
		idle = append(idle, openIdle(t, b.Addr()))
	}
	// Which 12 close follows the order the server saw each connection go
	// idle, which on a loaded machine may not be the order the client read
	// its answer (the server marks a connection idle after its write): so
	// the oldest must be among them, and 12 in all, not exactly the first 12.
	if !idle[0].closedByServer(10 * time.Second) {
		t.Fatal("the longest idle connection is still open at a bound of 8")
	}
	closed := 1
	for _, c := range idle[1:] {
		if c.closedByServer(time.Second) {
			closed++
		}
	}
	if closed != 12 {
		t.Fatalf("%d of 20 idle connections closed at a bound of 8, want 12", closed)
	}

	polled := make(chan string, 1)
	go func() {
		resp, err := client.Get(base + "/api/v1/pop/queue/lp?wait=true&timeout=30000&autoAck=true")
		if err != nil {
			polled <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		polled <- strconv.Itoa(resp.StatusCode) + " " + string(body)
	}()
	// The poll is parked once the broker counted it.
	for deadline := time.Now().Add(30 * time.Second); metric(t, client, base, `queen_cluster_pop_requests_total\{scope="cluster"\}`) < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the long poll never reached the broker")
		}
	}
	for range 20 {
		idle = append(idle, openIdle(t, b.Addr()))
	}
	if code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"lp","payload":{"n":1}}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	select {
	case got := <-polled:
		if !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"n":1`) {
			t.Fatalf("the long poll: %s", got)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the long poll never answered")
	}
	if code, _ := get(t, base+"/health"); code != 200 {
		t.Fatalf("/health: %d", code)
	}
	if n := metric(t, client, base, "queen_http_connections_evicted_total"); n < 12 {
		t.Fatalf("evicted %v connections, want at least 12", n)
	}
	if n := metric(t, client, base, "queen_http_connections_max"); n != 8 {
		t.Fatalf("queen_http_connections_max %v", n)
	}
}

// TestIdleConnectionsTimeOut: a keep-alive connection idle longer than
// QUEEN_HTTP_IDLE_TIMEOUT_MS is closed by the broker; before, never.
func TestIdleConnectionsTimeOut(t *testing.T) {
	cfg := testConfig(t, storetest.DSN(t))
	cfg.HTTPIdleTimeout = 300 * time.Millisecond
	b := start(t, cfg)
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	if c := openIdle(t, b.Addr()); !c.closedByServer(20 * time.Second) {
		t.Fatal("an idle connection outlived QUEEN_HTTP_IDLE_TIMEOUT_MS by 20 s")
	}
}
