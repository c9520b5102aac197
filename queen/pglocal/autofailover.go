package pglocal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Formation is a pg_auto_failover formation run from Debian's
// postgresql-15-auto-failover: a monitor and two Postgres nodes (a primary
// and a synchronous secondary), each under its own `pg_autoctl run`. The
// monitor decides failovers; URI is what clients connect with (both nodes,
// target_session_attrs=read-write).
type Formation struct {
	Dir     string
	Monitor string // the monitor's PGDATA, for pg_autoctl --pgdata
	URI     string
	procs   []*exec.Cmd
	done    []chan error
	log     *os.File
}

// AutoctlPath finds pg_autoctl, or says which package provides it.
func AutoctlPath() (string, error) {
	if p, err := exec.LookPath("pg_autoctl"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/pg_autoctl", "/usr/lib/postgresql/15/bin/pg_autoctl"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("pglocal: pg_autoctl not found; run: apt-get install -y postgresql-15-auto-failover")
}

// StartFormation creates (or reuses) a formation under dir, on ports
// base (monitor), base+1 and base+2 (nodes), or three free ports when base
// is 0, and waits until it has a primary and a secondary.
func StartFormation(ctx context.Context, dir string, base int) (*Formation, error) {
	ports := [3]int{base, base + 1, base + 2}
	if base == 0 {
		for i := range ports {
			var err error
			if ports[i], err = FreePort(); err != nil {
				return nil, err
			}
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := AutoctlPath(); err != nil {
		return nil, err
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, "pg_autoctl.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	f := &Formation{Dir: dir, Monitor: filepath.Join(dir, "monitor"), log: logf}
	common := []string{"--pgctl", filepath.Join(bin, "pg_ctl"), "--auth", "trust", "--no-ssl", "--hostname", "127.0.0.1"}
	_, statErr := os.Stat(filepath.Join(f.Monitor, "PG_VERSION"))
	fresh := statErr != nil
	monitorURI := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", ports[0])
	if err := f.launch(f.Monitor, append([]string{"create", "monitor", "--pgdata", f.Monitor, "--pgport", fmt.Sprint(ports[0]), "--run"}, common...)); err != nil {
		return nil, err
	}
	if err := f.waitMonitor(ctx); err != nil {
		f.Stop()
		return nil, err
	}
	for i := 1; i <= 2; i++ {
		pgdata := filepath.Join(dir, fmt.Sprint("node", i))
		args := append([]string{"create", "postgres", "--pgdata", pgdata,
			"--pgport", fmt.Sprint(ports[i]), "--monitor", monitorURI, "--run"}, common...)
		if err := f.launch(pgdata, args); err != nil {
			f.Stop()
			return nil, err
		}
		if !fresh && i < 2 {
			continue // a formation started again: both nodes are known already
		}
		// The first node must be primary before the second joins.
		if err := f.WaitStable(ctx, i, 2*time.Minute); err != nil {
			f.Stop()
			return nil, err
		}
	}
	out, err := f.Autoctl(ctx, "show", "uri", "--formation", "default", "--pgdata", f.Monitor)
	if err != nil {
		f.Stop()
		return nil, err
	}
	f.URI = strings.Replace(strings.TrimSpace(out), "sslmode=prefer", "sslmode=disable", 1) + "&user=postgres"
	return f, nil
}

// launch starts one long-running pg_autoctl as the postgres user: args
// create the node, or, when pgdata already holds one, `run` starts it
// again. It lives until Stop, whatever context started the formation.
func (f *Formation) launch(pgdata string, args []string) error {
	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); err == nil {
		args = []string{"run", "--pgdata", pgdata}
	}
	cmd, err := f.command(context.Background(), args...)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f.log, f.log
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pglocal: pg_autoctl %s: %w", strings.Join(args[:2], " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	f.procs, f.done = append(f.procs, cmd), append(f.done, done)
	return nil
}

func (f *Formation) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	autoctl, err := AutoctlPath()
	if err != nil {
		return nil, err
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, autoctl, args...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
	cmd.Env = append(cmd.Env, f.Env()...)
	cmd.Dir = f.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd, nil
}

// Env is the environment every pg_autoctl of this formation runs with:
// it keeps its configuration and state under HOME and the XDG
// directories, which must be the formation's (the postgres user's to
// reach), so an operator's pg_autoctl needs the same.
func (f *Formation) Env() []string {
	return []string{"HOME=" + f.Dir, "XDG_CONFIG_HOME=" + filepath.Join(f.Dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(f.Dir, "share"), "XDG_RUNTIME_DIR=" + filepath.Join(f.Dir, "run")}
}

// Autoctl runs one pg_autoctl command to completion and returns its output.
func (f *Formation) Autoctl(ctx context.Context, args ...string) (string, error) {
	cmd, err := f.command(ctx, args...)
	if err != nil {
		return "", err
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return string(out), fmt.Errorf("pglocal: pg_autoctl %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out), nil
}

func (f *Formation) waitMonitor(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	// Not a pg_autoctl before create has written its configuration: two
	// of them creating the same state directories race (EEXIST is fatal
	// to pg_autoctl).
	cfgFile := filepath.Join(f.Dir, "config", "pg_autoctl", f.Monitor, "pg_autoctl.cfg")
	for {
		err := fmt.Errorf("no configuration yet at %s", cfgFile)
		if _, serr := os.Stat(cfgFile); serr == nil {
			if _, err = f.Autoctl(ctx, "show", "state", "--pgdata", f.Monitor); err == nil {
				return nil
			}
		}
		select {
		case werr := <-f.done[0]:
			f.done[0] <- werr
			return fmt.Errorf("pglocal: pg_autoctl create monitor exited (%v):\n%s", werr, f.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pglocal: the monitor is not answering after 2 minutes: %w\n%s", err, f.logTail())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// logTail is the end of the formation's pg_autoctl log, for errors.
func (f *Formation) logTail() string {
	raw, _ := os.ReadFile(f.log.Name())
	if len(raw) > 3000 {
		raw = raw[len(raw)-3000:]
	}
	return fmt.Sprintf("log %s:\n%s", f.log.Name(), raw)
}

// NodeState is one node as the monitor reports it.
type NodeState struct {
	Name     string `json:"nodename"`
	Port     int    `json:"nodeport"`
	Reported string `json:"current_group_state"`
	Assigned string `json:"assigned_group_state"`
}

// State reads the formation's nodes from the monitor.
func (f *Formation) State(ctx context.Context) ([]NodeState, error) {
	out, err := f.Autoctl(ctx, "show", "state", "--json", "--pgdata", f.Monitor)
	if err != nil {
		return nil, err
	}
	var nodes []NodeState
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		return nil, fmt.Errorf("pglocal: pg_autoctl show state --json: %w: %s", err, out)
	}
	return nodes, nil
}

// WaitStable waits until n nodes are reported in the state they are
// assigned, one of them primary (and, with two, the other secondary), in
// three reads in a row.
func (f *Formation) WaitStable(ctx context.Context, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	steady := 0 // consecutive stable reads: a state passing through is not stable
	for {
		nodes, err := f.State(ctx)
		if err == nil && stable(nodes, n) {
			if steady++; steady == 3 {
				return nil
			}
		} else {
			steady = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pglocal: formation not stable with %d node(s) after %v: %+v %v\n%s", n, within, nodes, err, f.logTail())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func stable(nodes []NodeState, n int) bool {
	if len(nodes) != n {
		return false
	}
	want := map[string]int{"primary": 0, "secondary": 0}
	if n == 1 {
		want = map[string]int{"single": 0}
	}
	for _, s := range nodes {
		if s.Reported != s.Assigned {
			return false
		}
		if _, ok := want[s.Reported]; !ok {
			return false
		}
		want[s.Reported]++
	}
	for _, c := range want {
		if c != 1 {
			return false
		}
	}
	return true
}

// Failover asks the monitor for a failover (pg_autoctl perform failover)
// and waits until the formation is stable with the other node primary.
// The monitor may answer an error while the failover goes on anyway
// (pg_autoctl exits 6, a monitor error, on a loaded machine): then it waits
// for the formation to settle and asks again only if the primary is still
// the same node, so one call never fails over twice.
func (f *Formation) Failover(ctx context.Context) error {
	before, err := f.primary(ctx)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		_, err := f.Autoctl(ctx, "perform", "failover", "--pgdata", f.Monitor, "--wait", "120")
		if werr := f.WaitStable(ctx, 2, 2*time.Minute); werr != nil {
			return errors.Join(err, werr)
		}
		now, perr := f.primary(ctx)
		if perr != nil {
			return perr
		}
		if now != before {
			return nil
		}
		if try == 4 {
			return fmt.Errorf("pglocal: %s is still primary after five failovers asked: %w", before, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// primary is the name of the node the monitor reports primary.
func (f *Formation) primary(ctx context.Context) (string, error) {
	nodes, err := f.State(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.Reported == "primary" && n.Assigned == "primary" {
			return n.Name, nil
		}
	}
	return "", fmt.Errorf("pglocal: no primary in %+v", nodes)
}

// Stop stops every pg_autoctl (nodes first, then the monitor) and waits.
func (f *Formation) Stop() {
	for i := len(f.procs) - 1; i >= 0; i-- {
		_ = f.procs[i].Process.Signal(syscall.SIGTERM)
		select {
		case <-f.done[i]:
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-f.procs[i].Process.Pid, syscall.SIGKILL)
			<-f.done[i]
		}
	}
	f.log.Close()
}
