package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/pglocal"
)

// shardRig is what the shard workloads run on: a plain database for a
// broker without shards, a catalogue and shards s0 and s1 for a broker with
// them, and a broker on each. Locally, server A holds the plain database,
// the catalogue and s0, server B holds s1, both with wal_level=logical (a
// move copies by logical replication; the plain side pays the same WAL
// level). On a bigger machine -shards-plain, -shards-catalog and
// -shards-urls point it at servers of their own instead.
type shardRig struct {
	plainURL, catalogURL string
	s0URL, s1URL         string
	pids                 []int                    // local postmasters, whose CPU is read; none for external servers
	logs                 []string                 // local servers' logs
	pools                map[string]*pgxpool.Pool // "plain", "s0", "s1"
	servers              []*pgxpool.Pool          // one per server, for CHECKPOINT
	plain, sharded       *env                     // the brokers (sharded's pool is s0's)
	shardedS1            *env                     // the sharded broker with s1's pool (its top-ups)
	books                *books
	cleanups             []func()
}

// shardPlacement sends the bench's b-* queues to s1; every other queue
// falls to the first shard, s0.
const shardPlacement = "queue:bench-shard-b-*=s1"

func (r *shardRig) close() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// newShardRig starts (or, with the flags, connects to) the shard
// workloads' databases and their two brokers.
func (e *env) newShardRig(ctx context.Context) (*shardRig, error) {
	r := &shardRig{pools: map[string]*pgxpool.Pool{}, books: newBooks()}
	var err error
	if e.o.shardURLs == "" {
		err = r.startLocal(ctx, e.dir)
	} else {
		err = r.external(e.o)
	}
	if err == nil {
		err = r.open(ctx)
	}
	if err == nil {
		err = r.startBrokers(ctx, e)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// startLocal starts servers A and B under dir and creates the databases.
func (r *shardRig) startLocal(ctx context.Context, dir string) error {
	dbs := map[string][]string{"a": {"plain", "catalog", "s0"}, "b": {"s1"}}
	urls := map[string]string{}
	for _, name := range []string{"a", "b"} {
		pg, err := pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(dir, "shard-"+name, "data"), Settings: pglocal.LogicalSettings})
		if err != nil {
			return fmt.Errorf("shard server %s: %w", name, err)
		}
		r.cleanups = append(r.cleanups, func() { _ = pg.Stop() })
		r.pids = append(r.pids, pg.PID())
		r.logs = append(r.logs, filepath.Join(dir, "shard-"+name, "postgres.log"))
		for _, db := range dbs[name] {
			if err := createDatabase(ctx, pg, db); err != nil {
				return err
			}
			urls[db] = (&url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "127.0.0.1:" + strconv.Itoa(pg.Port),
				Path: "/" + db, RawQuery: "sslmode=disable"}).String()
		}
	}
	r.plainURL, r.catalogURL, r.s0URL, r.s1URL = urls["plain"], urls["catalog"], urls["s0"], urls["s1"]
	return nil
}

// external takes the databases from the flags.
func (r *shardRig) external(o options) error {
	urls, err := parseShardURLs(o.shardURLs)
	if err != nil {
		return err
	}
	if o.shardPlain == "" || o.shardCatalog == "" {
		return fmt.Errorf("-shards-urls needs -shards-plain and -shards-catalog too")
	}
	r.plainURL, r.catalogURL, r.s0URL, r.s1URL = o.shardPlain, o.shardCatalog, urls[0], urls[1]
	return nil
}

// parseShardURLs reads -shards-urls, QUEEN_SHARDS' form with exactly the
// shards s0 and s1: "s0=URL;s1=URL".
func parseShardURLs(v string) ([2]string, error) {
	var out [2]string
	parts := strings.Split(v, ";")
	if len(parts) != 2 {
		return out, fmt.Errorf("-shards-urls: want \"s0=URL;s1=URL\", got %d parts", len(parts))
	}
	for i, p := range parts {
		name, u, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || name != fmt.Sprintf("s%d", i) || !strings.HasPrefix(u, "postgres") {
			return out, fmt.Errorf("-shards-urls: part %d: want s%d=postgres://...", i+1, i)
		}
		out[i] = u
	}
	return out, nil
}

// createDatabase creates db on pg.
func createDatabase(ctx context.Context, pg *pglocal.Cluster, db string) error {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}

// open connects a pool to each database, and notes one per server.
func (r *shardRig) open(ctx context.Context) error {
	seen := map[string]bool{}
	for name, u := range map[string]string{"plain": r.plainURL, "s0": r.s0URL, "s1": r.s1URL} {
		p, err := pgxpool.New(ctx, u)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.cleanups = append(r.cleanups, p.Close)
		r.pools[name] = p
		server := fmt.Sprintf("%s:%d", p.Config().ConnConfig.Host, p.Config().ConnConfig.Port)
		if !seen[server] {
			seen[server] = true
			r.servers = append(r.servers, p)
		}
	}
	return nil
}

// startBrokers starts the plain broker and the sharded one, both without
// recorded analytics (off with shards: the plain side must not pay it).
func (r *shardRig) startBrokers(ctx context.Context, e *env) error {
	common := []string{"QUEEN_ANALYTICS=false", "LOG_LEVEL=error", "QUEEN_PPROF_ADDR="}
	plain, stop, err := startBroker(ctx, e.o, e.pool, e.pg, filepath.Join(e.dir, "spool-plain"),
		append(common, "DATABASE_URL="+r.plainURL)...)
	if err != nil {
		return fmt.Errorf("plain broker: %w", err)
	}
	r.cleanups = append(r.cleanups, stop)
	sharded, stop, err := startBroker(ctx, e.o, e.pool, e.pg, filepath.Join(e.dir, "spool-sharded"),
		append(common, "DATABASE_URL="+r.s0URL, "QUEEN_CATALOG_URL="+r.catalogURL,
			"QUEEN_SHARDS=s0="+r.s0URL+";s1="+r.s1URL, "QUEEN_PLACEMENT="+shardPlacement)...)
	if err != nil {
		return fmt.Errorf("sharded broker: %w", err)
	}
	r.cleanups = append(r.cleanups, stop)
	plain.pool, plain.books = r.pools["plain"], r.books
	sharded.pool, sharded.books = r.pools["s0"], r.books
	s1 := *sharded
	s1.pool = r.pools["s1"]
	r.plain, r.sharded, r.shardedS1 = plain, sharded, &s1
	return nil
}

// pgCPU is the CPU time of every local server's processes.
func (r *shardRig) pgCPU() float64 {
	total := 0.0
	for _, pid := range r.pids {
		total += pgCPU(pid)
	}
	return total
}

// checkpoint runs a CHECKPOINT on every server.
func (r *shardRig) checkpoint(ctx context.Context) error {
	for _, p := range r.servers {
		if _, err := p.Exec(ctx, "CHECKPOINT"); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}

// verify checks that every queue of the shard workloads holds, summed over
// the three databases, exactly the messages answered queued, each once,
// and passes what it finds wrong to the run's ledger.
func (r *shardRig) verify(ctx context.Context) (bool, []string, error) {
	stored := map[string]int64{}
	for name, p := range r.pools {
		rows, err := p.Query(ctx, `
			SELECT q.name, count(*), count(DISTINCT (m.partition_id, m.transaction_id))
			FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
			GROUP BY q.name`)
		if err != nil {
			return false, nil, fmt.Errorf("%s: %w", name, err)
		}
		for rows.Next() {
			var q string
			var n, distinct int64
			if err := rows.Scan(&q, &n, &distinct); err != nil {
				rows.Close()
				return false, nil, err
			}
			stored[q] += n
			if n != distinct {
				r.books.problem("%s on %s: %d rows but %d distinct transactionIds", q, name, n, distinct)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return false, nil, err
		}
	}
	for q, n := range r.books.queued {
		if stored[q] != n {
			r.books.problem("%s: %d answered queued, %d stored over the shards", q, n, stored[q])
		}
	}
	for _, p := range r.books.problems {
		ledger.problem("shards: %s", p)
	}
	return len(r.books.problems) == 0, r.books.problems, nil
}

// shardResult is the shard workloads' part of the JSON.
type shardResult struct {
	Servers     string            `json:"servers"`
	Comparisons []shardComparison `json:"comparisons,omitempty"`
	Move        *moveResult       `json:"move,omitempty"`
	ExactlyOnce bool              `json:"exactlyOnce"`
	Violations  []string          `json:"violations,omitempty"`
	Note        string            `json:"note"`
}

// measureShards runs the shard workloads -only names, "shards" (the
// routing comparison) and "shard-move", on a rig of their own. They are
// not in the default set: with make bench's 5 s windows they take about
// two and a half minutes (make bench-shards runs them).
func (e *env) measureShards(ctx context.Context, o options, res *result) error {
	if !o.named("shards") && !o.named("shard-move") {
		return nil
	}
	r, err := e.newShardRig(ctx)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	defer r.close()
	sr := &shardResult{Servers: "local: server A holds the plain database, the catalogue and s0, server B holds s1 (wal_level=logical both)",
		Note: "on one machine the shards share its cores: two shards cannot scale here; with -shards-urls, -shards-plain and -shards-catalog the same bench runs against servers of their own (PostgreSQL CPU is then not read)"}
	if len(r.pids) == 0 {
		sr.Servers = "external: -shards-plain, -shards-catalog, -shards-urls"
	}
	res.Shards = sr
	fmt.Printf("\nshards: %s\n", sr.Servers)
	if o.named("shards") {
		for _, l := range r.shardLoads() {
			c, err := r.compareShards(ctx, o, l)
			if err != nil {
				return fmt.Errorf("shards %s: %w", l.name, err)
			}
			sr.Comparisons = append(sr.Comparisons, c)
			c.print(len(r.pids) > 0)
		}
	}
	if o.named("shard-move") {
		m, err := r.shardMove(ctx, o)
		if err != nil {
			return fmt.Errorf("shard-move: %w", err)
		}
		if m.State == "failed" {
			m.ServerErrors = r.serverErrors(5)
		}
		sr.Move = &m
		m.print()
	}
	if sr.ExactlyOnce, sr.Violations, err = r.verify(ctx); err != nil {
		return fmt.Errorf("shards verify: %w", err)
	}
	fmt.Printf("%-13s exactly-once over plain, s0 and s1: %s (%d queues)\n%-13s %s\n", "shards",
		map[bool]string{true: "verified", false: "VIOLATED"}[sr.ExactlyOnce], len(r.books.queued), "", sr.Note)
	return nil
}

// met reports whether every routing comparison met its target (nil: no
// shard workload ran).
func (r *shardResult) met() bool {
	if r == nil {
		return true
	}
	for _, c := range r.Comparisons {
		if !c.Met {
			return false
		}
	}
	return r.Move == nil || r.Move.State == "done"
}

// serverErrors are the last n ERROR lines of the local servers' logs (a
// failed move's cause is often only there; the run's folder is removed).
func (r *shardRig) serverErrors(n int) []string {
	var out []string
	for _, path := range r.logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var errs []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "ERROR:") {
				errs = append(errs, filepath.Base(filepath.Dir(path))+": "+line)
			}
		}
		out = append(out, errs[max(0, len(errs)-n):]...)
	}
	return out
}
