package queen_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// queenBinary builds cmd/queen into the test's temporary directory: the
// tests that run brokers as processes of their own (killed with -9, or
// refused a start) run the real binary.
func queenBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "queen")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/queen-go/queen/cmd/queen").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// brokerProcess is one `queen serve` process on a loopback port.
type brokerProcess struct {
	name string
	url  string
	cmd  *exec.Cmd
	out  *syncBuffer // its stdout and stderr: the log
	done chan struct{}
}

// syncBuffer is a bytes.Buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProcess runs `queen serve` with env (after the test's own
// listener, spool directory and server id) and waits until /health
// answers 200. The process dies with the test binary (Pdeathsig), and is
// stopped gracefully when the test ends.
func startProcess(t *testing.T, bin, name string, env ...string) *brokerProcess {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT="+strconv.Itoa(port), "FILE_BUFFER_DIR="+t.TempDir(),
		"QUEEN_SERVER_ID="+name, "QUEEN_MESH_PEERS=", "LOG_LEVEL=info", "QUEEN_SHUTDOWN_TIMEOUT_MS=5000")
	cmd.Env = append(cmd.Env, env...)
	b := &brokerProcess{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, out: &syncBuffer{},
		done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		b.stop()
		b.keepLogOf(t)
	})
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(b.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return b
			}
		}
		if b.exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not become healthy:\n%s", name, b.out.String())
		}
	}
}

func (b *brokerProcess) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// kill ends the process at once (SIGKILL, kill -9) and waits for it.
func (b *brokerProcess) kill() {
	_ = b.cmd.Process.Kill()
	<-b.done
}

// stop ends the process gracefully (SIGTERM), killing it after 20 s.
func (b *brokerProcess) stop() {
	if b.exited() {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		b.kill()
	}
}

// logged tells whether a line of the process's log holds every one of
// words.
func (b *brokerProcess) logged(words ...string) bool {
	for _, line := range strings.Split(b.out.String(), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// keepLogOf writes the process's log where it outlives a failed test, and
// says where.
func (b *brokerProcess) keepLogOf(t *testing.T) {
	if !t.Failed() {
		return
	}
	f, err := os.CreateTemp("", "queen-"+b.name+"-*.log")
	if err == nil {
		_, err = f.WriteString(b.out.String())
		f.Close()
	}
	if err != nil {
		t.Logf("%s's log not kept: %v", b.name, err)
		return
	}
	t.Logf("%s's log: %s", b.name, f.Name())
}
