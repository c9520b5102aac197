package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// shardSide is one side of the routing comparison: its windows' rates and
// its CPU per 1,000 messages.
type shardSide struct {
	Rates          []float64 `json:"rates"`
	Median         float64   `json:"median"`
	PGCPUPer1k     float64   `json:"postgresCpuSecondsPer1000"`
	BrokerCPUPer1k float64   `json:"brokerCpuSecondsPer1000"`
}

// shardComparison is one workload against a broker without shards (plain),
// a broker with shards on a queue of s0 (one: the routing overhead, s0 on
// the plain database's server) and on queues of s0 and s1 (two: their
// total).
type shardComparison struct {
	Name     string    `json:"name"`
	Plain    shardSide `json:"plain"`
	One      shardSide `json:"oneShard"`
	Two      shardSide `json:"twoShards"`
	RatioOne float64   `json:"ratioOneShardToPlain"`
	RatioTwo float64   `json:"ratioTwoShardsToPlain"`
	Target   float64   `json:"target"`
	Met      bool      `json:"met"`
}

// shardOp makes one window's workers and operation.
type shardOp func(win int) (int, func(ctx context.Context, worker, iter int) (int, error))

// shardLoad is one workload of the comparison: per side its operation,
// and the refill that precedes each of the side's windows.
type shardLoad struct {
	name            string
	plain, one, two shardOp
	refill          [3]func(ctx context.Context) error
	setup           func(ctx context.Context) error
}

// split runs ops[worker%2] with the worker's index among its half: half the
// workers on each queue.
func split(a, b func(ctx context.Context, worker, iter int) (int, error)) func(ctx context.Context, worker, iter int) (int, error) {
	return func(ctx context.Context, worker, iter int) (int, error) {
		if worker%2 == 0 {
			return a(ctx, worker, iter)
		}
		return b(ctx, worker, iter)
	}
}

// shardLoads are push-b1 and pop+ack-b10 as make bench runs them (50
// producers; 10 consumers over 20 prefilled partitions).
func (r *shardRig) shardLoads() []shardLoad {
	const producers, consumers, perPartition, partitions = 50, 10, 6000, 20
	push := func(e *env, queue string) func(win int) func(ctx context.Context, worker, iter int) (int, error) {
		return func(win int) func(ctx context.Context, worker, iter int) (int, error) {
			return pushOp(e, e.url, queue, queue, 1, win)
		}
	}
	pPlain, pOne := push(r.plain, "bench-shard-push"), push(r.sharded, "bench-shard-a-push")
	pA, pB := push(r.sharded, "bench-shard-a-push2"), push(r.shardedS1, "bench-shard-b-push2")
	pop := func(e *env, queue string) func(ctx context.Context, worker, iter int) (int, error) {
		return func(ctx context.Context, worker, iter int) (int, error) {
			return e.popAck(ctx, queue, "", 10, false, nil)
		}
	}
	popQueues := r.popQueues()
	topUp := func(i ...int) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			for _, k := range i {
				if err := popQueues[k].e.topUp(ctx, popQueues[k].queue, perPartition); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return []shardLoad{
		{name: "push-b1", setup: r.placeAll,
			plain: func(win int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return producers, pPlain(win)
			},
			one: func(win int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return producers, pOne(win)
			},
			two: func(win int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return producers, split(pA(win), pB(win))
			}},
		{name: "pop+ack-b10",
			setup: func(ctx context.Context) error {
				for _, q := range popQueues {
					if err := q.e.createPartitions(ctx, q.queue, partitions); err != nil {
						return fmt.Errorf("%s: %w", q.queue, err)
					}
				}
				return nil
			},
			refill: [3]func(ctx context.Context) error{topUp(0), topUp(1), topUp(2, 3)},
			plain: func(int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return consumers, pop(popQueues[0].e, popQueues[0].queue)
			},
			one: func(int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return consumers, pop(popQueues[1].e, popQueues[1].queue)
			},
			two: func(int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return consumers, split(pop(popQueues[2].e, popQueues[2].queue), pop(popQueues[3].e, popQueues[3].queue))
			}},
	}
}

// benchQueue is a queue of the comparison and the broker (and pool) it is
// used through.
type benchQueue struct {
	e     *env
	queue string
}

func (r *shardRig) popQueues() []benchQueue {
	return []benchQueue{{r.plain, "bench-shard-pop"}, {r.sharded, "bench-shard-a-pop"}, {r.sharded, "bench-shard-a-pop2"}, {r.shardedS1, "bench-shard-b-pop2"}}
}

// placeAll creates every queue of the comparison before its first window.
func (r *shardRig) placeAll(ctx context.Context) error {
	push := []benchQueue{{r.plain, "bench-shard-push"}, {r.sharded, "bench-shard-a-push"}, {r.sharded, "bench-shard-a-push2"}, {r.shardedS1, "bench-shard-b-push2"}}
	for _, q := range append(push, r.popQueues()...) {
		if err := q.e.place(ctx, q.queue); err != nil {
			return err
		}
	}
	return nil
}

// compareShards alternates the three sides' windows of l and takes
// medians.
func (r *shardRig) compareShards(ctx context.Context, o options, l shardLoad) (shardComparison, error) {
	c := shardComparison{Name: l.name, Target: 0.95}
	if l.setup != nil {
		if err := l.setup(ctx); err != nil {
			return c, err
		}
	}
	var t [3]tally
	ops := [3]shardOp{l.plain, l.one, l.two}
	brokers := [3]*env{r.plain, r.sharded, r.sharded}
	for win := 0; win < o.windows; win++ {
		for s := range ops {
			if l.refill[s] != nil {
				if err := l.refill[s](ctx); err != nil {
					return c, err
				}
			}
			if err := r.checkpoint(ctx); err != nil {
				return c, err
			}
			workers, op := ops[s](win)
			before := mark{cpuMark: cpuMark{broker: cpuSeconds(brokers[s].broker.Process.Pid, false), pg: r.pgCPU()}}
			n, err := window(ctx, o.window, workers, op)
			if err != nil {
				return c, fmt.Errorf("%s window %d: %w", [3]string{"plain", "one shard", "two shards"}[s], win, err)
			}
			after := mark{cpuMark: cpuMark{broker: cpuSeconds(brokers[s].broker.Process.Pid, false), pg: r.pgCPU()}}
			t[s].add(n, o.window.Seconds(), before, after, after.broker-before.broker)
		}
	}
	sides := [3]*shardSide{&c.Plain, &c.One, &c.Two}
	for s, side := range sides {
		*side = shardSide{Rates: t[s].rates, Median: median(t[s].rates), PGCPUPer1k: t[s].per1k(t[s].pg), BrokerCPUPer1k: t[s].per1k(t[s].own)}
	}
	c.RatioOne, c.RatioTwo = ratio(c.One.Median, c.Plain.Median), ratio(c.Two.Median, c.Plain.Median)
	c.Met = c.RatioOne >= c.Target
	return c, nil
}

// ratio is a/b, 0 when b is.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (c shardComparison) print(local bool) {
	cpu := func(s shardSide) string {
		if !local {
			return fmt.Sprintf("broker %.3f", s.BrokerCPUPer1k)
		}
		return fmt.Sprintf("postgres %.3f, broker %.3f", s.PGCPUPer1k, s.BrokerCPUPer1k)
	}
	fmt.Printf("%-13s plain %8.0f msg/s  one shard %8.0f msg/s  ratio %.2f (target >= %.2f, %s)  two shards %8.0f msg/s (%.2f of plain)\n",
		"shards "+c.Name, c.Plain.Median, c.One.Median, c.RatioOne, c.Target, metWord(c.Met), c.Two.Median, c.RatioTwo)
	fmt.Fprintf(os.Stdout, "%-13s windows plain %v one %v two %v; CPU-s per 1,000 msgs: plain %s; one shard %s; two shards %s\n",
		"", rounded(c.Plain.Rates), rounded(c.One.Rates), rounded(c.Two.Rates), cpu(c.Plain), cpu(c.One), cpu(c.Two))
}

// place creates queue with one message through e's broker, retrying 503s
// for a minute: a new queue's placement (the catalogue, and each shard asked
// whether it already holds the queue) is set-up, not the routing measured,
// and on a loaded machine its connects can time out (a 503).
func (e *env) place(ctx context.Context, queue string) error {
	body := []byte(fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p0","transactionId":"place-%s","payload":{"n":0}}]}`, queue, queue))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		code, resp, err := e.http.do(ctx, "POST", e.url+"/api/v1/push", body)
		switch {
		case err != nil:
			return fmt.Errorf("place %s: %w", queue, err)
		case code == 201:
			e.ledger().addQueued(queue, 1)
			return nil
		case code != 503 || time.Now().After(deadline):
			return fmt.Errorf("place %s: %d %s", queue, code, resp)
		}
	}
}
