package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/jackc/pgx/v5/pgxpool"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/analytics"
	"github.com/queen-go/queen/queen/auth"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/waker"
	"github.com/queen-go/queen/queen/writes"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// env is one broker's HTTP API over a fresh database, with database time
// that a test can move forward (dbShift) to expire leases without waiting.
type env struct {
	t     *testing.T
	url   string
	store *store.Store
	// writes is the server's write policy, for the tests that write
	// around it (a sweeper's fire).
	writes *writes.Policy
	pool   *pgxpool.Pool
	mu     sync.Mutex
	shift  time.Duration
	rec    *analytics.Recorder // nil with QUEEN_ANALYTICS=false
}

type envOption func(*config.Config)

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	return newEnvSpool(t, nil, opts...)
}

// newEnvSpool is newEnv with a spool (nil: none).
func newEnvSpool(t *testing.T, sp *spool.Spool, opts ...envOption) *env {
	t.Helper()
	cfg := config.Default()
	cfg.ServerID = "test"
	cfg.PopWaitInitial = 20 * time.Millisecond
	cfg.PopWaitMax = 100 * time.Millisecond
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{t: t}
	idSrc := ids.NewSource(clock.Real{}, nil)
	var cipher *crypt.Cipher
	if cfg.EncryptionKey != "" {
		var err error
		if cipher, err = crypt.New(cfg.EncryptionKey, cfg.EncryptionKeysPrevious...); err != nil {
			t.Fatal(err)
		}
	}
	e.pool = storetest.Pool(t)
	e.store = store.New(e.pool, store.Options{IDs: idSrc, DBNow: e.dbNow, TxTimeout: 10 * time.Second})
	e.writes = storetest.Writes(e.store, cipher)
	var authn *auth.Authenticator
	if cfg.JWTEnabled {
		var err error
		if authn, err = auth.New(cfg.JWT, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Analytics {
		e.rec = analytics.NewRecorder(cfg.AnalyticsMaxQueues)
	}
	srv := httpapi.New(httpapi.Options{Config: cfg, Store: e.store, Writes: e.writes, Retry: storetest.Retry(e.store), Analytics: e.rec, Clock: clock.Real{}, Waker: waker.New(),
		IDs: idSrc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: authn, Cipher: cipher, Spool: sp})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	e.url = ts.URL
	return e
}

// flushAnalytics writes every minute recorded so far, the open one too,
// as a broker's flusher does at its shutdown.
func (e *env) flushAnalytics() {
	e.t.Helper()
	f := &analytics.Flusher{Recorder: e.rec, Store: e.store, Broker: "test", Hostname: "test-host", Port: 6632,
		Sample: analytics.ProcessSampler(nil, nil), Clock: clock.Real{}}
	if err := f.Close(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) dbNow() *time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shift == 0 {
		return nil
	}
	t := time.Now().Add(e.shift)
	return &t
}

// advanceDB moves database time forward by d.
// sql runs a statement straight on the database, as tools and test
// suites do.
func (e *env) sql(t *testing.T, stmt string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func (e *env) advanceDB(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shift += d
}

type response struct {
	status int
	body   []byte
	header http.Header
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

func (r response) obj(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	r.json(t, &m)
	return m
}

func (r response) arr(t *testing.T) []map[string]any {
	t.Helper()
	var a []map[string]any
	r.json(t, &a)
	return a
}

func (e *env) do(method, path string, body any, headers ...string) response {
	e.t.Helper()
	return e.doCtx(context.Background(), method, path, body, headers...)
}

func (e *env) doCtx(ctx context.Context, method, path string, body any, headers ...string) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return response{}
		}
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: raw, header: resp.Header}
}

func (e *env) expect(r response, status int) response {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

type item = map[string]any

// push pushes items and fails the test unless it answers 201.
func (e *env) push(items ...item) []map[string]any {
	e.t.Helper()
	return e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": items}), 201).arr(e.t)
}

// popped is a decoded 200 pop.
type popped struct {
	LeaseID       string `json:"leaseId"`
	PartitionID   string `json:"partitionId"`
	Partition     string `json:"partition"`
	ConsumerGroup string `json:"consumerGroup"`
	Claimed       int    `json:"partitionsClaimed"`
	Messages      []struct {
		ID            string          `json:"id"`
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		Partition     string          `json:"partition"`
		LeaseID       string          `json:"leaseId"`
		Data          json.RawMessage `json:"data"`
		CreatedAt     string          `json:"createdAt"`
		ConsumerGroup string          `json:"consumerGroup"`
		RetryCount    int             `json:"retryCount"`
		ProducerSub   *string         `json:"producerSub"`
	} `json:"messages"`
}

func (p popped) txids() []string {
	var out []string
	for _, m := range p.Messages {
		out = append(out, m.TransactionID)
	}
	return out
}

// pop pops path (a query string included) and returns nil on 204.
func (e *env) pop(path string, headers ...string) *popped {
	e.t.Helper()
	r := e.do("GET", path, nil, headers...)
	if r.status == 204 {
		return nil
	}
	e.expect(r, 200)
	var p popped
	r.json(e.t, &p)
	return &p
}

func (e *env) ack(txid, pid, lease, status string, extra ...any) map[string]any {
	e.t.Helper()
	body := map[string]any{"transactionId": txid, "partitionId": pid, "status": status, "consumerGroup": nil}
	if lease != "" {
		body["leaseId"] = lease
	}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	res := e.expect(e.do("POST", "/api/v1/ack", body), 200).arr(e.t)
	if len(res) != 1 {
		e.t.Fatalf("ack answered %d results", len(res))
	}
	return res[0]
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
