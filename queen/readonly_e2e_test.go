package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestReadOnlyDatabaseIsAnOutage: the broker's address points at a
// read-only server for a while (a standby, before it is promoted). Pushes
// are buffered, /health and the metrics say "read-only", the drain waits
// through many cycles and quarantines nothing (before: 25006 was bad data,
// and after five attempts the spool files went to failed/), and once the
// server takes writes every push is delivered once.
func TestReadOnlyDatabaseIsAnOutage(t *testing.T) {
	b, proxy := brokerBehindProxy(t)
	base := "http://" + b.Addr()
	var want []string
	bufferedBefore := 0.0 // healthy pushes the spool took; they may still be pending
	for i := 0; i < 5; i++ {
		txid := fmt.Sprint("ro-before-", i)
		// Buffered is a healthy push's answer too when the commit outlasts
		// the push's bound on a loaded machine; it is delivered all the same.
		switch s := pushOne(t, base, tenantA, txid); s {
		case "queued":
		case "buffered":
			bufferedBefore++
		default:
			t.Fatalf("healthy push answered %s", s)
		}
		want = append(want, txid)
	}
	proxy.SetReadOnly(true)
	// Past pgxpool's one second, an idle session is pinged before it is
	// handed out: the cut ones are dropped unseen, and the first push
	// meets the read-only server itself (SQLSTATE 25006), not a closed
	// connection.
	time.Sleep(1100 * time.Millisecond)
	for i := 0; i < 20; i++ {
		txid := fmt.Sprint("ro-during-", i)
		if s := pushOne(t, base, tenantA, txid); s != "buffered" {
			t.Fatalf("push to a read-only database answered %s", s)
		}
		want = append(want, txid)
	}
	// Polled, bounded: on a loaded machine one health ping can time out
	// and answer "disconnected" (clean-clone CI did, once).
	for try := 0; ; try++ {
		code, body := do(t, "GET", base+"/health", "", "")
		var h map[string]any
		_ = json.Unmarshal(body, &h)
		if code == 503 && h["database"] == "read-only" {
			break
		}
		if try == 50 {
			t.Fatalf("health on a read-only database: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, body := do(t, "GET", base+"/metrics/prometheus", "", ""); !strings.Contains(string(body), "\nqueen_database_read_only 1\n") {
		t.Fatalf("metrics on a read-only database lack queen_database_read_only 1")
	}
	// Far more drain cycles (50 ms each) than the five attempts after
	// which a refused record is quarantined.
	time.Sleep(2 * time.Second)
	if st := bufferStatus(t, base); st["failed"].(float64) != 0 || st["pending"].(float64) < 20 || st["pending"].(float64) > 20+bufferedBefore {
		t.Fatalf("spool while read-only: %v", st)
	}
	proxy.SetReadOnly(false)
	deadline := time.Now().Add(20 * time.Second)
	for bufferStatus(t, base)["pending"].(float64) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("spool not drained once writable: %v", bufferStatus(t, base))
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := drainAll(t, base, tenantA)
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("%s delivered %d times", w, seen[w])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d delivered, want %d", len(got), len(want))
	}
	if st := bufferStatus(t, base); st["failed"].(float64) != 0 {
		t.Fatalf("quarantined for a read-only server: %v", st)
	}
	if code, body := doSettled(t, "GET", base+"/health", "", ""); code != 200 {
		t.Fatalf("health once writable: %d %s", code, body)
	}
	if _, body := do(t, "GET", base+"/metrics/prometheus", "", ""); !strings.Contains(string(body), "\nqueen_database_read_only 0\n") {
		t.Fatalf("queen_database_read_only did not clear")
	}
}

// TestRequireSyncStandbyRefusesToStart: the test database has no
// synchronous standby, so a broker told to require one refuses to start,
// naming the setting and what it protects; without the setting it starts
// (with a warning).
func TestRequireSyncStandbyRefusesToStart(t *testing.T) {
	cfg := testConfig(t, storetest.DSN(t))
	cfg.RequireSyncStandby = true
	b := queen.New(queen.Options{Config: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := b.Start(ctx)
	if err == nil {
		b.Shutdown(context.Background())
		t.Fatal("started without a synchronous standby")
	}
	if !strings.Contains(err.Error(), "QUEEN_REQUIRE_SYNC_STANDBY") || !strings.Contains(err.Error(), "synchronous_standby_names") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
	cfg.RequireSyncStandby = false
	b = start(t, cfg)
	b.Shutdown(context.Background())
}
