// Command queen-bench measures the broker against PostgreSQL itself, in one
// run on one throwaway server: raw probes through pgx alternate with the
// broker over loopback HTTP, window by window, and each broker figure is
// reported as a ratio to its raw counterpart (medians of the windows), with
// CPU-seconds per 1,000 messages for the broker and for PostgreSQL and WAL
// bytes per message. For single pushes, 100-message pushes and consuming,
// River takes windows of its own between them (bench/riverpeer, a separate
// Go module run as a subprocess, so the broker never depends on River), and
// the three are printed side by side. Every message the broker answered
// "queued" is checked to be stored once, every delivery to be the only one
// in its group, and every River job to be stored once and completed at most
// once. The result is printed and written as JSON. Named with -only (make
// bench-shards), the shard workloads compare a broker with shards against
// one without and move a queue under load, on servers of their own
// (shards.go, shardload.go, shardmove.go).
//
// It is run by `make bench`, never by the tests: timing belongs here.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/pglocal"
)

type options struct {
	window   time.Duration
	windows  int
	binary   string
	river    string
	out      string
	parts    int
	skipBoot bool
	only     string
	scale    bool
	grown    bool // -grown: the queen column of the three-way table, fresh then on grown tables
	size     scaleSize
	profile  string // -pg-profile: where each broker window's statement profile goes
	// -shards-urls, -shards-plain, -shards-catalog: the shard workloads'
	// databases on servers of their own (default: two local servers).
	shardURLs, shardPlain, shardCatalog string
}

func main() {
	var o options
	flag.DurationVar(&o.window, "window", 5*time.Second, "length of one measurement window")
	flag.IntVar(&o.windows, "windows", 3, "alternating windows per workload (medians are reported)")
	flag.StringVar(&o.binary, "queen", "bin/queen", "the broker binary")
	flag.StringVar(&o.river, "river", "bin/river-peer", "the River peer binary (bench/riverpeer); empty: no River columns")
	flag.StringVar(&o.out, "out", "bench-result.json", "where to write the JSON result")
	flag.IntVar(&o.parts, "bootstrap-partitions", 5000, "partitions of the bootstrap workload")
	flag.BoolVar(&o.skipBoot, "skip-bootstrap", false, "skip the bootstrap workload")
	flag.StringVar(&o.only, "only", "", "comma-separated workload names to run (default: all, with latency and bootstrap, but not shards and shard-move, which run only when named: make bench-shards)")
	flag.BoolVar(&o.scale, "scale", false, "the scale mode instead: each operation at a small and at a grown size (make bench-scale)")
	flag.BoolVar(&o.grown, "grown", false, "the grown mode instead: the queen column of push-b1, push-b100 and pop+ack-b10 on fresh tables, then after growing them as -scale does (the -scale-* flags set the size) (make bench-grown)")
	flag.IntVar(&o.size.Queues, "scale-queues", 10000, "scale mode: queues grown")
	flag.IntVar(&o.size.Partitions, "scale-partitions", 100000, "scale mode: partitions grown (over the queues)")
	flag.IntVar(&o.size.Messages, "scale-messages", 10000000, "scale mode: messages grown (over the partitions)")
	flag.IntVar(&o.size.DLQ, "scale-dlq", 1000000, "scale mode: dead letters grown (in one queue)")
	flag.IntVar(&o.size.KV, "scale-kv", 1000000, "scale mode: KV keys grown (in one namespace)")
	flag.StringVar(&o.profile, "pg-profile", "", "load pg_stat_statements and auto_explain and append each broker window's statement profile to this file (plans sampled into FILE.pglog)")
	flag.StringVar(&o.shardURLs, "shards-urls", "", "the shard workloads' shards, \"s0=URL;s1=URL\" (QUEEN_SHARDS' form; s0 best on the plain database's server); empty: two local servers")
	flag.StringVar(&o.shardPlain, "shards-plain", "", "with -shards-urls: the database of the broker without shards")
	flag.StringVar(&o.shardCatalog, "shards-catalog", "", "with -shards-urls: the catalogue database")
	flag.Parse()
	if err := run(o); err != nil {
		log.Fatal("queen-bench: ", err)
	}
}

// env is what every workload measures against.
type env struct {
	o        options
	pool     *pgxpool.Pool
	url      string
	pgPID    int
	broker   *exec.Cmd
	http     *httpClient
	pg       *pglocal.Cluster
	dir      string      // the run's temporary folder
	river    *riverBooks // what the River peers inserted and completed
	books    *books      // nil: the run's ledger
	cleanups []func()    // run when the run ends
}

func run(o options) error {
	ctx := context.Background()
	if o.river != "" && !o.scale && !o.grown {
		if _, err := os.Stat(o.river); err != nil {
			return fmt.Errorf("the River peer (build it: cd bench/riverpeer && go build -o ../../bin/river-peer ., or pass -river \"\" to leave River out): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "queen-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	// A durable server (fsync on), as in production: both sides pay it.
	po := pglocal.Options{DataDir: filepath.Join(dir, "data")}
	if o.profile != "" {
		po.Settings, po.LogPath = profileSettings(), o.profile+".pglog"
	} else if o.grown {
		po.Settings = statementSettings()
	}
	pg, err := pglocal.Start(ctx, po)
	if err != nil {
		return err
	}
	defer pg.Stop()
	pool, err := pgxpool.New(ctx, pg.DSN("postgres")+" pool_max_conns=64")
	if err != nil {
		return err
	}
	defer pool.Close()
	var extra []string
	if o.scale || o.grown {
		// The scale mode times retention passes itself: the broker's own
		// leader must not delete the due rows first. The grown mode compares
		// like with like: a pass deleting the grown due rows would weigh on
		// the grown windows only.
		extra = append(extra, "RETENTION_INTERVAL=86400000")
	}
	e, stop, err := startBroker(ctx, o, pool, pg, filepath.Join(dir, "spool"), extra...)
	if err != nil {
		return err
	}
	defer stop()
	e.pg, e.dir = pg, dir
	defer func() {
		for _, c := range e.cleanups {
			c()
		}
	}()
	fmt.Printf("queen-bench: %d windows of %s per workload, PostgreSQL on :%d (fsync on), broker %s\n\n",
		o.windows, o.window, pg.Port, e.url)
	if o.scale {
		return e.runScale(ctx, o)
	}
	if o.grown {
		return e.runGrown(ctx, o)
	}
	return e.runAll(ctx, o, pg, dir)
}

// selected reports whether the -only list names the measurement (an empty
// list names every one).
func (o options) selected(name string) bool {
	return o.only == "" || strings.Contains(","+o.only+",", ","+name+",")
}

// named reports whether the -only list names the measurement: the
// measurements left out of the default set run only then.
func (o options) named(name string) bool {
	return o.only != "" && o.selected(name)
}

// runScale runs the scale mode and writes its figures to o.out.
func (e *env) runScale(ctx context.Context, o options) error {
	r, err := e.scale(ctx, o.size)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	r.print()
	body, _ := json.MarshalIndent(r, "", "  ")
	return os.WriteFile(o.out, append(body, '\n'), 0o644)
}

// runAll runs the selected workloads and measurements, verifies what was
// stored, and writes the result to o.out; it fails if exactly-once
// verification did.
func (e *env) runAll(ctx context.Context, o options, pg *pglocal.Cluster, dir string) error {
	res := result{Window: o.window.String(), Windows: o.windows, Started: time.Now().UTC()}
	if err := e.compareAll(ctx, o, &res, false); err != nil {
		return err
	}
	if err := e.measureOthers(ctx, o, pg, dir, &res); err != nil {
		return err
	}
	if err := e.measureShards(ctx, o, &res); err != nil {
		return err
	}
	// Late workloads run after bootstrap: the rows they add would slow it
	// (bootstrap took 57 s after push-b1-recording's 200,000 messages, 25 s
	// without them), so the figures stay comparable across runs.
	if err := e.compareAll(ctx, o, &res, true); err != nil {
		return err
	}
	if err := e.verifyRiver(ctx, &res); err != nil {
		return err
	}
	if err := e.verifyStored(ctx, &res); err != nil {
		return err
	}
	res.check()
	if res.ThreeWay = threeWay(res.Comparisons); len(res.ThreeWay) > 2 {
		fmt.Printf("\nraw, queen and River (msgs/s; CPU-s per 1,000 msgs: postgres+process; WAL bytes per msg):\n%s\n", strings.Join(res.ThreeWay, "\n"))
	} else {
		res.ThreeWay = nil
	}
	body, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(o.out, append(body, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nwritten %s\n", o.out)
	if !res.ExactlyOnce {
		return fmt.Errorf("exactly-once verification failed: %v", res.Violations)
	}
	return nil
}

// compareAll compares the selected workloads, the late ones or the others,
// adding each comparison to res and printing it.
func (e *env) compareAll(ctx context.Context, o options, res *result, late bool) error {
	for _, w := range workloads() {
		if w.late != late || !o.selected(w.name) {
			continue
		}
		c, err := e.compare(ctx, w)
		if w.teardown != nil {
			w.teardown()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		res.Comparisons = append(res.Comparisons, c)
		c.print()
	}
	return nil
}

// measureOthers runs the selected latency, mesh and bootstrap
// measurements, adding each to res and printing it.
func (e *env) measureOthers(ctx context.Context, o options, pg *pglocal.Cluster, dir string, res *result) error {
	if o.selected("latency") {
		lat, err := e.latency(ctx)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		res.Latency = &lat
		lat.print()
	}
	if o.selected("mesh") {
		m, err := e.mesh(ctx, pg, dir)
		if err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
		res.Mesh = &m
		m.print()
	}
	if !o.skipBoot && o.selected("bootstrap") {
		b, err := e.bootstrap(ctx, o.parts)
		if err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		res.Bootstrap = &b
		b.print()
	}
	return nil
}

// startBroker runs the broker binary against pg with its spool in spool
// and extra environment, and waits until it is healthy.
func startBroker(ctx context.Context, o options, pool *pgxpool.Pool, pg *pglocal.Cluster, spool string, extra ...string) (*env, func(), error) {
	port, err := pglocal.FreePort()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(o.binary, "serve")
	cmd.Env = append(append(os.Environ(), "PG_HOST=127.0.0.1", "PG_PORT="+strconv.Itoa(pg.Port), "PG_USER=postgres",
		"PG_DB=postgres", "PORT="+strconv.Itoa(port), "HOST=127.0.0.1", "FILE_BUFFER_DIR="+spool,
		"DB_POOL_SIZE=64", "LOG_LEVEL=warn"), extra...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", o.binary, err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	e := &env{o: o, pool: pool, url: fmt.Sprintf("http://127.0.0.1:%d", port), pgPID: pg.PID(), broker: cmd, http: newHTTPClient(), river: newRiverBooks()}
	if err := e.waitHealthy(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	return e, stop, nil
}

func (e *env) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if code, _, err := e.http.do(ctx, "GET", e.url+"/health", nil); err == nil && code == 200 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("broker at %s not healthy after 60s", e.url)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}
