package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// The grown mode (make bench-grown) asks whether the queen column of the
// three-way table holds on tables the size make bench-scale grows them to:
// it runs the broker's windows of push-b1, push-b100 and pop+ack-b10 on
// fresh tables, grows the tables untimed (grow: 10 million messages by
// default), and runs the same workloads again on the same server and
// broker. Besides throughput, PostgreSQL's and the broker's CPU and WAL per
// message, it counts from pg_stat_statements the load-independent figures:
// top-level statements and their shared buffer hits and reads per message.
// Exactly-once is verified after each half.

// grownNames are the workloads the grown mode runs, in this order.
var grownNames = []string{"push-b1", "push-b100", "pop+ack-b10"}

// grownFigures are one workload's figures on one size of the tables.
type grownFigures struct {
	Rates          []float64 `json:"rates,omitempty"`
	Rate           float64   `json:"msgsPerSecond"`
	PGCPUPer1k     float64   `json:"postgresCpuSecondsPer1000"`
	BrokerCPUPer1k float64   `json:"brokerCpuSecondsPer1000"`
	WALPerMsg      float64   `json:"walBytesPerMessage"`
	StmtsPerMsg    float64   `json:"statementsPerMessage"`
	HitsPerMsg     float64   `json:"bufferHitsPerMessage"`
	ReadsPerMsg    float64   `json:"bufferReadsPerMessage"`
}

// grownRow is one workload fresh, grown, and grown/fresh figure by figure.
type grownRow struct {
	Name  string       `json:"name"`
	Fresh grownFigures `json:"fresh"`
	Grown grownFigures `json:"grown"`
	Ratio grownFigures `json:"ratio"`
}

type grownResult struct {
	Started          time.Time  `json:"started"`
	Window           string     `json:"window"`
	Windows          int        `json:"windows"`
	Size             scaleSize  `json:"size"`
	GrowSeconds      float64    `json:"growSeconds"`
	Rows             []grownRow `json:"rows"`
	ExactlyOnceFresh bool       `json:"exactlyOnceFresh"`
	ExactlyOnceGrown bool       `json:"exactlyOnceGrown"`
	Violations       []string   `json:"violations,omitempty"`
}

// statementSettings load pg_stat_statements for the grown mode's counts
// when no -pg-profile asks for the full profile.
func statementSettings() []string {
	return []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top", "pg_stat_statements.max=1000"}
}

// runGrown runs the grown mode and writes its result to o.out; it fails
// if exactly-once verification did.
func (e *env) runGrown(ctx context.Context, o options) error {
	res := grownResult{Started: time.Now().UTC(), Window: o.window.String(), Windows: o.windows, Size: o.size}
	ws := grownWorkloads()
	fresh, ok, err := e.grownHalf(ctx, ws, 0, "")
	if err != nil {
		return fmt.Errorf("fresh: %w", err)
	}
	res.ExactlyOnceFresh = ok
	// The scale queues first, so the grown state is make bench-scale's:
	// its dead letters and its group far behind hang off them.
	if err := e.scaleSetup(ctx); err != nil {
		return fmt.Errorf("scale setup: %w", err)
	}
	start := time.Now()
	if err := e.grow(ctx, o.size); err != nil {
		return fmt.Errorf("grow: %w", err)
	}
	res.GrowSeconds = time.Since(start).Seconds()
	fmt.Printf("grown (and vacuumed, analyzed) in %.0fs: %+v\n\n", res.GrowSeconds, o.size)
	grown, ok, err := e.grownHalf(ctx, ws, o.windows, " grown")
	if err != nil {
		return fmt.Errorf("grown: %w", err)
	}
	res.ExactlyOnceGrown, res.Violations = ok, ledger.problems
	for i, w := range ws {
		res.Rows = append(res.Rows, grownRow{Name: w.name, Fresh: fresh[i], Grown: grown[i], Ratio: ratios(fresh[i], grown[i])})
	}
	res.print()
	body, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(o.out, append(body, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nwritten %s\n", o.out)
	if !res.ExactlyOnceFresh || !res.ExactlyOnceGrown {
		return fmt.Errorf("exactly-once verification failed: %v", res.Violations)
	}
	return nil
}

// grownWorkloads are make bench's workloads named in grownNames.
func grownWorkloads() []workload {
	var ws []workload
	for _, name := range grownNames {
		for _, w := range workloads() {
			if w.name == name {
				ws = append(ws, w)
			}
		}
	}
	return ws
}

// grownHalf runs the broker windows of every workload (set up on the first
// half, firstWin 0; window numbers from firstWin keep the pushes'
// transactionIds fresh), then verifies the workloads' queues.
func (e *env) grownHalf(ctx context.Context, ws []workload, firstWin int, suffix string) ([]grownFigures, bool, error) {
	var out []grownFigures
	for _, w := range ws {
		if firstWin == 0 {
			if err := w.setup(ctx, e); err != nil {
				return nil, false, fmt.Errorf("%s: %w", w.name, err)
			}
		}
		var t tally
		named := w
		named.name += suffix // the profile's heading
		for win := 0; win < e.o.windows; win++ {
			if err := e.timed(ctx, named, &t, true, func() (int, func(ctx context.Context, worker, iter int) (int, error)) {
				return w.brokerOp(e, firstWin+win)
			}); err != nil {
				return nil, false, fmt.Errorf("%s: %w", w.name, err)
			}
		}
		f := t.grownFigures()
		fmt.Printf("%-18s %8.0f msg/s  CPU-s/1k postgres %.3f broker %.3f  WAL %4.0f B/msg  statements %.3f  hits %.2f reads %.3f per msg\n",
			named.name, f.Rate, f.PGCPUPer1k, f.BrokerCPUPer1k, f.WALPerMsg, f.StmtsPerMsg, f.HitsPerMsg, f.ReadsPerMsg)
		out = append(out, f)
	}
	names := make([]string, 0, len(ledger.queued))
	for q := range ledger.queued {
		names = append(names, q)
	}
	var r result
	if err := e.verifyStoredIn(ctx, &r, names); err != nil {
		return nil, false, err
	}
	return out, r.ExactlyOnce, nil
}

// countStatements adds a grown-mode broker window's top-level statements
// and their shared buffers to t; the bench's own readings (the WAL
// position, the counters' reset) are left out.
func (e *env) countStatements(ctx context.Context, t *tally) error {
	if !e.o.grown {
		return nil
	}
	var calls, hits, reads float64
	err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(shared_blks_hit), 0)::float8,
		coalesce(sum(shared_blks_read), 0)::float8 FROM pg_stat_statements
		WHERE toplevel AND query NOT LIKE '%pg_stat%' AND query NOT LIKE '%pg_current_wal_lsn%'`).Scan(&calls, &hits, &reads)
	if err != nil {
		return fmt.Errorf("count statements: %w", err)
	}
	t.stmts, t.hits, t.reads = t.stmts+calls, t.hits+hits, t.reads+reads
	return nil
}

func (t tally) grownFigures() grownFigures {
	per := func(x float64) float64 { return t.per1k(x) / 1000 }
	return grownFigures{Rates: t.rates, Rate: median(t.rates), PGCPUPer1k: t.per1k(t.pg), BrokerCPUPer1k: t.per1k(t.own),
		WALPerMsg: t.walPerMsg(), StmtsPerMsg: per(t.stmts), HitsPerMsg: per(t.hits), ReadsPerMsg: per(t.reads)}
}

// ratios is grown/fresh figure by figure (0 where fresh is 0).
func ratios(fresh, grown grownFigures) grownFigures {
	div := func(g, f float64) float64 {
		if f == 0 {
			return 0
		}
		return g / f
	}
	return grownFigures{Rate: div(grown.Rate, fresh.Rate), PGCPUPer1k: div(grown.PGCPUPer1k, fresh.PGCPUPer1k),
		BrokerCPUPer1k: div(grown.BrokerCPUPer1k, fresh.BrokerCPUPer1k), WALPerMsg: div(grown.WALPerMsg, fresh.WALPerMsg),
		StmtsPerMsg: div(grown.StmtsPerMsg, fresh.StmtsPerMsg), HitsPerMsg: div(grown.HitsPerMsg, fresh.HitsPerMsg),
		ReadsPerMsg: div(grown.ReadsPerMsg, fresh.ReadsPerMsg)}
}

func (r grownResult) print() {
	fmt.Printf("\nqueen, fresh and after growing to %d messages in %d partitions of %d queues (+%d dead letters, %d KV keys; grown in %.0fs)\n",
		r.Size.Messages, r.Size.Partitions, r.Size.Queues, r.Size.DLQ, r.Size.KV, r.GrowSeconds)
	fmt.Printf("(medians of %d windows of %s; CPU-s per 1,000 msgs; WAL bytes, top-level statements, shared buffer hits and reads per msg)\n", r.Windows, r.Window)
	fmt.Printf("  %-12s %-12s %9s %9s %9s %8s %8s %8s %8s\n", "workload", "", "msgs/s", "pg CPU", "brk CPU", "WAL", "stmts", "hits", "reads")
	for _, row := range r.Rows {
		for _, l := range []struct {
			label string
			f     grownFigures
		}{{"fresh", row.Fresh}, {"grown", row.Grown}} {
			f := l.f
			fmt.Printf("  %-12s %-12s %9.0f %9.3f %9.3f %8.0f %8.3f %8.2f %8.3f\n", row.Name, l.label, f.Rate, f.PGCPUPer1k, f.BrokerCPUPer1k, f.WALPerMsg, f.StmtsPerMsg, f.HitsPerMsg, f.ReadsPerMsg)
		}
		f := row.Ratio
		fmt.Printf("  %-12s %-12s %9.2f %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f\n", row.Name, "grown/fresh", f.Rate, f.PGCPUPer1k, f.BrokerCPUPer1k, f.WALPerMsg, f.StmtsPerMsg, f.HitsPerMsg, f.ReadsPerMsg)
	}
	fmt.Printf("exactly-once: fresh %s, grown %s\n", verified(r.ExactlyOnceFresh), verified(r.ExactlyOnceGrown))
}

func verified(ok bool) string {
	if ok {
		return "verified"
	}
	return "VIOLATED"
}
