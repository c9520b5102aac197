package httpapi_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/config"
)

// A client that stalls in the middle of a body is cut after
// QUEEN_BODY_READ_TIMEOUT_MS; a long poll, which sends no body, outlives
// that bound and answers 204 at its own timeout.
func TestStalledBodyIsCutButLongPollIsNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.BodyReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	half := `{"items":[{"queue":"q",`
	if _, err := conn.Write([]byte("POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Content-Length: 100\r\n\r\n" + half)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		resp.Body.Close()
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("a stalled body held the request for %v", el)
	}
	if err == nil && resp.StatusCode < 400 {
		t.Fatalf("a stalled body was answered %d", resp.StatusCode)
	}

	start = time.Now()
	r, err := http.Get(e.url + "/api/v1/pop/queue/nothing?wait=true&timeout=1200")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 204 || time.Since(start) < time.Second {
		t.Fatalf("long poll: %d after %v", r.StatusCode, time.Since(start))
	}
}
