package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// basePort finds a port p with p, p+10, p+11, p+20 and p+21 all free.
func basePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		p := 20000 + 10*rand.IntN(4000)
		free := true
		for _, off := range []int{0, 10, 11, 20, 21} {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+off))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return p
		}
	}
	t.Fatal("no free ports")
	return 0
}

type runningCluster struct {
	cmd  *exec.Cmd
	lb   string
	urls map[string]string // server id -> base URL
	pids map[string]int
}

// startCluster builds this binary and runs `queen cluster` against the
// test's database. Every periodic floor is an hour, so whatever reaches a
// broker quickly came over the mesh.
func startCluster(t *testing.T) *runningCluster {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "queen")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pc, err := pgx.ParseConfig(storetest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	base := basePort(t)
	cmd := exec.Command(bin, "cluster")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(base), "HOST=127.0.0.1",
		"PG_HOST="+pc.Host, fmt.Sprintf("PG_PORT=%d", pc.Port), "PG_USER="+pc.User, "PG_PASSWORD="+pc.Password,
		"PG_DATABASE="+pc.Database, "QUEEN_DEV_DIR="+t.TempDir(), "LOG_LEVEL=warn",
		"POP_WAIT_INITIAL_INTERVAL_MS=3600000", "POP_WAIT_MAX_INTERVAL_MS=3600000",
		"QUEEN_CACHE_REFRESH_INTERVAL_MS=3600000", "QUEEN_SYNC_HEARTBEAT_MS=200", "QUEEN_SYNC_DEAD_THRESHOLD_MS=2000",
		"DB_POOL_SIZE=10")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &runningCluster{cmd: cmd, urls: map[string]string{}, pids: map[string]int{}}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			for _, pid := range c.pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			<-done
		}
	})
	line := regexp.MustCompile(`^broker (\S+) pid=(\d+) http=(\S+) `)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			c.urls[m[1]] = "http://" + m[3]
			c.pids[m[1]], _ = strconv.Atoi(m[2])
		}
		if strings.HasPrefix(sc.Text(), "load balancer ") {
			c.lb = fmt.Sprintf("http://127.0.0.1:%d", base)
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if len(c.urls) != 2 || c.lb == "" {
		t.Fatalf("cluster did not start: %v", c.urls)
	}
	for id, u := range c.urls {
		eventually(t, id+" linked to its peer", func() bool {
			var s struct {
				ServersAlive int `json:"servers_alive"`
			}
			code, body := call(t, "GET", u+"/api/v1/system/shared-state", "")
			return code == 200 && json.Unmarshal([]byte(body), &s) == nil && s.ServersAlive == 1
		})
	}
	return c
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type popped struct {
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
	} `json:"messages"`
}

func pop(t *testing.T, url string) popped {
	t.Helper()
	code, body := call(t, "GET", url, "")
	var p popped
	if code == 204 {
		return p
	}
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil {
		t.Fatalf("pop %s: %d %s", url, code, body)
	}
	return p
}

// TestClusterCommand runs `queen cluster` and checks what the HA topology
// promises: a long poll on one broker is woken by a push on the other; a
// lease taken on one is acked on the other; killing one with SIGKILL while
// it holds leases loses nothing, and the other redelivers after leaseTime;
// the load balancer keeps serving.
func TestClusterCommand(t *testing.T) {
	c := startCluster(t)
	a, b := c.urls["queen-a"], c.urls["queen-b"]
	if code, body := call(t, "POST", a+"/api/v1/configure", `{"queue":"kq","options":{"leaseTime":2}}`); code != 200 {
		t.Fatalf("configure: %d %s", code, body)
	}

	// A long poll on b that would wait two minutes, re-checking hourly.
	woken := make(chan popped, 1)
	go func() {
		code, body := call(t, "GET", b+"/api/v1/pop/queue/kq?wait=true&timeout=120000&autoAck=true", "")
		var p popped
		if code == 200 {
			_ = json.Unmarshal([]byte(body), &p)
		}
		woken <- p
	}()
	time.Sleep(300 * time.Millisecond)
	if code, body := call(t, "POST", a+"/api/v1/push", `{"items":[{"queue":"kq","transactionId":"wake"}]}`); code != 201 {
		t.Fatalf("push on a: %d %s", code, body)
	}
	if p := <-woken; len(p.Messages) != 1 || p.Messages[0].TransactionID != "wake" {
		t.Fatalf("the long poll on b was not woken by a's push (client gave up after 30 s): %+v", p)
	}

	// 20 messages through the load balancer; a leases 5 of them.
	var items []string
	for i := range 20 {
		items = append(items, fmt.Sprintf(`{"queue":"kq","transactionId":"m%02d"}`, i))
	}
	if code, body := call(t, "POST", c.lb+"/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`); code != 201 {
		t.Fatalf("push through the balancer: %d %s", code, body)
	}
	held := pop(t, a+"/api/v1/pop/queue/kq?batch=5")
	if len(held.Messages) != 5 {
		t.Fatalf("a leased %d messages, want 5", len(held.Messages))
	}
	m := held.Messages[0]
	code, body := call(t, "POST", b+"/api/v1/ack", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
		m.TransactionID, m.PartitionID, m.LeaseID))
	if code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("ack on b of a lease taken on a: %d %s", code, body)
	}

	// a dies holding four leases.
	if err := syscall.Kill(c.pids["queen-a"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a to be gone", func() bool {
		code, _ := call(t, "GET", a+"/health", "")
		return code == -1
	})
	for i := range 3 { // the balancer skips the dead broker
		if code, body := call(t, "POST", c.lb+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":"kq","transactionId":"late%d"}]}`, i)); code != 201 {
			t.Fatalf("push through the balancer with a dead: %d %s", code, body)
		}
	}

	// b delivers everything not acked, each once: the 15 never leased, the
	// 3 pushed late, and the 4 a held, after their 2 s lease.
	want := map[string]bool{}
	for i := range 20 {
		want[fmt.Sprintf("m%02d", i)] = true
	}
	for i := range 3 {
		want[fmt.Sprintf("late%d", i)] = true
	}
	delete(want, m.TransactionID)
	got := map[string]int{}
	eventually(t, "b to deliver every message a left behind", func() bool {
		for _, msg := range pop(t, b+"/api/v1/pop/queue/kq?batch=10&autoAck=true").Messages {
			got[msg.TransactionID]++
		}
		return len(got) >= len(want)
	})
	for id, n := range got {
		if !want[id] || n != 1 {
			t.Fatalf("b delivered %s %d times (wanted once, and only what was not acked): %v", id, n, got)
		}
	}
	if code, _ := call(t, "GET", b+"/api/v1/pop/queue/kq?autoAck=true", ""); code != 204 {
		t.Fatalf("something left after the drain: %d", code)
	}
}
