package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
)

// clusterBroker is one broker process of `queen cluster`.
type clusterBroker struct {
	id             string
	http, meshPort int
	cmd            *exec.Cmd
	done           chan struct{}
}

// cluster runs the HA topology on one machine with no Docker: a local
// PostgreSQL when PG_HOST is unset (as dev does), QUEEN_CLUSTER_BROKERS
// brokers (2) as child processes of this binary, each with its own server
// id, HTTP port, mesh port and spool directory, peers pointing at each
// other and one shared secret, and a round-robin load balancer on PORT.
// Broker i serves HTTP on PORT+10*(i+1) and the mesh on that port + 1.
// Each child can be killed on its own (kill -9 its pid) to watch the
// others carry on; Ctrl-C stops them all gracefully.
//
// dbEnv, when given, names the database for the brokers (ha-pg's
// formation) instead.
func cluster(ctx context.Context, cfg config.Config, log *slog.Logger, dbEnv ...string) error {
	n := 2
	if v := os.Getenv("QUEEN_CLUSTER_BROKERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 9 {
			return fmt.Errorf("QUEEN_CLUSTER_BROKERS=%q: want 1 to 9", v)
		}
	}
	dir := os.Getenv("QUEEN_DEV_DIR")
	if dir == "" {
		dir = ".pg"
	}
	dir, _ = filepath.Abs(dir)
	env := append(os.Environ(), dbEnv...)
	if len(dbEnv) == 0 && os.Getenv("PG_HOST") == "" && os.Getenv("DATABASE_URL") == "" {
		log.Info("starting local PostgreSQL", "dir", dir)
		pg, err := pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(dir, "data")})
		if err != nil {
			return err
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				log.Warn("postgres stop", "err", err)
			}
		}()
		env = append(env, "PG_HOST=127.0.0.1", fmt.Sprintf("PG_PORT=%d", pg.Port), "PG_USER=postgres", "PG_PASSWORD=", "PG_DATABASE=postgres")
	}
	secret := cfg.MeshSecret
	if secret == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		secret = hex.EncodeToString(b[:])
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	brokers := make([]*clusterBroker, n)
	for i := range brokers {
		port := cfg.Port + 10*(i+1)
		brokers[i] = &clusterBroker{id: fmt.Sprintf("queen-%c", 'a'+i), http: port, meshPort: port + 1}
	}
	for i, b := range brokers {
		var peers []string
		for j, p := range brokers {
			if j != i {
				peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p.meshPort))
			}
		}
		b.cmd = exec.Command(self, "serve")
		b.cmd.Stdout, b.cmd.Stderr = os.Stderr, os.Stderr
		b.cmd.Env = append(env, "PORT="+strconv.Itoa(b.http), "QUEEN_SERVER_ID="+b.id,
			"QUEEN_MESH_PORT="+strconv.Itoa(b.meshPort), "QUEEN_MESH_PEERS="+strings.Join(peers, ","),
			"QUEEN_SYNC_SECRET="+secret, "FILE_BUFFER_DIR="+filepath.Join(dir, "buffers-"+b.id))
		if err := b.cmd.Start(); err != nil {
			stopAll(brokers, log)
			return fmt.Errorf("start %s: %w", b.id, err)
		}
		b.done = make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(b.done) }()
		fmt.Printf("broker %s pid=%d http=127.0.0.1:%d mesh=%d\n", b.id, b.cmd.Process.Pid, b.http, b.meshPort)
	}
	lb := &http.Server{Addr: cfg.Addr(), Handler: balancer(brokers), ReadHeaderTimeout: 10 * time.Second}
	lbErr := make(chan error, 1)
	go func() { lbErr <- lb.ListenAndServe() }()
	fmt.Printf("load balancer http://localhost:%d (round robin, skips a broker that refuses connections)\n", cfg.Port)
	select {
	case <-ctx.Done():
	case err = <-lbErr:
	}
	_ = lb.Close()
	stopAll(brokers, log)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// stopAll sends SIGTERM to every broker still running and waits for them.
func stopAll(brokers []*clusterBroker, log *slog.Logger) {
	for _, b := range brokers {
		if b != nil && b.cmd != nil && b.cmd.Process != nil {
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, b := range brokers {
		if b != nil && b.done != nil {
			<-b.done
			log.Info("broker stopped", "server", b.id)
		}
	}
}

// balancer forwards each request to the next broker in turn. A broker that
// refuses the connection (stopped, killed) is skipped: nothing was sent to
// it, so trying the next one is safe for every method. It buffers request
// bodies: a tool for running the topology locally, not a production proxy.
func balancer(brokers []*clusterBroker) http.Handler {
	var next atomic.Uint64
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		// The transport closes a body even when the dial fails, so each
		// attempt gets its own reader over one buffered copy.
		var body []byte
		if r.Body != nil {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				return nil, err
			}
			_ = r.Body.Close()
		}
		start := next.Add(1)
		var err error
		for k := range uint64(len(brokers)) {
			b := brokers[(start+k)%uint64(len(brokers))]
			out := r.Clone(r.Context())
			out.URL.Host = fmt.Sprintf("127.0.0.1:%d", b.http)
			if r.Body != nil {
				out.Body = io.NopCloser(bytes.NewReader(body))
			}
			var resp *http.Response
			resp, err = http.DefaultTransport.RoundTrip(out)
			var op *net.OpError
			if err != nil && errors.As(err, &op) && op.Op == "dial" {
				continue
			}
			return resp, err
		}
		return nil, err
	})
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "backend" },
		Transport:     rt,
		FlushInterval: -1,
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// haPG runs the HA topology on pg_auto_failover (Debian's
// postgresql-15-auto-failover): a monitor and two Postgres nodes, a
// primary and a synchronous secondary, under $QUEEN_DEV_DIR/ha (.pg/ha),
// and `queen cluster`'s brokers on the formation's URI (both nodes,
// target_session_attrs=read-write). It prints the command that fails the
// formation over; the brokers ride through it.
func haPG(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	dir := os.Getenv("QUEEN_DEV_DIR")
	if dir == "" {
		dir = ".pg"
	}
	dir, _ = filepath.Abs(filepath.Join(dir, "ha"))
	log.Info("starting pg_auto_failover (a monitor and two nodes)", "dir", dir)
	f, err := pglocal.StartFormation(ctx, dir, cfg.Port+1000)
	if err != nil {
		return err
	}
	defer f.Stop()
	autoctl, _ := pglocal.AutoctlPath()
	as := "env " + strings.Join(f.Env(), " ") + " "
	if os.Geteuid() == 0 {
		as = "runuser -u postgres -- " + as
	}
	fmt.Printf(`pg_auto_failover formation up: monitor %s
  database URI   %s
  its state      %s%s show state --pgdata %s
  fail it over   %s%s perform failover --pgdata %s
`, f.Monitor, f.URI, as, autoctl, f.Monitor, as, autoctl, f.Monitor)
	return cluster(ctx, cfg, log, "DATABASE_URL="+f.URI)
}
