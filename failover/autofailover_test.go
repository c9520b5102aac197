package failover_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
)

// TestAutoFailoverUnderLoad: a pg_auto_failover formation (Debian's
// postgresql-15-auto-failover: a monitor, a primary and a synchronous
// secondary) under the same load, two brokers connecting with the
// formation's URI (both nodes, target_session_attrs=read-write), and
// `pg_autoctl perform failover` twice: over, and back. The checks are the
// failover test's. It runs where pg_autoctl is installed; .ci/run
// installs it.
func TestAutoFailoverUnderLoad(t *testing.T) {
	if _, err := pglocal.AutoctlPath(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	h := &harness{t: t, dir: t.TempDir(), pushes: map[string]string{}, stop: make(chan struct{}), sync: true}
	f, err := pglocal.StartFormation(ctx, filepath.Join(h.dir, "formation"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // the monitor's view of the run: which states, when
			if out, err := f.Autoctl(context.Background(), "show", "events", "--count", "80", "--pgdata", f.Monitor); err == nil {
				t.Logf("pg_autoctl show events:\n%s", out)
			}
		}
		for _, b := range h.brokers {
			b.Shutdown(context.Background())
		}
		f.Stop()
	})
	for i := 0; i < 2; i++ {
		h.startBroker(i, func(c *config.Config) { c.DatabaseURL = f.URI })
	}
	h.configure()
	h.load()
	time.Sleep(2 * time.Second)
	for _, name := range []string{"perform failover", "and back"} {
		before := h.pushN.Load()
		h.mu.Lock()
		h.since = time.Now()
		h.maxGap = 0
		for i := range h.firstOK {
			h.firstOK[i] = time.Time{}
		}
		began := h.since
		h.mu.Unlock()
		if err := f.Failover(ctx); err != nil {
			t.Fatal(err)
		}
		stableAt := time.Now()
		h.waitWrites(name)
		nodes, _ := f.State(ctx)
		h.report = append(h.report, fmt.Sprintf("%-16s took %v (monitor stable)  longest pause between queued answers %v  leader re-elected after %v  acknowledged %d  nodes %v",
			name, stableAt.Sub(began).Round(time.Millisecond), h.gap(), h.firstPassAfter(began), h.pushN.Load()-before, nodes))
	}
	time.Sleep(2 * time.Second)
	h.stopLoad()
	h.verify()
}
