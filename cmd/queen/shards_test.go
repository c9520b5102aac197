package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterShardsMovesAQueue runs `queen cluster-shards` as a user
// would, then its printed demo: a push through the load balancer, the
// queue's move to s1, its state until done, the placements, and a pop of
// the pushed message on s1.
func TestClusterShardsMovesAQueue(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "queen")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	base := basePort(t)
	cmd := exec.Command(bin, "cluster-shards")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(base), "HOST=127.0.0.1", "QUEEN_DEV_DIR="+t.TempDir(),
		"LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var printed []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		printed = append(printed, sc.Text())
		if strings.HasPrefix(sc.Text(), "load balancer ") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	demo := strings.Join(printed, "\n")
	if !strings.Contains(demo, "shards up: catalogue postgres://") || !strings.Contains(demo, "/api/v1/admin/queues/demo/move") {
		t.Fatalf("cluster-shards printed:\n%s", demo)
	}
	lb := fmt.Sprintf("http://127.0.0.1:%d", base)
	eventually(t, "a push through the balancer", func() bool {
		code, _ := call(t, "POST", lb+"/api/v1/push", `{"items":[{"queue":"demo","transactionId":"d1","payload":{"n":1}}]}`)
		return code == 201
	})
	code, body := call(t, "POST", lb+"/api/v1/admin/queues/demo/move", `{"to":"s1"}`)
	var mv struct{ MoveID, State string }
	if err := json.Unmarshal([]byte(body), &mv); code != 202 || err != nil {
		t.Fatalf("move: %d %s", code, body)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, body := call(t, "GET", lb+"/api/v1/admin/moves/"+mv.MoveID, "")
		if strings.Contains(body, `"state":"done"`) {
			break
		}
		if strings.Contains(body, `"state":"failed"`) || time.Now().After(deadline) {
			t.Fatalf("move: %s", body)
		}
	}
	if code, body := call(t, "GET", lb+"/api/v1/admin/placements", ""); code != 200 || !strings.Contains(body, `"queue":"demo","shard":"s1","epoch":2`) {
		t.Fatalf("placements: %d %s", code, body)
	}
	if code, body := call(t, "GET", lb+"/api/v1/pop/queue/demo?batch=10&wait=false", ""); code != 200 || !strings.Contains(body, `"transactionId":"d1"`) {
		t.Fatalf("pop after the move: %d %s", code, body)
	}
}
