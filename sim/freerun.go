package sim

import (
	"context"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
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
	stop := make(chan struct{})
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		r.scheduleFaults(stop)
	}()
	var wg sync.WaitGroup
	perClient := o.Ops / o.Clients
	for _, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(c.id)))
			for i := 0; i < perClient && ctx.Err() == nil; i++ {
				if !r.cluster.Up(c.broker) {
					r.abandonAll(c) // its broker died; so did it
				}
				r.step(rng, c)
			}
		}()
	}
	wg.Wait()
	close(stop)
	fwg.Wait()
	r.fmu.Lock()
	err := r.heal()
	r.fmu.Unlock()
	if err != nil {
		return nil, err
	}
	return r.conclude(dsn, perClient*o.Clients)
}

// scheduleFaults applies the fault schedule on wall time until stop.
func (r *runner) scheduleFaults(stop <-chan struct{}) {
	fs := append([]FaultAt(nil), r.o.Faults...)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].At < fs[j].At })
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		r.fmu.Lock()
		r.expireFaults(now)
		for len(fs) > 0 && !r.start.Add(fs[0].At).After(now) {
			if err := r.inject(fs[0]); err != nil {
				r.hist.Add(Event{K: KFault, F: fs[0].Kind, What: "error: " + err.Error(), VT: r.vt()})
			}
			fs = fs[1:]
		}
		r.fmu.Unlock()
	}
}
