package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// poolSize is the peer's connection bound, the same as the raw probes' pool
// and the broker's DB_POOL_SIZE in queen-bench.
const poolSize = 64

// benchArgs is the job: the same payload as the broker's and the raw
// probes' messages.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

// noopWorker completes every job at once, remembering which it saw so that
// a job worked twice in this process is counted.
type noopWorker struct {
	river.WorkerDefaults[benchArgs]
	seen       sync.Map
	duplicates atomic.Int64
}

func (w *noopWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	if _, dup := w.seen.LoadOrStore(job.ID, struct{}{}); dup {
		w.duplicates.Add(1)
	}
	return nil
}

// peer is the connection to the bench's PostgreSQL with River's tables
// migrated.
type peer struct {
	pool     *pgxpool.Pool
	schema   string
	queue    string
	inserted atomic.Int64
	client   *river.Client[pgx.Tx]
	stdin    *bufio.Reader // queen-bench's go-aheads
}

// connect opens the pool, creates and migrates River's schema, and warms
// as many connections as the window will use, so that no backend is
// started inside the window.
func connect(ctx context.Context, o options) (*peer, error) {
	cfg, err := pgxpool.ParseConfig(o.dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.MaxConns = poolSize
	// queen-bench waits for the sessions of this name to end after a window.
	cfg.ConnConfig.RuntimeParams["application_name"] = "river-peer"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	p := &peer{pool: pool, schema: o.schema, queue: o.workload}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := p.warm(ctx, min(o.clients+2, poolSize)); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// migrate brings River's schema up to date; it is a no-op once done.
func (p *peer) migrate(ctx context.Context) error {
	if _, err := p.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{p.schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(p.pool), &rivermigrate.Config{Schema: p.schema, Logger: quietLogger()})
	if err != nil {
		return fmt.Errorf("migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// warm opens n connections at once and gives them back to the pool.
func (p *peer) warm(ctx context.Context, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := p.pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("warm pool: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// quietLogger keeps River's informational lines out of the bench output.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// insertFunc inserts from one worker goroutine and returns how many jobs
// it inserted.
type insertFunc func(ctx context.Context, batch int) (int, error)

func (p *peer) insertOne(ctx context.Context, _ int) (int, error) {
	if _, err := p.client.Insert(ctx, benchArgs{N: 1}, &river.InsertOpts{Queue: p.queue}); err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	return 1, nil
}

func (p *peer) insertMany(ctx context.Context, batch int) (int, error) {
	res, err := p.client.InsertMany(ctx, p.params(batch))
	if err != nil {
		return 0, fmt.Errorf("insert many: %w", err)
	}
	return len(res), nil
}

func (p *peer) insertManyFast(ctx context.Context, batch int) (int, error) {
	n, err := p.client.InsertManyFast(ctx, p.params(batch))
	if err != nil {
		return 0, fmt.Errorf("insert many fast: %w", err)
	}
	return n, nil
}

func (p *peer) params(batch int) []river.InsertManyParams {
	ps := make([]river.InsertManyParams, batch)
	for i := range ps {
		ps[i] = river.InsertManyParams{Args: benchArgs{N: 1}, InsertOpts: &river.InsertOpts{Queue: p.queue}}
	}
	return ps
}

// push runs one window of clients goroutines inserting through an
// insert-only client (no queues: it works no job).
func (p *peer) push(ctx context.Context, o options, insert insertFunc) error {
	client, err := river.NewClient(riverpgxv5.New(p.pool), &river.Config{Schema: p.schema, Logger: quietLogger()})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	p.client = client
	if err := say(report{Phase: "ready"}); err != nil {
		return err
	}
	if err := p.await("go"); err != nil {
		return err
	}
	cpu0 := ownCPU()
	n, err := window(ctx, o.window, o.clients, func(ctx context.Context) (int, error) {
		// Never cancelled mid-flight: every job inserted is counted.
		k, err := insert(context.WithoutCancel(ctx), o.batch)
		p.inserted.Add(int64(k))
		return k, err
	})
	if err != nil {
		return err
	}
	if err := say(report{Phase: "window", Count: n, CPUSeconds: ownCPU() - cpu0, Inserted: p.inserted.Load()}); err != nil {
		return err
	}
	if err := p.await("stop"); err != nil {
		return err
	}
	return say(report{Phase: "stopped", Inserted: p.inserted.Load()})
}

// window runs op from workers goroutines for d and returns how many items
// they completed; the first error ends the window. An op under way when d
// ends finishes and is counted, as in queen-bench's own windows.
func window(ctx context.Context, d time.Duration, workers int, op func(ctx context.Context) (int, error)) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, err := op(ctx)
				done.Add(int64(n))
				if err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return done.Load(), firstErr
}
