package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// peerSpec is one River column of a workload, run by the river-peer
// binary (bench/riverpeer, its own Go module: the broker never depends on
// River) in a fresh process per window.
type peerSpec struct {
	name     string // the column: "river", or "river-copy" for InsertManyFast
	workload string // the peer's -workload, also the River queue's name
	clients  int    // inserting goroutines, or the queue's MaxWorkers when consuming
	batch    int    // jobs per InsertMany
}

// peerResult is one River column's figures.
type peerResult struct {
	Name       string    `json:"name"`
	Workload   string    `json:"workload"`
	Clients    int       `json:"clients"`
	Rates      []float64 `json:"rates"`
	Median     float64   `json:"median"`
	CPUPer1k   float64   `json:"processCpuSecondsPer1000"` // River's process, its load generator included
	PGCPUPer1k float64   `json:"postgresCpuSecondsPer1000"`
	WALPerMsg  float64   `json:"walBytesPerMessage"`
}

// peerReport is one line of the peer's protocol (see bench/riverpeer).
type peerReport struct {
	Phase      string  `json:"phase"`
	Count      int64   `json:"count"`
	CPUSeconds float64 `json:"cpuSeconds"`
	Inserted   int64   `json:"inserted"`
	Completed  int64   `json:"completed"`
	Duplicates int64   `json:"duplicates"`
}

// riverBooks is what the peers reported, per River queue, for the
// exactly-once check of river_job.
type riverBooks struct {
	mu                              sync.Mutex
	inserted, completed, duplicates map[string]int64
}

func newRiverBooks() *riverBooks {
	return &riverBooks{inserted: map[string]int64{}, completed: map[string]int64{}, duplicates: map[string]int64{}}
}

func (b *riverBooks) add(queue string, r peerReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inserted[queue] += r.Inserted
	b.completed[queue] += r.Completed
	b.duplicates[queue] += r.Duplicates
}

// peerProc is a running river-peer.
type peerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startPeer starts the peer for one window of s and waits until it is
// set up (its untimed part: migrations, warm pool, backlog).
func (e *env) startPeer(ctx context.Context, s peerSpec) (*peerProc, error) {
	cmd := exec.CommandContext(ctx, e.o.river, "-dsn", e.pg.DSN("postgres"), "-workload", s.workload,
		"-window", e.o.window.String(), "-clients", strconv.Itoa(s.clients), "-batch", strconv.Itoa(s.batch))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", e.o.river, err)
	}
	p := &peerProc{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	if _, err := p.read("ready"); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// read reads the peer's next line, which must be of phase.
func (p *peerProc) read(phase string) (peerReport, error) {
	var r peerReport
	if !p.lines.Scan() {
		return r, fmt.Errorf("river-peer ended before %q: %v", phase, p.lines.Err())
	}
	if err := json.Unmarshal(p.lines.Bytes(), &r); err != nil || r.Phase != phase {
		return r, fmt.Errorf("river-peer: want %q, got %q", phase, p.lines.Text())
	}
	return r, nil
}

func (p *peerProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// peerWindow runs one window of s in a fresh peer, between the same marks
// as the raw and broker windows, and books what the peer inserted and
// completed.
func (e *env) peerWindow(ctx context.Context, s peerSpec, t *tally) error {
	p, err := e.startPeer(ctx, s)
	if err != nil {
		return err
	}
	r, err := e.drivePeer(ctx, p)
	if err != nil {
		p.kill()
		return err
	}
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("river-peer: %w", err)
	}
	if err := e.awaitPeerGone(ctx); err != nil {
		return err
	}
	e.river.add(s.workload, r.stopped)
	t.add(r.window.Count, e.o.window.Seconds(), r.before, r.after, r.window.CPUSeconds)
	return nil
}

// peerRun is what drivePeer read: the peer's window and final reports and
// the marks around its window.
type peerRun struct {
	window, stopped peerReport
	before, after   mark
}

// drivePeer takes a set-up peer through its window: checkpoint, mark, go,
// its window report, mark, stop, its final report.
func (e *env) drivePeer(ctx context.Context, p *peerProc) (peerRun, error) {
	var r peerRun
	if err := e.checkpoint(ctx); err != nil {
		return r, err
	}
	var err error
	if r.before, err = e.markBefore(ctx); err != nil {
		return r, err
	}
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		return r, fmt.Errorf("river-peer: %w", err)
	}
	if r.window, err = p.read("window"); err != nil {
		return r, err
	}
	if r.after, err = e.markAfter(ctx); err != nil {
		return r, err
	}
	if _, err := io.WriteString(p.stdin, "stop\n"); err != nil {
		return r, fmt.Errorf("river-peer: %w", err)
	}
	r.stopped, err = p.read("stopped")
	return r, err
}

// awaitPeerGone waits until the peer's backends have ended and the
// postmaster has reaped them: an exited backend's CPU time moves into the
// postmaster's children's time only when it is reaped, and it must not
// move during a later window's marks.
func (e *env) awaitPeerGone(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var sessions int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'river-peer'`).Scan(&sessions); err != nil {
			return fmt.Errorf("river-peer sessions: %w", err)
		}
		if sessions == 0 && !hasZombieChild(e.pgPID) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("river-peer: %d sessions still open 30 s after it exited", sessions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// peerResult summarises a peer column's windows.
func (t tally) peerResult(s peerSpec) peerResult {
	return peerResult{Name: s.name, Workload: s.workload, Clients: s.clients, Rates: t.rates, Median: median(t.rates),
		CPUPer1k: t.per1k(t.own), PGCPUPer1k: t.per1k(t.pg), WALPerMsg: t.walPerMsg()}
}

func (p peerResult) print() {
	fmt.Printf("%-13s %-10s %9.0f msg/s  windows %v; CPU-s per 1,000 msgs: River's process %.3f, postgres %.3f; WAL %.0f B/msg\n",
		"", p.Name, p.Median, rounded(p.Rates), p.CPUPer1k, p.PGCPUPer1k, p.WALPerMsg)
}

// riverStored is one River queue's jobs by state.
type riverStored struct {
	Inserted int64            `json:"inserted"`
	ByState  map[string]int64 `json:"byState"`
	Retried  int64            `json:"attemptedMoreThanOnce"`
}

// verifyRiver checks river_job against what the peers reported (see
// riverProblems) and prints what it found.
func (e *env) verifyRiver(ctx context.Context, res *result) error {
	if len(e.river.inserted) == 0 {
		return nil
	}
	stored, err := e.riverJobs(ctx)
	if err != nil {
		return fmt.Errorf("river jobs: %w", err)
	}
	res.River = stored
	problems := e.river.problems(stored)
	for _, p := range problems {
		ledger.problem("%s", p)
	}
	fmt.Printf("\nriver: %d queues checked against river_job, %d problems\n", len(e.river.inserted), len(problems))
	return nil
}

// problems compares river_job (stored) with the peers' reports: every job
// a peer inserted is stored once; every job is available (not yet worked)
// or completed, completed ones in one attempt, as many as River reported
// completed, none worked twice in a process.
func (b *riverBooks) problems(stored map[string]riverStored) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	queues := make([]string, 0, len(b.inserted))
	for q := range b.inserted {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for _, q := range queues {
		s := stored[q]
		total := int64(0)
		for _, k := range s.ByState {
			total += k
		}
		if total != b.inserted[q] {
			out = append(out, fmt.Sprintf("river %s: %d inserted, %d stored", q, b.inserted[q], total))
		}
		if s.ByState["completed"] != b.completed[q] {
			out = append(out, fmt.Sprintf("river %s: %d completions reported, %d stored", q, b.completed[q], s.ByState["completed"]))
		}
		if total != s.ByState["available"]+s.ByState["completed"] {
			out = append(out, fmt.Sprintf("river %s: jobs neither available nor completed: %v", q, s.ByState))
		}
		if s.Retried > 0 || b.duplicates[q] > 0 {
			out = append(out, fmt.Sprintf("river %s: %d jobs attempted more than once, %d worked twice", q, s.Retried, b.duplicates[q]))
		}
	}
	return out
}

// riverJobs counts river_job rows per queue and state.
func (e *env) riverJobs(ctx context.Context) (map[string]riverStored, error) {
	rows, err := e.pool.Query(ctx, `SELECT queue, state::text, count(*), count(*) FILTER (WHERE attempt > 1)
		FROM river.river_job GROUP BY 1, 2`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]riverStored{}
	for rows.Next() {
		var q, state string
		var n, retried int64
		if err := rows.Scan(&q, &state, &n, &retried); err != nil {
			return nil, err
		}
		s := out[q]
		if s.ByState == nil {
			s.ByState = map[string]int64{}
		}
		s.Inserted = e.river.inserted[q]
		s.ByState[state] += n
		s.Retried += retried
		out[q] = s
	}
	return out, rows.Err()
}

// threeWay is the table of raw, queen and River for the workloads with
// River columns, in Markdown: messages/s (medians), queen/River, CPU-s per
// 1,000 messages (PostgreSQL's, then + the broker's or River's process),
// and WAL bytes per message. A second River column (InsertManyFast: COPY)
// is shown in parentheses beside the first.
func threeWay(cs []comparison) []string {
	lines := []string{
		"| work | raw | queen | River | queen/River | CPU/1k raw · queen · River | WAL raw · queen · River |",
		"|---|---|---|---|---|---|---|",
	}
	for _, c := range cs {
		if len(c.Peers) == 0 {
			continue
		}
		rate := peerCells(c.Peers, func(p peerResult) string { return thousands(p.Median) })
		ratio := peerCells(c.Peers, func(p peerResult) string {
			if p.Median == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", c.BrokerMedian/p.Median)
		})
		cpu := peerCells(c.Peers, func(p peerResult) string { return fmt.Sprintf("%.3f+%.3f", p.PGCPUPer1k, p.CPUPer1k) })
		wal := peerCells(c.Peers, func(p peerResult) string { return thousands(p.WALPerMsg) })
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %.3f · %.3f+%.3f · %s | %s · %s · %s |",
			c.Row, thousands(c.RawMedian), thousands(c.BrokerMedian), rate, ratio,
			c.RawPGCPUPer1k, c.PGCPUPer1k, c.BrokerCPUPer1k, cpu, thousands(c.RawWALPerMsg), thousands(c.WALPerMsg), wal))
	}
	return lines
}

// peerCells is the first River column's cell, the others' in parentheses
// after it, named by their suffix ("river-copy": COPY).
func peerCells(ps []peerResult, cell func(peerResult) string) string {
	s := cell(ps[0])
	for _, p := range ps[1:] {
		s += fmt.Sprintf(" (%s %s)", strings.ToUpper(strings.TrimPrefix(p.Name, "river-")), cell(p))
	}
	return s
}

// thousands rounds x and groups its digits by three: 52629.4 -> "52,629".
func thousands(x float64) string {
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
