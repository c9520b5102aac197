package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/store/storetest"
)

const (
	tenantA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	tenantB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
)

func do(t *testing.T, method, url, tenant, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tenant != "" {
		req.Header.Set("x-queen-tenant", tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// doSettled is do for the steps a test takes while the database path is
// meant to be healthy: a 503 there means a loaded machine stretched the
// test's tight connect timeout, not what the test checks, so it is retried
// for up to 30 s.
func doSettled(t *testing.T, method, url, tenant, body string) (int, []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, raw := do(t, method, url, tenant, body)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code, raw
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// brokerBehindProxy starts a broker whose database path can be cut; tune,
// when given, adjusts its configuration.
func brokerBehindProxy(t *testing.T, tune ...func(*config.Config)) (*queen.Broker, *faults.PGProxy) {
	t.Helper()
	cfg, proxy := proxiedConfig(t, tune...)
	b := start(t, cfg)
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	return b, proxy
}

// proxiedConfig is brokerBehindProxy's configuration and proxy.
func proxiedConfig(t *testing.T, tune ...func(*config.Config)) (config.Config, *faults.PGProxy) {
	t.Helper()
	dsn := storetest.DSN(t)
	pc, _ := pgx.ParseConfig(dsn)
	proxy, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", pc.Host, pc.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg := testConfig(t, dsn)
	cfg.PGHost, cfg.PGPort = "127.0.0.1", proxy.Port()
	cfg.TenancyHeader = true
	cfg.DBConnectionTimeout = 300 * time.Millisecond
	cfg.DBStatementTimeout = time.Second
	cfg.FileBufferFlush = 50 * time.Millisecond
	cfg.FileBufferEventsPerFile = 7
	for _, f := range tune {
		f(&cfg)
	}
	return cfg, proxy
}

func pushOne(t *testing.T, base, tenant, txid string) string {
	t.Helper()
	code, body := do(t, "POST", base+"/api/v1/push", tenant,
		fmt.Sprintf(`{"items":[{"queue":"orders","partition":"p%d","transactionId":%q,"payload":{"t":%q}}]}`, len(txid)%3, txid, txid))
	var res []map[string]any
	if err := json.Unmarshal(body, &res); err != nil || len(res) != 1 {
		t.Fatalf("push %s: %d %s", txid, code, body)
	}
	status := res[0]["status"].(string)
	if (status == "buffered" || status == "queued" || status == "duplicate") != (code == 201) {
		t.Fatalf("push %s: status %s with HTTP %d", txid, status, code)
	}
	return status
}

func bufferStatus(t *testing.T, base string) map[string]any {
	t.Helper()
	_, body := do(t, "GET", base+"/api/v1/status/buffers", "", "")
	var m map[string]any
	json.Unmarshal(body, &m)
	return m
}

// drainAll pops and acks everything a tenant can see and returns the
// transactionIds in delivery order.
func drainAll(t *testing.T, base, tenant string) []string {
	t.Helper()
	var got []string
	for {
		code, body := doSettled(t, "GET", base+"/api/v1/pop/queue/orders?batch=50", tenant, "")
		if code == 204 {
			return got
		}
		var p struct {
			Messages []struct {
				TransactionID, PartitionID, LeaseID string
			} `json:"messages"`
		}
		if code != 200 || json.Unmarshal(body, &p) != nil {
			t.Fatalf("pop: %d %s", code, body)
		}
		for _, m := range p.Messages {
			got = append(got, m.TransactionID)
			ack := fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q}`, m.TransactionID, m.PartitionID, m.LeaseID)
			if code, body := doSettled(t, "POST", base+"/api/v1/ack", tenant, ack); code != 200 || !strings.Contains(string(body), `"success":true`) {
				t.Fatalf("ack: %d %s", code, body)
			}
		}
	}
}

// warmUp pushes to tenantA's orders until a push answers queued, then
// waits until what it buffered meanwhile has replayed, and returns the
// transactionIds it pushed (each stored once, queued or replayed). With
// connects bounded at 300ms a loaded machine can time out the broker's
// first connections and buffer its first pushes (clean-clone CI did, in
// two tests); these tests are about an outage that comes later.
func warmUp(t *testing.T, b *queen.Broker, base string) []string {
	t.Helper()
	var pushed []string
	for i := 0; ; i++ {
		txid := fmt.Sprint("warm-", i)
		s := pushOne(t, base, tenantA, txid)
		pushed = append(pushed, txid)
		if s == "queued" {
			break
		}
		if i == 100 {
			t.Fatalf("healthy push: %s, still after %d tries", s, i+1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for wait := time.Now().Add(30 * time.Second); b.Spool().Pending() > 0; {
		if time.Now().After(wait) {
			t.Fatalf("%d pushes buffered while warming up never replayed", b.Spool().Pending())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return pushed
}

func TestOutageBuffersPushesAndReplaysThemExactlyOnce(t *testing.T) {
	b, proxy := brokerBehindProxy(t)
	base := "http://" + b.Addr()
	want := map[string][]string{tenantA: warmUp(t, b, base)}
	for i := 0; i < 10; i++ {
		for _, tn := range []string{tenantA, tenantB} {
			txid := fmt.Sprintf("%s-before-%d", tn[:1], i)
			if s := pushOne(t, base, tn, txid); s != "queued" {
				t.Fatalf("healthy push answered %s", s)
			}
			want[tn] = append(want[tn], txid)
		}
	}
	proxy.SetMode(faults.Refuse, 0) // PostgreSQL goes away
	buffered := 0
	for i := 0; i < 15; i++ {
		for _, tn := range []string{tenantA, tenantB} {
			txid := fmt.Sprintf("%s-during-%d", tn[:1], i)
			start := time.Now()
			s := pushOne(t, base, tn, txid)
			if s != "buffered" {
				t.Fatalf("push during the outage answered %s", s)
			}
			if i > 0 && time.Since(start) > 700*time.Millisecond { // the database timeout here is 1 s
				t.Fatalf("after the first failure pushes must go straight to the spool; took %v", time.Since(start))
			}
			buffered++
			want[tn] = append(want[tn], txid)
		}
	}
	// A retry of something that had committed before the outage.
	if s := pushOne(t, base, tenantA, "a-before-3"); s != "buffered" {
		t.Fatalf("retry during outage: %s", s)
	}
	if st := bufferStatus(t, base); st["pending"].(float64) != float64(buffered+1) || st["dbHealthy"] != false {
		t.Fatalf("status during outage: %v", st)
	}
	if code, _ := do(t, "GET", base+"/api/v1/pop/queue/orders", tenantA, ""); code != 503 {
		t.Fatalf("pop during the outage: %d", code)
	}
	proxy.SetMode(faults.Pass, 0) // it comes back
	deadline := time.Now().Add(20 * time.Second)
	for bufferStatus(t, base)["pending"].(float64) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("spool not drained: %v", bufferStatus(t, base))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, tn := range []string{tenantA, tenantB} {
		got := drainAll(t, base, tn)
		seen := map[string]int{}
		for _, g := range got {
			seen[g]++
		}
		for _, w := range want[tn] {
			if seen[w] != 1 {
				t.Errorf("tenant %s: %s delivered %d times", tn[:1], w, seen[w])
			}
		}
		if len(got) != len(want[tn]) {
			t.Errorf("tenant %s: %d delivered, want %d (extra or cross-tenant deliveries)", tn[:1], len(got), len(want[tn]))
		}
	}
	if st := bufferStatus(t, base); st["dbHealthy"] != true || st["failed"].(float64) != 0 {
		t.Fatalf("status after recovery: %v", st)
	}
}

func TestMaintenanceModeDivertsAndDrainsOnDisable(t *testing.T) {
	b, _ := brokerBehindProxy(t)
	base := "http://" + b.Addr()
	code, body := doSettled(t, "POST", base+"/api/v1/system/maintenance", "", `{"enabled":true}`)
	if code != 200 || !strings.Contains(string(body), "Maintenance mode ENABLED. All PUSHes routing to file buffer.") {
		t.Fatalf("enable: %d %s", code, body)
	}
	for i := 0; i < 5; i++ {
		if s := pushOne(t, base, tenantA, fmt.Sprint("m", i)); s != "buffered" {
			t.Fatalf("push in maintenance: %s", s)
		}
	}
	time.Sleep(200 * time.Millisecond) // several drain cycles: it must stay paused
	_, body = doSettled(t, "GET", base+"/api/v1/system/maintenance", "", "")
	var m map[string]any
	json.Unmarshal(body, &m)
	if m["maintenanceMode"] != true || m["bufferedMessages"].(float64) != 5 || m["bufferStats"] == nil {
		t.Fatalf("maintenance status: %s", body)
	}
	if got := drainAll(t, base, tenantA); len(got) != 0 {
		t.Fatalf("drained while paused: %v", got)
	}
	code, body = doSettled(t, "POST", base+"/api/v1/system/maintenance", "", `{"enabled":false}`)
	if code != 200 || !strings.Contains(string(body), "Maintenance mode DISABLED. Background processor will drain buffer to DB.") {
		t.Fatalf("disable: %d %s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bufferStatus(t, base)["pending"].(float64) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := drainAll(t, base, tenantA); len(got) != 5 {
		t.Fatalf("after disable: %v", got)
	}
	for _, bad := range []string{`{}`, `{"enabled":"yes"}`} {
		if code, body := do(t, "POST", base+"/api/v1/system/maintenance", "", bad); code != 400 || !strings.Contains(string(body), "enabled (boolean) is required") {
			t.Fatalf("%s: %d %s", bad, code, body)
		}
	}
	// Pop maintenance: pops answer 204 even with messages waiting.
	pushOne(t, base, tenantA, "x")
	if code, body := doSettled(t, "POST", base+"/api/v1/system/maintenance/pop", "", `{"enabled":true}`); code != 200 || !strings.Contains(string(body), `"popMaintenanceMode":true`) {
		t.Fatalf("pop maintenance on: %d %s", code, body)
	}
	if code, _ := doSettled(t, "GET", base+"/api/v1/pop/queue/orders", tenantA, ""); code != 204 {
		t.Fatalf("pop in pop maintenance: %d", code)
	}
	doSettled(t, "POST", base+"/api/v1/system/maintenance/pop", "", `{"enabled":false}`)
	if got := drainAll(t, base, tenantA); len(got) != 1 {
		t.Fatalf("after pop maintenance: %v", got)
	}
	_, prom := do(t, "GET", base+"/metrics/prometheus", "", "")
	for _, g := range []string{"queen_file_buffer_pending 0", "queen_file_buffer_failed 0", "queen_file_buffer_db_healthy 1", "queen_maintenance_mode_enabled 0"} {
		if !strings.Contains(string(prom), g) {
			t.Errorf("prometheus lacks %q:\n%s", g, prom)
		}
	}
}

func TestMaintenanceFlagPersistsAcrossBrokers(t *testing.T) {
	dsn := storetest.DSN(t)
	a := start(t, testConfig(t, dsn))
	defer a.Shutdown(context.Background())
	do(t, "POST", "http://"+a.Addr()+"/api/v1/system/maintenance/pop", "", `{"enabled":true}`)
	b := start(t, testConfig(t, dsn)) // reads the row at start
	defer b.Shutdown(context.Background())
	do(t, "POST", "http://"+a.Addr()+"/api/v1/push", "", `{"items":[{"queue":"orders"}]}`)
	if code, _ := doSettled(t, "GET", "http://"+b.Addr()+"/api/v1/pop/queue/orders", "", ""); code != 204 {
		t.Fatalf("a broker started after the flip must honour pop maintenance: %d", code)
	}
}

// After a reset, connecting takes longer than DB_CONNECTION_TIMEOUT (the
// server and this machine are loaded): the broker must still climb out,
// storing pushes again within seconds instead of spooling every one for the
// rest of its life, and then replay what it spooled.
func TestRecoversAfterResetWhileConnectsAreSlowAndCPUIsBusy(t *testing.T) {
	// DB_CONNECTION_TIMEOUT 300ms; statements get 5s, as acquiring a
	// connection now takes a second.
	b, proxy := brokerBehindProxy(t, func(c *config.Config) { c.DBStatementTimeout = 5 * time.Second })
	base := "http://" + b.Addr()
	warmUp(t, b, base) // the test is about the recovery after the reset
	stop := make(chan struct{})
	defer close(stop)
	for i := 0; i < 2*runtime.NumCPU(); i++ {
		go func() { // busy CPU for the whole recovery
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 1e5; j++ {
				}
			}
		}()
	}
	proxy.SetSlowConnect(time.Second) // connecting takes over three times DB_CONNECTION_TIMEOUT
	proxy.Reset()
	start := time.Now()
	statuses := map[string]int{}
	deadline := start.Add(30 * time.Second) // generous: a loaded CI machine must not fail it; it takes about 6s here
	for i := 0; ; i++ {
		s := pushOne(t, base, tenantA, fmt.Sprint("slow-", i))
		statuses[s]++
		if s == "queued" && statuses["buffered"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not storing pushes %v after the reset: %v", time.Since(start), statuses)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("stored again %v after the reset: %v", time.Since(start).Round(time.Millisecond), statuses)
	for time.Now().Before(deadline) && b.Spool().Pending() > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if n := b.Spool().Pending(); n > 0 {
		t.Fatalf("%d spooled pushes never replayed", n)
	}
}

// A push that times out queueing behind a locked partition, on a database
// that answers, is buffered alone: the broker does not send every later
// push to disk.
func TestPushTimingOutOnABusyPartitionDoesNotFlipHealth(t *testing.T) {
	// Statements bounded at 1s; a generous connect timeout, so the probe's
	// first connect never fails on a loaded machine.
	b, _ := brokerBehindProxy(t, func(c *config.Config) { c.DBConnectionTimeout = 5 * time.Second })
	base := "http://" + b.Addr()
	// pushOne picks partition p<len(txid)%3>: every txid here goes to p2.
	if s := pushOne(t, base, tenantA, "first"); s != "queued" {
		t.Fatalf("healthy push: %s", s)
	}
	ctx := context.Background()
	tx, err := b.Store().Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions WHERE name = 'p2' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if s := pushOne(t, base, tenantA, "fresh"); s != "buffered" { // behind the lock until the 1s bound
		t.Fatalf("push behind a held partition lock: %s", s)
	}
	if !b.Spool().Healthy() {
		t.Fatal("one push timing out on a busy partition marked the database down")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if s := pushOne(t, base, tenantA, "third"); s != "queued" {
		t.Fatalf("the next push: %s", s)
	}
}

// TestSpoolHoldsNoPlaintextWithAKey: with QUEEN_ENCRYPTION_KEY set, a push
// buffered during an outage is sealed on disk, whatever its queue; at
// replay each queue's own policy decides how it is stored, and consumers
// read the plaintext.
func TestSpoolHoldsNoPlaintextWithAKey(t *testing.T) {
	b, proxy := brokerBehindProxy(t, func(c *config.Config) { c.EncryptionKey = strings.Repeat("a1", 32) })
	base := "http://" + b.Addr()
	if code, body := doSettled(t, "POST", base+"/api/v1/configure", "", `{"queue":"vault","options":{"encryptionEnabled":true}}`); code != 200 {
		t.Fatalf("configure: %d %s", code, body)
	}
	proxy.SetMode(faults.Refuse, 0)
	for _, q := range []string{"vault", "orders"} {
		code, body := do(t, "POST", base+"/api/v1/push", "", fmt.Sprintf(`{"items":[{"queue":%q,"transactionId":"x-%s","payload":{"pin":"9876"}}]}`, q, q))
		if code != 201 || !strings.Contains(string(body), "buffered") {
			t.Fatalf("push during the outage: %d %s", code, body)
		}
	}
	if err := b.Spool().Finalize(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(b.Spool().Dir(), "*"))
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		if strings.Contains(string(raw), "9876") {
			t.Fatalf("%s holds a payload in the clear", f)
		}
	}
	proxy.SetMode(faults.Pass, 0)
	deadline := time.Now().Add(20 * time.Second)
	for b.Spool().Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, q := range []string{"vault", "orders"} {
		code, body := doSettled(t, "GET", base+"/api/v1/pop/queue/"+q+"?autoAck=true", "", "")
		if code != 200 || !strings.Contains(string(body), `"pin":"9876"`) {
			t.Fatalf("pop %s after replay: %d %s", q, code, body)
		}
	}
	var vault, orders bool
	pool := b.Store().Pool()
	_ = pool.QueryRow(context.Background(), `SELECT is_encrypted FROM queen.messages WHERE transaction_id = 'x-vault'`).Scan(&vault)
	_ = pool.QueryRow(context.Background(), `SELECT is_encrypted FROM queen.messages WHERE transaction_id = 'x-orders'`).Scan(&orders)
	if !vault || orders {
		t.Fatalf("replay must apply each queue's policy: vault sealed %v, orders sealed %v", vault, orders)
	}
}

// TestSpoolAcrossAKeyChange: a spool file sealed under a key the broker no
// longer has is quarantined with its reason (it can never open here), the
// spool turns healthy again and later pushes are stored; with the old key
// kept in QUEEN_ENCRYPTION_KEYS_PREVIOUS the same file replays whole. Before,
// the open failure counted as transient: the file was retried forever, the
// spool stayed unhealthy and every later push on that broker went to disk.
func TestSpoolAcrossAKeyChange(t *testing.T) {
	oldKey, newKey := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	for _, c := range []struct {
		name     string
		previous []string
		stored   bool
	}{{"key lost", nil, false}, {"key rotated", []string{oldKey}, true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			a, proxy := brokerBehindProxy(t, func(cfg *config.Config) { cfg.EncryptionKey, cfg.FileBufferDir = oldKey, dir })
			base := "http://" + a.Addr()
			proxy.SetMode(faults.Refuse, 0)
			for i := range 3 {
				code, body := do(t, "POST", base+"/api/v1/push", "", fmt.Sprintf(`{"items":[{"queue":"orders","transactionId":"k-%d","payload":{"i":%d}}]}`, i, i))
				if code != 201 || !strings.Contains(string(body), "buffered") {
					t.Fatalf("push during the outage: %d %s", code, body)
				}
			}
			a.Shutdown(context.Background())
			proxy.SetMode(faults.Pass, 0)

			b, _ := brokerBehindProxy(t, func(cfg *config.Config) {
				cfg.EncryptionKey, cfg.EncryptionKeysPrevious, cfg.FileBufferDir = newKey, c.previous, dir
			})
			base = "http://" + b.Addr()
			deadline := time.Now().Add(20 * time.Second)
			for b.Spool().Pending() > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := b.Spool().Pending(); n != 0 {
				t.Fatalf("%d records still pending: the drain is wedged", n)
			}
			var stored int
			_ = b.Store().Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.messages WHERE transaction_id LIKE 'k-%'`).Scan(&stored)
			quarantined, _ := filepath.Glob(filepath.Join(b.Spool().FailedDir(), "*.reasons.jsonl"))
			if c.stored {
				if stored != 3 || len(quarantined) != 0 {
					t.Fatalf("with the old key kept: %d stored, %d quarantined; want 3, 0", stored, len(quarantined))
				}
			} else {
				// The three records may have gone into one spool file or
				// several (a slow machine flushes between pushes): every
				// one is quarantined, each with its reason.
				var reasons int
				for _, f := range quarantined {
					raw, _ := os.ReadFile(f)
					if !strings.Contains(string(raw), "opens with no configured key") {
						t.Fatalf("the quarantine does not say why: %s", raw)
					}
					reasons += strings.Count(strings.TrimSpace(string(raw)), "\n") + 1
				}
				if stored != 0 || len(quarantined) == 0 || reasons != 3 {
					t.Fatalf("without the old key: %d stored, %d records quarantined in %d files; want 0 stored, 3 quarantined", stored, reasons, len(quarantined))
				}
			}
			if !b.Spool().Healthy() {
				t.Fatal("the spool stays unhealthy")
			}
			if got := pushOne(t, base, "", "after-key-change"); got != "queued" {
				t.Fatalf("a push after the key change answered %s: it went to disk", got)
			}
		})
	}
}
