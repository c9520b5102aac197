package queen_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func testConfig(t testing.TB, dsn string) config.Config {
	t.Helper()
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Host, cfg.Port = "127.0.0.1", 0
	cfg.PGHost, cfg.PGPort, cfg.PGUser, cfg.PGPassword, cfg.PGDatabase = pc.Host, int(pc.Port), pc.User, pc.Password, pc.Database
	cfg.DBPoolSize = 10
	cfg.ServerID = "t"
	cfg.FileBufferDir = t.TempDir()
	return cfg
}

func start(t testing.TB, cfg config.Config) *queen.Broker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logw io.Writer = io.Discard
	if os.Getenv("QUEEN_TEST_LOG") != "" { // the brokers' logs, when debugging a test
		logw = os.Stderr
	}
	b := queen.New(queen.Options{Config: cfg, Listener: l, Logger: slog.New(slog.NewTextHandler(logw, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func TestBrokersMigrateConcurrentlyAndServe(t *testing.T) {
	dsn := storetest.DSN(t)
	cfg := testConfig(t, dsn)
	// A fresh database, not the migrated template: both brokers race to
	// migrate it; the advisory lock makes them take turns.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), `DROP SCHEMA queen CASCADE`); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	var wg sync.WaitGroup
	brokers := make([]*queen.Broker, 2)
	for i := range brokers {
		wg.Add(1)
		cfg := cfg
		cfg.FileBufferDir = t.TempDir() // a spool directory is one broker's
		go func() { defer wg.Done(); brokers[i] = start(t, cfg) }()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	defer func() {
		for _, b := range brokers {
			if err := b.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}()
	code, body := post(t, "http://"+brokers[0].Addr()+"/api/v1/push", `{"items":[{"queue":"q","transactionId":"x"}]}`)
	if code != 201 {
		t.Fatalf("push on A: %d %s", code, body)
	}
	// A pop on B, an ack back on A: replicas share everything through
	// PostgreSQL.
	code, body = get(t, "http://"+brokers[1].Addr()+"/api/v1/pop/queue/q")
	if code != 200 || !strings.Contains(body, `"transactionId":"x"`) {
		t.Fatalf("pop on B: %d %s", code, body)
	}
}

func TestShutdownReleasesParkedLongPolls(t *testing.T) {
	b := start(t, testConfig(t, storetest.DSN(t)))
	done := make(chan int, 1)
	go func() {
		code, _ := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/q?wait=true&timeout=30000")
		done <- code
	}()
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("shutdown waited %v for a parked long poll", el)
	}
	<-done
}

// A graceful stop lets a push that is waiting on a partition lock commit
// and answer 201 queued, answers a parked long poll 204 at once, and
// returns only when the push has answered.
func TestShutdownLetsInFlightRequestsAnswer(t *testing.T) {
	dsn := storetest.DSN(t)
	cfg := testConfig(t, dsn)
	// The push must still be waiting when the test lets it go, however
	// slow the machine: no lock timeout may end it first.
	cfg.DBLockTimeout = 5 * time.Minute
	b := start(t, cfg)
	url := "http://" + b.Addr()
	if code, body := post(t, url+"/api/v1/push", `{"items":[{"queue":"q","partition":"p","transactionId":"first"}]}`); code != 201 {
		t.Fatal(code, body)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions WHERE name = 'p' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	pushed, popped := make(chan answer, 1), make(chan answer, 1)
	call := func(ch chan answer, req func() (*http.Response, error)) {
		resp, err := req()
		if err != nil {
			ch <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		ch <- answer{code: resp.StatusCode, body: string(raw)}
	}
	go call(pushed, func() (*http.Response, error) {
		return http.Post(url+"/api/v1/push", "application/json",
			strings.NewReader(`{"items":[{"queue":"q","partition":"p","transactionId":"in-flight"}]}`))
	})
	go call(popped, func() (*http.Response, error) {
		return http.Get(url + "/api/v1/pop/queue/other?wait=true&timeout=30000")
	})
	// Watch from another session: inside the locking transaction,
	// pg_stat_activity is a snapshot taken at its first read.
	watch, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	for waiting := 0; waiting == 0; time.Sleep(20 * time.Millisecond) {
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // let the long poll park
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		stopped <- b.Shutdown(sctx)
	}()
	select {
	case a := <-popped:
		if a.err != nil || a.code != 204 {
			t.Fatalf("parked long poll at shutdown: %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a parked long poll held the shutdown")
	}
	select {
	case err := <-stopped:
		t.Fatalf("shutdown returned (%v) while a push was in flight", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-pushed; a.err != nil || a.code != 201 || !strings.Contains(a.body, `"queued"`) {
		t.Fatalf("push in flight at shutdown: %+v", a)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE transaction_id = 'in-flight'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("in-flight push stored %d times: %v", n, err)
	}
}

func TestCrashStopsEverything(t *testing.T) {
	b := start(t, testConfig(t, storetest.DSN(t)))
	code, _ := post(t, "http://"+b.Addr()+"/api/v1/push", `{"items":[{"queue":"q"}]}`)
	if code != 201 {
		t.Fatal(code)
	}
	addr := b.Addr()
	b.Crash()
	if _, err := http.Get("http://" + addr + "/health"); err == nil {
		t.Fatal("a crashed broker still answers")
	}
}

func TestDatabaseUnreachableAnswers503(t *testing.T) {
	port, err := pglocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, spoolDir := range []string{"off", t.TempDir()} {
		cfg := config.Default()
		cfg.Host, cfg.ServerID = "127.0.0.1", "t"
		cfg.PGHost, cfg.PGPort = "127.0.0.1", port // nothing listens here
		cfg.ApplySchema = false
		cfg.DBConnectionTimeout = 500 * time.Millisecond
		cfg.FileBufferDir = spoolDir
		b := start(t, cfg)
		base := "http://" + b.Addr()
		if code, body := get(t, base+"/health"); code != 503 || !strings.Contains(body, `"database":"disconnected"`) {
			t.Fatalf("health: %d %s", code, body)
		}
		code, body := post(t, base+"/api/v1/push", `{"items":[{"queue":"q"}]}`)
		if spoolDir == "off" && (code != 503 || !strings.Contains(body, `"error"`)) {
			t.Fatalf("push without a spool: %d %s", code, body)
		}
		if spoolDir != "off" && (code != 201 || !strings.Contains(body, `"status":"buffered"`)) {
			t.Fatalf("push with a spool: %d %s", code, body)
		}
		if code, _ := get(t, base+"/api/v1/pop/queue/q"); code != 503 {
			t.Fatalf("pop: %d", code)
		}
		if code, _ := post(t, base+"/api/v1/ack", `{"transactionId":"x","partitionId":"01900000-0000-7000-8000-000000000000"}`); code != 503 {
			t.Fatalf("ack: %d", code)
		}
		if code, _ := post(t, base+"/api/v1/transaction", `{"operations":[{"type":"push","queue":"q"}]}`); code != 503 {
			t.Fatalf("transaction: %d", code)
		}
		b.Shutdown(context.Background())
	}
}

func TestPermanentDatabaseErrorFailsStart(t *testing.T) {
	cfg := testConfig(t, storetest.DSN(t))
	cfg.PGDatabase = "no_such_database"
	b := queen.New(queen.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := b.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "no_such_database") {
		t.Fatalf("want a start error naming the database, got %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("a missing database was retried until the deadline instead of failing at once")
	}
}

// The queue-statistics leader refreshes the snapshot status reads every
// STATS_INTERVAL_MS, so status and the scrape catch up with a push within
// an interval or two.
func TestQueueStatsLeaderRefreshesStatus(t *testing.T) {
	dsn := storetest.DSN(t)
	cfg := testConfig(t, dsn)
	cfg.StatsInterval = 100 * time.Millisecond
	b := start(t, cfg)
	defer func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if code, body := post(t, "http://"+b.Addr()+"/api/v1/push", `{"items":[{"queue":"sq","transactionId":"x"},{"queue":"sq","transactionId":"y"}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := get(t, "http://"+b.Addr()+"/api/v1/status")
		if strings.Contains(body, `"total":2`) && strings.Contains(body, `"name":"sq"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never counted the pushes: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, body := get(t, "http://"+b.Addr()+"/metrics/prometheus")
	if code != 200 || !strings.Contains(body, `queen_queue_depth{queue="sq",tenant="`) {
		t.Fatalf("scrape: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, `queen_queue_depth{queue="sq"`) && !strings.HasSuffix(line, " 2") {
			t.Fatalf("depth of sq from the snapshot: %s", line)
		}
	}
}
