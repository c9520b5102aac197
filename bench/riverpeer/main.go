// Command river-peer is queen-bench's River column: one measurement window
// of one workload, run with River (github.com/riverqueue/river) against the
// bench's PostgreSQL. It lives in its own Go module so that the broker's
// module never depends on River.
//
// The peer talks to queen-bench over its standard streams, one JSON object
// a line on stdout:
//
//	{"phase":"ready","inserted":N}  set up (migrated, pool warm, backlog topped up)
//	                                  -- queen-bench marks CPU and WAL, writes a line to stdin --
//	{"phase":"window","count":N,"cpuSeconds":S}  the window is over
//	                                  -- queen-bench marks again, writes a line --
//	{"phase":"stopped","inserted":N,"completed":N,"duplicates":N}
//
// The peer keeps its connections until queen-bench has marked the window's
// end: a backend that exits is counted in PostgreSQL's CPU only once the
// postmaster has reaped it, which may fall on either side of a mark.
//
// "inserted" counts every job the peer inserted (backlog and window),
// "completed" every completion River reported (in the window and while
// stopping), so that queen-bench can check river_job against them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"syscall"
	"time"
)

// options are the peer's flags.
type options struct {
	dsn      string
	workload string
	window   time.Duration
	clients  int
	batch    int
	backlog  int
	schema   string
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "dsn", "", "PostgreSQL connection string (required)")
	flag.StringVar(&o.workload, "workload", "", "push-b1, push-b100, push-b100-copy or consume")
	flag.DurationVar(&o.window, "window", 5*time.Second, "length of the measurement window")
	flag.IntVar(&o.clients, "clients", 50, "inserting goroutines (push) or the queue's MaxWorkers (consume)")
	flag.IntVar(&o.batch, "batch", 100, "jobs per InsertMany call (push-b100, push-b100-copy)")
	flag.IntVar(&o.backlog, "backlog", 100000, "consume: available jobs topped up to before the window")
	flag.StringVar(&o.schema, "schema", "river", "schema holding River's tables")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		log.Fatal("river-peer: ", err)
	}
}

// report is one line of the peer's protocol.
type report struct {
	Phase      string  `json:"phase"`
	Count      int64   `json:"count,omitempty"`
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
	Inserted   int64   `json:"inserted"`
	Completed  int64   `json:"completed"`
	Duplicates int64   `json:"duplicates"`
}

// say writes one protocol line.
func say(r report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(os.Stdout, "%s\n", b)
	return err
}

// await blocks until queen-bench writes the next line to stdin.
func (p *peer) await(what string) error {
	if _, err := p.stdin.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// ownCPU is this process's user and system time in seconds: River's
// process, with its load generator in it.
func ownCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func run(ctx context.Context, o options) error {
	if o.dsn == "" {
		return fmt.Errorf("-dsn is required")
	}
	p, err := connect(ctx, o)
	if err != nil {
		return err
	}
	p.stdin = bufio.NewReader(os.Stdin)
	defer p.pool.Close()
	switch o.workload {
	case "push-b1":
		return p.push(ctx, o, p.insertOne)
	case "push-b100":
		return p.push(ctx, o, p.insertMany)
	case "push-b100-copy":
		return p.push(ctx, o, p.insertManyFast)
	case "consume":
		return p.consume(ctx, o)
	}
	return fmt.Errorf("unknown workload %q", o.workload)
}
