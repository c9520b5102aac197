// Package pglocal runs a private PostgreSQL cluster from the system's
// binaries: `queen dev` uses it for the embedded default and the test helper
// uses it for a throwaway cluster per test binary.
//
// initdb and postgres refuse to run as root, so when the process is root
// they run as the `postgres` system user over a data directory it owns.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// LogicalSettings are the server settings of a cluster that holds shards:
// a queue's move copies it by logical replication, a slot, a walsender
// and an apply worker for each move in flight.
var LogicalSettings = []string{"wal_level=logical", "max_replication_slots=10", "max_wal_senders=10",
	"max_logical_replication_workers=6", "max_worker_processes=16"}

// Options describe the cluster to start.
type Options struct {
	// DataDir holds the cluster. An existing cluster there is reused.
	DataDir string
	// Port to listen on, on 127.0.0.1 only; 0 picks a free one.
	Port int
	// Ephemeral trades durability for speed (fsync off): for tests only.
	Ephemeral bool
	// LogPath receives the server log; default DataDir/../postgres.log.
	LogPath string
	// Settings are extra server settings, name=value each (passed as -c,
	// so ALTER SYSTEM cannot change them).
	Settings []string
	// Replication makes the cluster ready for streaming standbys:
	// replication connections from 127.0.0.1, wal_log_hints (for
	// pg_rewind) and hot standby reads.
	Replication bool
}

// Cluster is a running postgres process.
type Cluster struct {
	DataDir string
	Port    int
	cmd     *exec.Cmd
	done    chan error
	logFile *os.File
	opts    Options
}

// BinDir finds the directory holding initdb and postgres: PATH first, then
// /usr/lib/postgresql/<newest>/bin.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if q, err := filepath.EvalSymlinks(p); err == nil {
			p = q
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("pglocal: no PostgreSQL binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin; install them (Debian: apt-get install -y postgresql) or set PG_HOST / PG_TEST_DSN to an existing server")
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// FreePort asks the kernel for an unused loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start initialises DataDir if it holds no cluster, starts postgres and waits
// until it accepts connections.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	if err := makeDataDir(dataDir, cred); err != nil {
		return nil, err
	}
	if err := initDataDir(ctx, bin, dataDir, cred, o.Ephemeral); err != nil {
		return nil, err
	}
	port := o.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	logPath := o.LogPath
	if logPath == "" {
		logPath = filepath.Join(filepath.Dir(dataDir), "postgres.log")
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pglocal: open log: %w", err)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), postgresArgs(dataDir, port, o)...)
	cmd.Dir = os.TempDir()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig: a test binary that dies must not leave its cluster behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("pglocal: start postgres: %w", err)
	}
	c := &Cluster{DataDir: dataDir, Port: port, cmd: cmd, done: make(chan error, 1), logFile: logFile, opts: o}
	go func() { c.done <- cmd.Wait() }()
	if err := c.waitReady(ctx, logPath); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// makeDataDir creates the data directory and its parent, and gives the
// data directory to the postgres user when cred says we run as root.
func makeDataDir(dataDir string, cred *syscall.Credential) error {
	// The parent holds the log and is ours; it must be traversable by the
	// postgres user when we run as root.
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return fmt.Errorf("pglocal: create %s: %w", filepath.Dir(dataDir), err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("pglocal: create %s: %w", dataDir, err)
	}
	if cred != nil {
		if err := chownTree(dataDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// initDataDir runs initdb on a data directory that has no cluster yet
// (without fsyncs for an ephemeral one); one that has is left as it is.
func initDataDir(ctx context.Context, bin, dataDir string, cred *syscall.Credential, ephemeral bool) error {
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	args := []string{"-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if ephemeral {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = os.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pglocal: initdb %s: %w\n%s", dataDir, err, out)
	}
	return nil
}

// postgresArgs gives the postgres command line: loopback TCP only, the
// ephemeral and replication settings when asked, then o.Settings.
func postgresArgs(dataDir string, port int, o Options) []string {
	args := []string{"-D", dataDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "max_connections=400", "-c", "shared_buffers=128MB"}
	if o.Ephemeral {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	if o.Replication {
		args = append(args, "-c", "wal_level=replica", "-c", "max_wal_senders=10", "-c", "wal_log_hints=on",
			"-c", "hot_standby=on", "-c", "wal_keep_size=512MB")
	}
	for _, kv := range o.Settings {
		args = append(args, "-c", kv)
	}
	return args
}

func (c *Cluster) waitReady(ctx context.Context, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, c.DSN("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case werr := <-c.done:
			c.done <- werr
			tail, _ := os.ReadFile(logPath)
			if len(tail) > 2000 {
				tail = tail[len(tail)-2000:]
			}
			return fmt.Errorf("pglocal: postgres exited during start (%v); log %s:\n%s", werr, logPath, tail)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pglocal: postgres on port %d not ready after 60s: %w (log %s)", c.Port, err, logPath)
		}
	}
}

// DSN is a connection string for database db on this cluster.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", c.Port, db)
}

// PID is the postmaster's process id (the benchmark reads its CPU time).
func (c *Cluster) PID() int { return c.cmd.Process.Pid }

// Stop asks postgres for a fast shutdown and waits for it to exit.
func (c *Cluster) Stop() error {
	defer c.logFile.Close()
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Signal(syscall.SIGQUIT)
		<-c.done
		return errors.New("pglocal: postgres did not stop within 30s; sent SIGQUIT")
	}
}

// credential returns the postgres system user's credential when running as
// root, and nil otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pglocal: running as root, and PostgreSQL refuses root: need the 'postgres' system user (apt-get install -y postgresql creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownTree(root string, uid, gid int) error {
	// Every ancestor must be traversable by the postgres user. We open up
	// the data directory's own parent (ours) and temp directories; any
	// other closed ancestor is reported rather than silently changed.
	for d := filepath.Dir(root); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 != 0 {
			continue
		}
		if d == filepath.Dir(root) || strings.HasPrefix(d, os.TempDir()) {
			if err := os.Chmod(d, fi.Mode().Perm()|0o711); err != nil {
				return fmt.Errorf("pglocal: make %s traversable for the postgres user: %w", d, err)
			}
			continue
		}
		return fmt.Errorf("pglocal: %s is not traversable by the postgres user (mode %v); choose a data directory elsewhere", d, fi.Mode().Perm())
	}
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
