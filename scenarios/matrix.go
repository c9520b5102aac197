package scenarios

import (
	"time"

	"github.com/queen-go/queen/sim"
)

// The generator is driven by the coverage matrix (sim.Cover): a generated
// lockstep seed's low bits name a row of the plan below, and the row says
// which cells its scenario is built to reach, whatever else the seed draws.
// make sim's 16 seeds carry rows 0-15 (WithRow), so every row runs in every
// make sim, and the cells SPEC.md requires are the ones the rows plan.
//
// A row names the option the first queue ("orders") has, the fault the run
// must meet, whether timers or a stream write beside the workload, and
// whether groups subscribe late (subscriptionMode new, subscriptionFrom,
// seek). Retention and eviction rows meet only a crash or a clock skew:
// the generator keeps outages away from them (a spool replay stores a
// message later than it was answered, which their bounds cannot excuse).
// Every row also runs the probes every seed has: a sealed-paths probe
// (push, transaction, timer, stream sink and DLQ retry into an encrypted
// queue), a retention probe, late extends, a second spool, edge inputs on
// every route.

// Rows is how many rows the plan has. A set of Rows seeds whose low bits
// run through 0..Rows-1 (WithRow, as make sim's 16 seeds do) runs every
// row.
const Rows = 16

// WithRow puts row i%Rows into seed's low bits.
func WithRow(seed uint64, i int) uint64 { return seed&^uint64(Rows-1) | uint64(i%Rows) }

// rowOf is the matrix row a seed's low bits name.
func rowOf(seed uint64) int { return int(seed & (Rows - 1)) }

// plan is one row: the cells its seed is built to reach.
type plan struct {
	// queue is the first queue's option: encrypted, retention,
	// eviction, delayed, window, priority, dlq (acks fail often enough
	// that messages reach their retry limit) or plain (none at all).
	queue string
	// fault is a fault the run meets: pg.refuse (the spool's path),
	// pg.blackhole, pg.reset, pg.readonly, broker.crash, clock.skew, or
	// spool.corrupt (inside an outage).
	fault string
	// timers: timers and KV beside the workload; else a stream query.
	timers bool
	// late: consumer groups subscribe late (subs: new, from, seek).
	late bool
}

var (
	rowQueues = [8]string{"encrypted", "retention", "eviction", "delayed", "window", "priority", "plain", "dlq"}
	rowFaults = [Rows]string{"pg.refuse", "broker.crash", "clock.skew", "pg.blackhole", "pg.reset", "pg.readonly", "spool.corrupt", "broker.crash",
		"clock.skew", "clock.skew", "broker.crash", "pg.refuse", "pg.blackhole", "spool.corrupt", "pg.reset", "pg.readonly"}
)

// planOf is the row a seed's low bits name.
func planOf(seed uint64) plan {
	r := rowOf(seed)
	return plan{queue: rowQueues[r%8], fault: rowFaults[r], timers: r%2 == 0, late: r%4 != 3}
}

// calm reports whether the row keeps outages away (retention, eviction).
func (p plan) calm() bool { return p.queue == "retention" || p.queue == "eviction" }

// forceFault schedules the row's fault when the seed's draws did not, at a
// time the seed's bits choose; fired records it for expect sometimes.
func (p plan) forceFault(s *Scenario, seed uint64, fired map[string]bool) {
	if fired[p.fault] || (p.fault == "spool.corrupt" && fired["spool.corrupted"]) || (p.fault == "broker.crash" && fired["broker.start"]) {
		return
	}
	h := seedBits(seed ^ 0x6d6174726978) // "matrix"
	at := time.Duration(10+(h>>3)%70) * time.Second
	long := time.Duration(4+(h>>11)%8) * time.Second
	switch p.fault {
	case "pg.refuse", "pg.blackhole", "pg.readonly":
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: p.fault, Broker: -1, For: long})
	case "spool.corrupt":
		// The corruption comes with its outage (addHostileFaults puts it
		// a second into one of every broker's path).
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "pg.refuse", Broker: -1, For: long})
		fired["pg.refuse"] = true
		return
	case "pg.reset":
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: p.fault, Broker: -1})
	case "broker.crash":
		b := int((h >> 17) % uint64(s.Brokers))
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "broker.crash", Broker: b},
			sim.FaultAt{At: at + time.Duration(5+(h>>21)%20)*time.Second, Kind: "broker.start", Broker: b})
		fired["broker.start"] = true
	case "clock.skew":
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: p.fault, Broker: int((h >> 17) % uint64(s.Brokers)),
			By: time.Duration(int64((h>>25)%20001)-10000) * time.Millisecond})
	}
	fired[p.fault] = true
}
