package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// refillChunk is the jobs per COPY when topping up the backlog.
const refillChunk = 5000

// consume tops the queue's backlog up (untimed), then runs River's
// workers for one window at River's default fetch settings (FetchCooldown
// 100 ms, FetchPollInterval 1 s) with o.clients as the queue's MaxWorkers,
// counting the completions River reports in the window. River's completer
// reports a completion once it is stored, so the count is of jobs done.
func (p *peer) consume(ctx context.Context, o options) error {
	worker := &noopWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(p.pool), &river.Config{
		Schema:  p.schema,
		Logger:  quietLogger(),
		Queues:  map[string]river.QueueConfig{p.queue: {MaxWorkers: o.clients}},
		Workers: workers,
	})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	p.client = client
	if err := p.refill(ctx, o.backlog); err != nil {
		return err
	}
	var completed atomic.Int64
	drained := p.countCompletions(client, &completed)
	if err := say(report{Phase: "ready", Inserted: p.inserted.Load()}); err != nil {
		return err
	}
	if err := p.await("go"); err != nil {
		return err
	}
	cpu0 := ownCPU()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	time.Sleep(o.window)
	n, cpu := completed.Load(), ownCPU()-cpu0
	if err := say(report{Phase: "window", Count: n, CPUSeconds: cpu, Inserted: p.inserted.Load()}); err != nil {
		return err
	}
	if err := p.await("stop"); err != nil {
		return err
	}
	// Stop lets the jobs under way finish and their completions be stored.
	if err := client.Stop(ctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	<-drained
	return say(report{Phase: "stopped", Inserted: p.inserted.Load(), Completed: completed.Load(), Duplicates: worker.duplicates.Load()})
}

// countCompletions counts completed-job events into n until the client
// stops and closes the subscription; the returned channel closes then. A
// failed or cancelled job is not counted, so it shows as a mismatch in
// queen-bench's check.
func (p *peer) countCompletions(client *river.Client[pgx.Tx], n *atomic.Int64) <-chan struct{} {
	// Large enough that no event is dropped: River drops the events a full
	// subscription channel cannot take.
	events, _ := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: 1 << 20,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range events {
			if ev.Kind == river.EventKindJobCompleted {
				n.Add(1)
			}
		}
	}()
	return done
}

// refill inserts jobs (River's COPY path) until the queue has backlog
// available ones.
func (p *peer) refill(ctx context.Context, backlog int) error {
	var have int
	err := p.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{p.schema, "river_job"}.Sanitize()+
		" WHERE queue = $1 AND state = 'available'", p.queue).Scan(&have)
	if err != nil {
		return fmt.Errorf("count backlog: %w", err)
	}
	for need := backlog - have; need > 0; need -= refillChunk {
		n, err := p.insertManyFast(ctx, min(need, refillChunk))
		p.inserted.Add(int64(n))
		if err != nil {
			return fmt.Errorf("refill: %w", err)
		}
	}
	return nil
}
