package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/waker"
)

// replicationAnswer is the replication object of postgres-stats.
type replicationAnswer struct {
	Role     string `json:"role"`
	Standbys []struct {
		ApplicationName  string   `json:"applicationName"`
		State            string   `json:"state"`
		SyncState        string   `json:"syncState"`
		WriteLagSeconds  *float64 `json:"writeLagSeconds"`
		ReplayLagSeconds *float64 `json:"replayLagSeconds"`
		BytesBehind      *float64 `json:"bytesBehind"`
		SentBytesBehind  *float64 `json:"sentBytesBehind"`
	} `json:"standbys"`
	WALReceiver *struct {
		Status                 string   `json:"status"`
		SenderPort             int      `json:"senderPort"`
		ReplayBytesBehind      *float64 `json:"replayBytesBehind"`
		SinceLastReplaySeconds *float64 `json:"sinceLastReplaySeconds"`
	} `json:"walReceiver"`
}

// replicationOf reads postgres-stats' replication object from the API at
// url.
func replicationOf(t *testing.T, url string) replicationAnswer {
	t.Helper()
	e := &env{t: t, url: url}
	var body struct {
		Replication *replicationAnswer `json:"replication"`
	}
	e.expect(e.do("GET", "/api/v1/analytics/postgres-stats", nil), 200).json(t, &body)
	if body.Replication == nil {
		t.Fatal("postgres-stats has no replication object")
	}
	return *body.Replication
}

// serveOver is a broker's HTTP API over the database at dsn.
func serveOver(t *testing.T, dsn string) string {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	idSrc := ids.NewSource(clock.Real{}, nil)
	st := store.New(pool, store.Options{IDs: idSrc, TxTimeout: 10 * time.Second})
	srv := httpapi.New(httpapi.Options{Config: config.Default(), Store: st, Clock: clock.Real{}, Waker: waker.New(), IDs: idSrc,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// With no standby, postgres-stats says this server is the primary and
// streams to nobody (an empty list, no receiver).
func TestPostgresStatsWithoutAStandby(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := replicationOf(t, e.url)
	if r.Role != "primary" || r.Standbys == nil || len(r.Standbys) != 0 || r.WALReceiver != nil {
		t.Fatalf("replication without a standby: %+v", r)
	}
}

// Against a real streaming standby: the primary's broker lists it
// (streaming, async, then sync once synchronous_standby_names names it,
// its lag and bytes behind as numbers once replayed), and a broker on the
// standby says standby and shows its WAL receiver streaming from the
// primary's port.
func TestPostgresStatsShowsAStreamingStandby(t *testing.T) {
	t.Parallel()
	if _, err := pglocal.BinDir(); err != nil {
		t.Skip("no PostgreSQL server binaries: ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	primary, err := pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(dir, "a", "data"), Replication: true, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	pool, err := pgxpool.New(ctx, primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	standby, err := pglocal.Standby(ctx, primary, pglocal.Options{DataDir: filepath.Join(dir, "b", "data"), Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	onPrimary, onStandby := serveOver(t, primary.DSN("postgres")), serveOver(t, standby.DSN("postgres"))

	await := func(what string, ok func(replicationAnswer) bool, url string) replicationAnswer {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			r := replicationOf(t, url)
			if ok(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, r)
			}
		}
	}
	r := await("the standby streaming, async, replayed", func(r replicationAnswer) bool {
		return r.Role == "primary" && len(r.Standbys) == 1 && r.Standbys[0].State == "streaming" && r.Standbys[0].SyncState == "async" &&
			r.Standbys[0].BytesBehind != nil && *r.Standbys[0].BytesBehind >= 0 && r.Standbys[0].SentBytesBehind != nil && r.WALReceiver == nil
	}, onPrimary)
	t.Logf("primary: %+v", r.Standbys[0])
	if _, err := pool.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	// A write the sync standby confirms gives it measured lags.
	if _, err := pool.Exec(ctx, `CREATE TABLE public.lag_probe (n int); INSERT INTO public.lag_probe VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	await("the standby sync with its lags measured", func(r replicationAnswer) bool {
		return len(r.Standbys) == 1 && r.Standbys[0].SyncState == "sync" && r.Standbys[0].WriteLagSeconds != nil &&
			*r.Standbys[0].WriteLagSeconds >= 0 && r.Standbys[0].ReplayLagSeconds != nil
	}, onPrimary)
	s := await("the standby's own view", func(r replicationAnswer) bool {
		return r.Role == "standby" && len(r.Standbys) == 0 && r.WALReceiver != nil && r.WALReceiver.Status == "streaming" &&
			r.WALReceiver.SenderPort == primary.Port && r.WALReceiver.ReplayBytesBehind != nil && r.WALReceiver.SinceLastReplaySeconds != nil
	}, onStandby)
	t.Logf("standby: %+v", *s.WALReceiver)
}
