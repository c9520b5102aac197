package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// runFree is the free-running mode: real goroutines, real HTTP on loopback,
// concurrent producers and consumers, PostgreSQL's own clock. The seed fixes
// the workload and the fault schedule; what interleaves is up to the
// machine, so properties come from the history alone. This is where races
// between transactions (commit order versus creation order) show up.
func runFree(ctx context.Context, dsn string, o Options, log io.Writer) (*Result, error) {
	r := &runner{o: o, start: time.Now(), hist: &History{}, fired: map[string]int{}, ctx: ctx}
	if err := r.setup(dsn, log); err != nil {
		return nil, err
	}
	defer r.cluster.Close()
	// Fault times count from the workload's start, not from before the
	// cluster came up: a loaded machine's slow setup must not make every
	// fault fall due at once. (History times stay on r.start, which the
	// brokers' sweepers already read.)
	workStart := time.Now()
	r.faultsLeft.Store(int64(len(o.Faults)))
	var done atomic.Int64
	stop := make(chan struct{})
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		r.scheduleFaults(workStart, stop)
	}()
	var wg sync.WaitGroup
	perClient := o.Ops / o.Clients
	for _, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(c.id)))
			// The ops are a floor: a fault still to come keeps the load
			// on (up to overrun times the ops), so a fast machine does
			// not finish before the fault it was written for.
			for i := 0; (i < perClient || r.faultsLeft.Load() > 0 && i < overrun*perClient) && ctx.Err() == nil; i++ {
				if !r.cluster.Up(c.broker) {
					r.abandonAll(c) // its broker died; so did it
				}
				if _, up := r.brokerFor(c); !up {
					// Every broker is down (a rolling restart's
					// overlap): an op now would return at once, and
					// a loop of them would spend the whole overrun
					// budget before the brokers come back.
					time.Sleep(downPause)
				}
				r.step(rng, c)
				n := 1 + c.extraOps
				c.extraOps = 0
				i += n - 1
				done.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	close(stop)
	fwg.Wait()
	r.awaitProbes()
	if n := r.faultsLeft.Load(); n > 0 {
		r.starved = append(r.starved, fmt.Sprintf("%d fault(s) never injected: the workload ended (%d ops, %dx its own) before their time", n, done.Load(), overrun))
	}
	r.fmu.Lock()
	err := r.heal()
	r.fmu.Unlock()
	if err != nil {
		return nil, err
	}
	return r.conclude(dsn, int(done.Load()))
}

// awaitProbes waits for the running probes, expiring faults meanwhile (the
// schedule has stopped, and a fault left active would starve them).
func (r *runner) awaitProbes() {
	done := make(chan struct{})
	go func() { r.probes.Wait(); close(done) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			r.fmu.Lock()
			r.expireFaults(time.Now())
			r.fmu.Unlock()
		}
	}
}

// downPause is how long a client waits before an op when no broker is up.
const downPause = 20 * time.Millisecond

// overrun bounds how far the workload runs past its ops waiting for a
// fault still scheduled.
const overrun = 8

// scheduleFaults applies the fault schedule on wall time until stop.
func (r *runner) scheduleFaults(workStart time.Time, stop <-chan struct{}) {
	fs := append([]FaultAt(nil), r.o.Faults...)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].At < fs[j].At })
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			// Probes measure the brokers, not the load: one the
			// workload ended before still runs (awaitProbes waits),
			// on brokers that are up (a broker.start the workload
			// ended before would otherwise come only with the heal,
			// after the probes starved on its absence).
			r.fmu.Lock()
			for _, f := range fs {
				if f.Kind == "broker.start" {
					if err := r.inject(f); err != nil {
						r.hist.Add(Event{Kind: KFault, Fault: f.Kind, What: "error: " + err.Error(), VT: r.vt()})
					}
					r.faultsLeft.Add(-1)
				}
			}
			for _, f := range fs {
				if f.Kind == "wake.probe" || f.Kind == "queue.recreate" || f.Kind == "cache.stale" {
					if err := r.inject(f); err != nil {
						r.hist.Add(Event{Kind: KFault, Fault: f.Kind, What: "error: " + err.Error(), VT: r.vt()})
					}
					r.faultsLeft.Add(-1)
				}
			}
			r.fmu.Unlock()
			return
		case <-tick.C:
		}
		now := time.Now()
		r.fmu.Lock()
		r.expireFaults(now)
		for len(fs) > 0 && !workStart.Add(fs[0].At).After(now) {
			if err := r.inject(fs[0]); err != nil {
				r.hist.Add(Event{Kind: KFault, Fault: fs[0].Kind, What: "error: " + err.Error(), VT: r.vt()})
			}
			fs = fs[1:]
			r.faultsLeft.Add(-1)
		}
		r.fmu.Unlock()
	}
}
