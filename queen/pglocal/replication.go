package pglocal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby makes a streaming standby of primary in o.DataDir with
// pg_basebackup -R (standby.signal, primary_conninfo) and starts it. The
// primary must have been started with Replication. The standby is its
// own Cluster, ready for Promote.
func Standby(ctx context.Context, primary *Cluster, o Options) (*Cluster, error) {
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, err
	}
	// pg_basebackup fills an empty directory the postgres user owns.
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	if cred, err := credential(); err != nil {
		return nil, err
	} else if cred != nil {
		if err := chownTree(dataDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	if err := tool(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres",
		"-D", dataDir, "-R", "-X", "stream", "-c", "fast"); err != nil {
		return nil, err
	}
	o.DataDir, o.Replication = dataDir, true
	return Start(ctx, o)
}

// Kill stops postgres at once, as a crash would (pg_ctl stop -m
// immediate: no checkpoint, the next start recovers).
func (c *Cluster) Kill() {
	defer c.logFile.Close()
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	var err error
	select {
	case err = <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		err = <-c.done
	}
	c.done <- err // a later Stop returns at once
}

// Restart starts a cluster that Kill or Stop ended again, on its data
// directory, port and settings: after Kill, PostgreSQL's crash recovery
// runs first, as after a crash. A test restarts a killed shard with it
// (clients that knew the port reconnect to it). It answers the new
// process's Cluster; c stays stopped.
func (c *Cluster) Restart(ctx context.Context) (*Cluster, error) {
	o := c.opts
	o.DataDir, o.Port = c.DataDir, c.Port
	return Start(ctx, o)
}

// Promote ends recovery on a standby (pg_promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pglocal: promote: %w", err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_promote(true, 60)`).Scan(&ok); err != nil {
		return fmt.Errorf("pglocal: promote port %d: %w", c.Port, err)
	}
	if !ok {
		return fmt.Errorf("pglocal: promote port %d: not promoted within 60 s", c.Port)
	}
	return nil
}

// Rejoin makes a stopped former primary (after Kill) a standby of
// primary: pg_rewind rewinds it to the point the two diverged (it needs
// wal_log_hints, which Replication sets) and writes its standby settings
// (-R); then it starts on its old port. Where pg_rewind cannot, a fresh
// base backup replaces it.
func (c *Cluster) Rejoin(ctx context.Context, primary *Cluster) (*Cluster, error) {
	src := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres", primary.Port)
	o := c.opts
	o.DataDir, o.Port, o.Replication = c.DataDir, c.Port, true
	if err := tool(ctx, "pg_rewind", "--target-pgdata", c.DataDir, "--source-server", src, "-R"); err != nil {
		return Standby(ctx, primary, o)
	}
	return Start(ctx, o)
}

// tool runs one of PostgreSQL's programs as the user postgres runs as.
func tool(ctx context.Context, name string, args ...string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	path := filepath.Join(bin, name)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("pglocal: %s not found in %s (Debian: apt-get install -y postgresql)", name, bin)
	}
	cred, err := credential()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = os.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pglocal: %s: %w\n%s", name, err, out)
	}
	return nil
}
