// Command queen is the broker binary.
//
//	queen serve     serve on PORT against PG_HOST (configuration from the environment)
//	queen dev       like serve, but when PG_HOST is unset first start a local
//	                PostgreSQL from the system binaries, with its data in ./.pg
//	queen cluster   the HA topology with no Docker: a local PostgreSQL when
//	                PG_HOST is unset, two brokers joined by the mesh, and a
//	                round-robin load balancer on PORT
//	queen ha-pg     cluster's brokers on a pg_auto_failover formation (a monitor,
//	                a primary and a synchronous secondary) in ./.pg/ha
//	queen migrate   apply the embedded schema migrations and exit
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/store"
)

const usage = `usage: queen <command>

commands:
  serve     serve the HTTP API (configuration from the environment: PORT, PG_HOST, ...)
  dev       serve; when PG_HOST is unset, first start a local PostgreSQL in ./.pg
  cluster   two brokers joined by the mesh behind a load balancer on PORT
            (QUEEN_CLUSTER_BROKERS=2; local PostgreSQL when PG_HOST is unset)
  ha-pg     cluster's brokers on pg_auto_failover: a monitor and two nodes (a primary
            and a synchronous secondary) in ./.pg/ha; prints how to fail it over
  cluster-shards
            cluster's brokers on shards: two local PostgreSQL clusters with
            wal_level=logical in ./.pg/shards (the catalogue and shard s0 on one,
            s1 on the other); prints a queue move's commands
  migrate   apply the schema migrations and exit
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := newLogger(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "serve":
		err = serve(ctx, cfg, log)
	case "dev":
		err = dev(ctx, cfg, log)
	case "cluster":
		err = cluster(ctx, cfg, log)
	case "ha-pg":
		err = haPG(ctx, cfg, log)
	case "cluster-shards":
		err = clusterShards(ctx, cfg, log)
	case "migrate":
		err = migrate(ctx, cfg)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "queen: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		log.Error("queen failed", "err", err)
		os.Exit(1)
	}
}

func newLogger(cfg config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// serve runs the broker until ctx is cancelled, then drains it.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	b := queen.New(queen.Options{Config: cfg, Logger: log})
	if err := b.Start(ctx); err != nil {
		return err
	}
	if addr := os.Getenv("QUEEN_PPROF_ADDR"); addr != "" {
		// Profiling for operators and `make bench` investigations, on its
		// own listener (keep it on loopback): never on the API port.
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
		defer srv.Close()
		log.Info("pprof serving", "addr", addr)
	}
	<-ctx.Done()
	// A second SIGINT or SIGTERM now takes its default action: exit at once.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	log.Info("shutting down: draining in-flight requests (a second signal forces exit)", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return b.Shutdown(sctx)
}

func dev(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if os.Getenv("PG_HOST") != "" {
		return serve(ctx, cfg, log)
	}
	dir := os.Getenv("QUEEN_DEV_DIR")
	if dir == "" {
		dir = ".pg"
	}
	dir, _ = filepath.Abs(dir)
	log.Info("starting local PostgreSQL", "dir", dir)
	c, err := pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		return err
	}
	defer func() {
		log.Info("stopping local PostgreSQL")
		if err := c.Stop(); err != nil {
			log.Warn("postgres stop", "err", err)
		}
	}()
	cfg.PGHost, cfg.PGPort, cfg.PGUser, cfg.PGPassword, cfg.PGDatabase = "127.0.0.1", c.Port, "postgres", "", "postgres"
	if os.Getenv("FILE_BUFFER_DIR") == "" {
		cfg.FileBufferDir = filepath.Join(dir, "buffers")
	}
	url := fmt.Sprintf("http://localhost:%d", cfg.Port)
	fmt.Printf(`
queen dev: PostgreSQL on 127.0.0.1:%d (data in %s), spool in %s, broker on %s
try:
  curl -s -X POST %s/api/v1/push -H 'Content-Type: application/json' \
    -d '{"items":[{"queue":"demo","payload":{"hello":"world"}}]}'
  curl -s '%s/api/v1/pop/queue/demo?batch=1'
Ctrl-C stops both.

`, c.Port, dir, cfg.FileBufferDir, url, url, url)
	return serve(ctx, cfg, log)
}

func migrate(ctx context.Context, cfg config.Config) error {
	if cfg.Shards.Enabled() {
		if err := queen.MigrateShards(ctx, cfg); err != nil {
			return err
		}
		fmt.Println("queen: schema up to date on every shard and the catalogue")
		return nil
	}
	pc, err := queen.PoolConfig(cfg)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		return err
	}
	fmt.Println("queen: schema up to date")
	return nil
}
