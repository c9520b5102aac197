package pglocal

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The data directory's parent is created by Start, outside any temp
// directory, as `make run` does with ./.pg; as root the postgres user must
// still be able to reach it. A second start reuses the cluster.
func TestStartInAFreshDirectoryAndReuse(t *testing.T) {
	base, err := os.MkdirTemp(".", "pglocal-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(base, ".pg", "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for round := 0; round < 2; round++ {
		c, err := Start(ctx, Options{DataDir: dataDir, Ephemeral: true})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err != nil {
			c.Stop()
			t.Fatal(err)
		}
		if round == 0 {
			_, err = conn.Exec(ctx, `CREATE TABLE kept (x int)`)
		} else {
			_, err = conn.Exec(ctx, `SELECT * FROM kept`) // the cluster was reused
		}
		conn.Close(ctx)
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// A cluster killed as a crash would (no checkpoint) restarts on its port
// and data directory, with what it committed before the kill.
func TestRestartAfterKillKeepsCommittedRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := Start(ctx, Options{DataDir: filepath.Join(dir, "data"), LogPath: filepath.Join(dir, "pg.log")})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		c.Stop()
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE kept AS SELECT 42 AS x`)
	conn.Close(ctx)
	c.Kill()
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	if again.Port != c.Port {
		t.Errorf("restarted on port %d, was %d", again.Port, c.Port)
	}
	conn, err = pgx.Connect(ctx, again.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var x int
	if err := conn.QueryRow(ctx, `SELECT x FROM kept`).Scan(&x); err != nil || x != 42 {
		t.Fatalf("after the restart: %d, %v; want the committed 42", x, err)
	}
}
