package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// moveResult is a queue's move from s0 to s1 under load.
type moveResult struct {
	Rate            int     `json:"offeredPerSecond"`
	State           string  `json:"state"`
	Reason          string  `json:"reason,omitempty"`
	CopyMs          int64   `json:"copyMs"`
	FreezePauseMs   int64   `json:"freezePauseMs"`
	MoveMs          float64 `json:"moveMs"` // POST to done, as the bench saw it
	Pushed          int64   `json:"pushed"`
	Delivered       int64   `json:"delivered"`
	PushStallMs     float64 `json:"producersLongestStallMs"`
	PopStallMs      float64 `json:"consumersLongestStallMs"`
	PushP99BeforeMs float64 `json:"pushP99BeforeMs"`
	PushP99DuringMs float64 `json:"pushP99DuringMs"`
	Refusals        int64   `json:"refusals503Retried"`
	ExactlyOnce     bool    `json:"exactlyOnce"`
	// ServerErrors are the servers' last ERROR lines when the move failed.
	ServerErrors []string `json:"serverErrors,omitempty"`
}

// moveLoad is the traffic on the moving queue: what it pushed and when,
// and what it was delivered when.
type moveLoad struct {
	url, queue string
	http       *httpClient
	mu         sync.Mutex
	pushes     []timedPush         // each answered push
	deliveries []time.Time         // each delivery's time
	delivered  map[string]int      // transactionId -> deliveries
	pushed     map[string]struct{} // transactionIds answered queued
	refusals   atomic.Int64
	errs       chan error
}

// timedPush is one push: when it was first sent and how long until it was
// answered 201, its 503s retried.
type timedPush struct {
	start time.Time
	took  time.Duration
}

const moveQueue = "bench-shard-move"

// shardMove runs 1,000 msg/s of pushes (10 producers) and 4 consumers on a
// queue of s0 for a window, moves it to s1, keeps the traffic up for a
// second after the move is done, then drains and checks that every push
// answered queued was delivered once.
func (r *shardRig) shardMove(ctx context.Context, o options) (moveResult, error) {
	res := moveResult{Rate: 1000}
	l := &moveLoad{url: r.sharded.url, queue: moveQueue, http: r.sharded.http, delivered: map[string]int{},
		pushed: map[string]struct{}{}, errs: make(chan error, 16)}
	pctx, stopProducers := context.WithCancel(ctx)
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var pwg, cwg sync.WaitGroup
	for p := 0; p < 10; p++ {
		pwg.Add(1)
		go func() { defer pwg.Done(); l.produce(pctx, p, 10*time.Millisecond) }()
	}
	for c := 0; c < 4; c++ {
		cwg.Add(1)
		go func() { defer cwg.Done(); l.consume(cctx) }()
	}
	time.Sleep(o.window) // before: the queue is placed on s0 and busy
	start := time.Now()
	st, err := r.move(ctx, "s1")
	end := time.Now()
	if err == nil {
		time.Sleep(time.Second) // after: pushes and pops on s1
	}
	stopProducers()
	pwg.Wait()
	deadline := time.Now().Add(time.Minute)
	for !l.drained() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopConsumers()
	cwg.Wait()
	close(l.errs)
	for e := range l.errs {
		if err == nil {
			err = e
		}
	}
	if err != nil {
		return res, err
	}
	res.State, res.Reason, res.CopyMs, res.FreezePauseMs = st.State, st.Reason, st.CopyMs, st.FreezePauseMs
	res.MoveMs = ms(end.Sub(start))
	l.summarize(&res, start, end)
	r.books.addQueued(moveQueue, res.Pushed)
	return res, nil
}

// move plans the queue's move to shard to and polls it until it is done
// or failed (5 minutes at most).
func (r *shardRig) move(ctx context.Context, to string) (moveStatus, error) {
	var st moveStatus
	code, body, err := r.sharded.http.do(ctx, "POST", r.sharded.url+"/api/v1/admin/queues/"+moveQueue+"/move", []byte(`{"to":"`+to+`"}`))
	if err != nil || code != 202 || json.Unmarshal(body, &st) != nil {
		return st, fmt.Errorf("move: %d %s %v", code, body, err)
	}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		code, body, err := r.sharded.http.do(ctx, "GET", r.sharded.url+"/api/v1/admin/moves/"+st.MoveID, nil)
		if err != nil || code != 200 || json.Unmarshal(body, &st) != nil {
			return st, fmt.Errorf("move state: %d %s %v", code, body, err)
		}
		if st.State == "done" || st.State == "failed" {
			return st, nil
		}
	}
	return st, fmt.Errorf("move %s not done after 5 minutes (state %s)", st.MoveID, st.State)
}

// moveStatus is GET /api/v1/admin/moves/{id}'s answer.
type moveStatus struct {
	MoveID        string `json:"moveId"`
	State         string `json:"state"`
	Reason        string `json:"reason"`
	CopyMs        int64  `json:"copyMs"`
	FreezePauseMs int64  `json:"freezePauseMs"`
}

// produce pushes one message every tick until c ends, each retried on 503
// every 20 ms until stored (a client honouring Retry-After: 1 would wait
// longer; the bench measures the broker).
func (l *moveLoad) produce(c context.Context, p int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-c.Done():
			return
		case <-t.C:
		}
		txid := fmt.Sprintf("mv-%d-%d", p, i)
		body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p%d","transactionId":%q,"payload":{"n":%d}}]}`, l.queue, p%8, txid, i)
		t0 := time.Now()
		if _, err := l.retry("POST", l.url+"/api/v1/push", body, 201); err != nil {
			l.errs <- fmt.Errorf("push %s: %w", txid, err)
			return
		}
		l.mu.Lock()
		l.pushes = append(l.pushes, timedPush{start: t0, took: time.Since(t0)})
		l.pushed[txid] = struct{}{}
		l.mu.Unlock()
	}
}

// retry sends a request until it answers want, retrying 503s every 20 ms
// (for two minutes at most); any other answer is an error.
func (l *moveLoad) retry(method, url, body string, want ...int) ([]byte, error) {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		code, resp, err := l.http.do(context.Background(), method, url, []byte(body))
		if err != nil {
			return nil, err
		}
		for _, w := range want {
			if code == w {
				return resp, nil
			}
		}
		if code != 503 {
			return nil, fmt.Errorf("%s %s: %d %s", method, url, code, resp)
		}
		l.refusals.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("%s %s: still 503 after 2 minutes", method, url)
}

// consume long-polls and acks until c ends, recording each delivery; pops
// and acks answered 503 are retried.
func (l *moveLoad) consume(c context.Context) {
	for c.Err() == nil {
		resp, err := l.retry("GET", l.url+"/api/v1/pop/queue/"+l.queue+"?batch=100&wait=true&timeout=1000", "", 200, 204)
		if err != nil {
			l.errs <- err
			return
		}
		if len(resp) == 0 {
			continue
		}
		var p popped
		if err := json.Unmarshal(resp, &p); err != nil {
			l.errs <- fmt.Errorf("pop: %s: %w", resp, err)
			return
		}
		now := time.Now()
		acks := make([]string, len(p.Messages))
		l.mu.Lock()
		for i, m := range p.Messages {
			l.delivered[m.TransactionID]++
			l.deliveries = append(l.deliveries, now)
			acks[i] = fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`, m.TransactionID, m.PartitionID, p.LeaseID)
		}
		l.mu.Unlock()
		ack, err := l.retry("POST", l.url+"/api/v1/ack/batch", `{"acknowledgments":[`+strings.Join(acks, ",")+`]}`, 200)
		if err == nil && strings.Contains(string(ack), `"success":false`) {
			err = fmt.Errorf("ack refused: %s", ack)
		}
		if err != nil {
			l.errs <- err
			return
		}
	}
}

// drained reports whether every push answered queued was delivered.
func (l *moveLoad) drained() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.delivered) >= len(l.pushed)
}

// summarize fills res from what the load saw, the move running from start
// to end.
func (l *moveLoad) summarize(res *moveResult, start, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var before, during []float64
	var longest time.Duration
	for _, p := range l.pushes {
		longest = max(longest, p.took)
		switch {
		case p.start.Before(start):
			before = append(before, ms(p.took))
		case p.start.Before(end):
			during = append(during, ms(p.took))
		}
	}
	res.PushStallMs, res.PushP99BeforeMs, res.PushP99DuringMs = ms(longest), percentile(before, 0.99), percentile(during, 0.99)
	res.PopStallMs = ms(longestGap(l.deliveries, start, end))
	res.Pushed, res.Refusals = int64(len(l.pushed)), l.refusals.Load()
	res.ExactlyOnce = len(l.delivered) == len(l.pushed)
	for txid, n := range l.delivered {
		res.Delivered += int64(n)
		if _, ok := l.pushed[txid]; !ok || n != 1 {
			res.ExactlyOnce = false
			l.problem(txid, n, ok)
		}
	}
	if len(l.delivered) != len(l.pushed) {
		ledger.problem("shard-move: %d pushed, %d distinct delivered", len(l.pushed), len(l.delivered))
	}
}

func (l *moveLoad) problem(txid string, n int, pushed bool) {
	ledger.problem("shard-move: %s delivered %d times (answered queued: %t)", txid, n, pushed)
}

// longestGap is the longest time between from and to with no event in ts:
// between from and the first event within, between events, and from the
// last to to (to - from when none falls within).
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	s := append([]time.Time(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	prev, gap := from, time.Duration(0)
	for _, t := range s {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return max(gap, to.Sub(prev))
}

func (r moveResult) print() {
	fmt.Printf("%-13s queue at %d msg/s offered, 4 consumers, moved s0 -> s1: %s in %.0f ms (copy %d ms, freeze pause %d ms)%s\n",
		"shard-move", r.Rate, r.State, r.MoveMs, r.CopyMs, r.FreezePauseMs, map[bool]string{true: "", false: ": " + r.Reason}[r.Reason == ""])
	fmt.Printf("%-13s longest stall: producers %.0f ms, consumers %.0f ms; push p99 %.1f ms before, %.1f ms during the move; %d 503s retried; %d pushed, %d delivered, exactly-once %s\n",
		"", r.PushStallMs, r.PopStallMs, r.PushP99BeforeMs, r.PushP99DuringMs, r.Refusals, r.Pushed, r.Delivered,
		map[bool]string{true: "verified", false: "VIOLATED"}[r.ExactlyOnce])
	for _, l := range r.ServerErrors {
		fmt.Printf("%-13s %s\n", "", l)
	}
}
