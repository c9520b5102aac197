package scenarios

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/queen-go/queen/sim"
)

// Generate derives a whole scenario from a seed: cluster size, tenants,
// queues, workload mix and fault schedule. The same seed always gives the
// same scenario, and Print freezes it into a file.
//
// The steps below draw from one stream in a fixed order: every draw a seed
// made stays where it was, so each seed keeps its scenario.
func Generate(seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5ce7a410))
	s := &Scenario{Generated: true}
	s.Name = fmt.Sprintf("seed-%#x", seed)
	s.Seed = seed
	s.Mode = "lockstep"
	p := planOf(seed)
	drawCluster(s, rng, p)
	drawWorkload(s, rng, p)
	retention := drawRetention(s, rng, p)
	fired := map[string]bool{}
	drawFaults(s, rng, p, retention, fired)
	p.forceFault(s, seed, fired)
	drawTimersAndReadOnly(s, rng, seed, p, retention, fired)
	drawEvictionAndStream(s, rng, p, fired)
	addEncryption(s, seed, 10*time.Second, 60, p)
	// A quarter of the leaving pops' clients are gone before the broker
	// starts on them: it must claim nothing for them.
	s.Weights.EarlyPct = 25
	addHostileFaults(s, seed, fired, p)
	addRetentionProbe(s, seed)
	addLeaderCuts(s, seed)
	addSealedPaths(s, seed)
	addLateExtendsAndSecondSpool(s, seed)
	addQueueOptions(s, seed, p)
	addLateGroups(s, seed, p)
	// A share of the workload's pops go through the broker's consumer
	// directly, not HTTP, and are judged alike. Drawn after every other
	// draw, so all else a seed generates stays as it was; plain rows always
	// have some (the matrix's consume=direct x queue=plain).
	s.Weights.DirectPct = []int{0, 20, 40}[rng.IntN(3)]
	if p.queue == "plain" {
		s.Weights.DirectPct = max(s.Weights.DirectPct, 20)
	}
	expectFired(s, fired)
	return s
}

// drawCluster draws a lockstep scenario's brokers, tenants and queues.
func drawCluster(s *Scenario, rng *rand.Rand, p plan) {
	s.Brokers = 1 + rng.IntN(3)
	if p.fault == "broker.crash" {
		s.Brokers = max(s.Brokers, 2)
	}
	addTenants(s, rng)
	s.Queues = []sim.QueueSpec{{Name: "orders", Partitions: 1 + rng.IntN(4), LeaseSecs: 5 + rng.IntN(16), Groups: []string{sim.QueueMode}}}
	// Queue mode and a group read the first queue in every row, so its
	// option meets both (the draw was a coin toss once; it keeps the stream).
	_ = rng.IntN(2)
	s.Queues[0].Groups = append(s.Queues[0].Groups, "audit")
	if rng.IntN(2) == 0 {
		s.Queues = append(s.Queues, sim.QueueSpec{Name: "billing.invoices", Partitions: 1 + rng.IntN(2), LeaseSecs: 5 + rng.IntN(26), Groups: []string{"mailer"}})
	}
}

// drawWorkload draws a lockstep scenario's clients, operations and
// workload weights.
func drawWorkload(s *Scenario, rng *rand.Rand, p plan) {
	s.Clients = 2 + rng.IntN(5)
	s.Ops = 150 + rng.IntN(151)
	s.VTime = 120 * time.Second
	s.Converge = 60 * time.Second
	s.Weights = sim.DefaultWeights
	s.Weights.ReusePct = rng.IntN(11)
	s.Weights.FailPct = rng.IntN(15)
	if p.queue == "dlq" {
		// Failed acks often enough that messages reach their retry
		// limit and are dead-lettered.
		s.Weights.FailPct = max(s.Weights.FailPct, 12)
	}
	if rng.IntN(3) == 0 {
		// One busy partition: the others must still be served.
		s.Queues[0].Partitions = max(s.Queues[0].Partitions, 2)
		s.Weights.HotPct = 60 + rng.IntN(31)
	}
}

// drawRetention decides whether the first queue has completed retention,
// and sets it if so.
func drawRetention(s *Scenario, rng *rand.Rand, p plan) bool {
	retention := rng.IntN(3) == 0
	// Retention keeps outages away: a row that must meet one has none.
	retention = retention && (p.calm() || p.fault == "broker.crash" || p.fault == "clock.skew") || p.queue == "retention"
	if retention {
		// Completed retention while two groups read at their own speeds,
		// and no outages. A resent transactionId whose message every group
		// completed may be stored again once retention deleted it (dedup
		// reaches as far as the rows do); the checkers tell its two lives
		// apart (sim.Generations).
		s.Queues[0].CompletedRetentionSecs = 2 + rng.IntN(9)
		if len(s.Queues[0].Groups) < 2 {
			s.Queues[0].Groups = append(s.Queues[0].Groups, "audit")
		}
	}
	return retention
}

// drawFaults draws up to four faults of the stream's schedule, marking
// each kind it adds in fired. A run with retention, or a calm row, keeps
// only crashes and skewed clocks (the others' draws are still made).
func drawFaults(s *Scenario, rng *rand.Rand, p plan, retention bool, fired map[string]bool) {
	for n := rng.IntN(5); n > 0; n-- {
		at := time.Duration(5+rng.IntN(90)) * time.Second
		k := rng.IntN(7)
		if (retention || p.calm()) && k != 3 && k != 4 {
			continue
		}
		if drawFault(s, rng, k, at, fired) {
			fired[s.Faults[len(s.Faults)-1].Kind] = true
		}
	}
}

// drawFault adds the fault of kind number k at at, if k names one for this
// cluster, and says whether it did.
func drawFault(s *Scenario, rng *rand.Rand, k int, at time.Duration, fired map[string]bool) bool {
	switch {
	case k == 0:
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "pg.refuse", Broker: -1, For: time.Duration(3+rng.IntN(12)) * time.Second})
	case k == 1:
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "pg.blackhole", Broker: -1, For: time.Duration(3+rng.IntN(12)) * time.Second})
	case k == 2:
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "pg.reset", Broker: -1})
	case k == 3 && s.Brokers > 1:
		b := rng.IntN(s.Brokers)
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "broker.crash", Broker: b},
			sim.FaultAt{At: at + time.Duration(5+rng.IntN(20))*time.Second, Kind: "broker.start", Broker: b})
	case k == 5:
		// An outage under load fills the spools; their disks fail
		// some writes meanwhile.
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "pg.refuse", Broker: -1, For: time.Duration(8+rng.IntN(8)) * time.Second},
			sim.FaultAt{At: at, Kind: []string{"spool.eio", "spool.enospc", "spool.torn"}[rng.IntN(3)], Broker: -1, Count: 1 + rng.IntN(3)})
		fired["pg.refuse"] = true
		if rng.IntN(2) == 0 {
			// A record PostgreSQL refuses, spooled beside the
			// clients' buffered pushes of the same outage.
			s.Faults = append(s.Faults, sim.FaultAt{At: at + 2*time.Second, Kind: "spool.poison", Broker: -1})
			fired["spool.quarantined"] = true
		}
	case k == 4:
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "clock.skew", Broker: rng.IntN(s.Brokers), By: time.Duration(rng.IntN(20001)-10000) * time.Millisecond})
	default:
		return false
	}
	return true
}

// drawTimersAndReadOnly sets the timer and KV weights of a timer row and,
// chosen by the seed's bits, a failover's read-only window.
func drawTimersAndReadOnly(s *Scenario, rng *rand.Rand, seed uint64, p plan, retention bool, fired map[string]bool) {
	_ = rng.IntN(2) // timers were a coin toss; the row decides now (the draw keeps the stream)
	if p.timers {
		// Timers fired by whichever broker's sweeper gets them, and KV
		// rows expiring while they are read.
		s.Weights.Timer, s.Weights.KV = 5+rng.IntN(4), 4+rng.IntN(4)
	}
	if h := seedBits(seed); !retention && !p.calm() && (h>>27)%4 == 0 {
		// A failover's read-only window: every broker's address points
		// at a server refusing writes for a while (seed bits, not the
		// stream, choose it).
		s.Faults = append(s.Faults, sim.FaultAt{At: time.Duration(10+(h>>29)%60) * time.Second, Kind: "pg.readonly", Broker: -1,
			For: time.Duration(3+(h>>35)%10) * time.Second})
		fired["pg.readonly"] = true
	}
}

// drawEvictionAndStream gives the first queue a maxWait in some runs
// without outages, and the workload a streaming query in some runs
// without timers.
func drawEvictionAndStream(s *Scenario, rng *rand.Rand, p plan, fired map[string]bool) {
	if calm := !fired["pg.refuse"] && !fired["pg.blackhole"] && !fired["pg.reset"] && !fired["pg.readonly"]; calm && (rng.IntN(3) == 0 || p.queue == "eviction") {
		// Eviction while groups read at their own speeds: a message may
		// go unconsumed once it waited maxWait, never sooner. No outages:
		// a spool replay stores a message later than it was answered.
		s.Queues[0].MaxWaitSecs = 8 + rng.IntN(23)
		if len(s.Queues[0].Groups) < 2 {
			s.Queues[0].Groups = append(s.Queues[0].Groups, "audit")
		}
	}
	if (rng.IntN(2) == 0 || !p.timers) && s.Weights.Timer == 0 {
		// A streaming query counting a source per partition, its cycles
		// racing leases, crashes and outages (in runs without timers and
		// KV, whose rarer reads it would crowd out).
		s.Weights.Stream = 15 + rng.IntN(16)
	}
}

// expectFired lists the fault kinds that fired as the ones the run must
// meet, and every checker as a property.
func expectFired(s *Scenario, fired map[string]bool) {
	delete(fired, "broker.start")
	for _, k := range []string{"pg.refuse", "pg.blackhole", "pg.reset", "broker.crash", "clock.skew", "spool.eio", "spool.enospc", "spool.torn",
		"spool.poison", "spool.quarantined", "pg.readonly", "spool.corrupted"} {
		if fired[k] || (k == "broker.crash" && fired["broker.start"]) {
			s.Sometimes = append(s.Sometimes, k)
		}
	}
	for _, c := range sim.Checkers {
		s.Expect = append(s.Expect, c.Name)
	}
}

// GenerateFree derives a free-running scenario from a seed: two or three
// brokers joined by the mesh, twelve to sixteen concurrent clients over
// loopback HTTP (some of their pops long polls), one hot partition with
// eager consumers (pop one, ack at once, short leases), and a delayed
// database path on one broker, so commits race out of creation order; and
// sometimes a reset, a rolling restart, a lossy or slow mesh, a skewed
// clock, a killed broker. The interleaving is the machine's, so a replay of the seed runs
// the same workload but not the same history; a failing run's scenario is
// written out for replay.
func GenerateFree(seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, 0xf4ee))
	s := &Scenario{}
	s.Name = fmt.Sprintf("free-seed-%#x", seed)
	s.Seed = seed
	s.Mode = "free"
	// The steps draw from one stream in a fixed order, so each seed keeps
	// its scenario.
	drawFreeCluster(s, rng)
	at := drawDelayAndReset(s, rng)
	rolling := drawRollingRestart(s, rng, at)
	drawMesh(s, rng)
	drawSkewAndCrash(s, rng, at, rolling)
	drawFreeTimersAndHolds(s, rng)
	addEncryption(s, seed, 200*time.Millisecond, 1, plan{})
	addFreeReadOnlyAndStall(s, seed, at)
	// A streaming query's cycles, their commits held like the rest.
	s.Weights.Stream = 8 + rng.IntN(8)
	addWakeProbeAndRecreate(s, seed, at)
	// Lease recovery and fairness bound waits in wall time, which a loaded
	// machine stretches; free-running runs judge what holds whatever the
	// timing.
	addHostileFreeFaults(s, seed, at)
	addLeaderCuts(s, seed)
	// A share of the pops, long polls among them, go through the brokers'
	// consumers directly, racing the HTTP ones on one waker (drawn after
	// every other draw, so all else a seed generates stays as it was).
	s.Weights.DirectPct = []int{0, 20, 40}[rng.IntN(3)]
	s.Expect = []string{"leader-passes", "no-loss", "no-double-delivery", "fifo", "dedup", "tenant", "answers", "redelivery", "timers", "kv", "stream", "edges", "sealed", "quarantine", "timer-claims", "lost-wake", "recreate",
		"spool-corrupt", "row-lock"}
	return s
}

// drawFreeCluster draws a free-running scenario's brokers, tenants, hot
// queue, clients and workload weights.
func drawFreeCluster(s *Scenario, rng *rand.Rand) {
	s.Brokers = 2 + rng.IntN(2)
	addTenants(s, rng)
	s.Queues = []sim.QueueSpec{{Name: "hot", Partitions: 2 + rng.IntN(3), LeaseSecs: 2 + rng.IntN(3),
		Groups: []string{sim.QueueMode, "audit"}}}
	s.Clients = 12 + rng.IntN(5)
	s.Ops = s.Clients * (50 + rng.IntN(30))
	s.Converge = 30 * time.Second
	s.Weights = sim.Weights{Push: 50, Pop: 30, Ack: 15, Txn: 2, ReusePct: 5, FailPct: 5, HotPct: 60 + rng.IntN(31), Foreign: 1}
}

// drawDelayAndReset delays one broker's database path and, in half the
// seeds, resets every broker's connections; it returns when the faults
// start.
func drawDelayAndReset(s *Scenario, rng *rand.Rand) time.Duration {
	delayed := rng.IntN(s.Brokers)
	// The clients' work takes a second or two of wall time: faults come early.
	at := time.Duration(100+rng.IntN(300)) * time.Millisecond
	s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "pg.delay", Broker: delayed,
		For: time.Duration(1+rng.IntN(3)) * time.Second, By: time.Duration(1+rng.IntN(5)) * time.Millisecond})
	s.Sometimes = []string{"pg.delay"}
	if rng.IntN(2) == 0 {
		s.Faults = append(s.Faults, sim.FaultAt{At: at + time.Duration(rng.IntN(400))*time.Millisecond, Kind: "pg.reset", Broker: -1})
		s.Sometimes = append(s.Sometimes, "pg.reset")
	}
	return at
}

// drawRollingRestart schedules a rolling restart in half the seeds, and
// says whether it did.
func drawRollingRestart(s *Scenario, rng *rand.Rand, at time.Duration) bool {
	rolling := rng.IntN(2) == 0
	if rolling {
		// A rolling restart: each broker in turn stops gracefully with
		// requests in flight and comes back.
		t := at + time.Duration(rng.IntN(300))*time.Millisecond
		for b := 0; b < s.Brokers; b++ {
			s.Faults = append(s.Faults, sim.FaultAt{At: t, Kind: "broker.stop", Broker: b},
				sim.FaultAt{At: t + 200*time.Millisecond, Kind: "broker.start", Broker: b})
			t += 300 * time.Millisecond
		}
		s.Sometimes = append(s.Sometimes, "broker.stop")
	}
	return rolling
}

// drawMesh sets the share of long polls and, in two thirds of the seeds,
// a lossy or a slow and reordering mesh.
func drawMesh(s *Scenario, rng *rand.Rand) {
	// Long polls, woken across brokers by the mesh; the mesh loses,
	// delays or reorders frames in some runs (only latency may grow).
	s.Weights.PollPct = 20 + rng.IntN(30)
	switch rng.IntN(3) {
	case 0:
		s.Faults = append(s.Faults, sim.FaultAt{At: 0, Kind: "mesh.drop", Broker: -1, For: time.Minute})
		s.Sometimes = append(s.Sometimes, "mesh.dropped")
	case 1:
		s.Faults = append(s.Faults, sim.FaultAt{At: 0, Kind: "mesh.delay", Broker: rng.IntN(s.Brokers),
			For: time.Minute, By: time.Duration(20+rng.IntN(180)) * time.Millisecond},
			sim.FaultAt{At: 0, Kind: "mesh.reorder", Broker: -1, For: time.Minute})
		s.Sometimes = append(s.Sometimes, "mesh.delayed", "mesh.reordered")
	}
}

// drawSkewAndCrash skews a broker's clock in half the seeds and kills a
// broker in a third of those without a rolling restart.
func drawSkewAndCrash(s *Scenario, rng *rand.Rand, at time.Duration, rolling bool) {
	if rng.IntN(2) == 0 {
		// A broker's clock is off: it paces its loops and mints ids by
		// it, and must decide nothing by it.
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "clock.skew", Broker: rng.IntN(s.Brokers),
			By: time.Duration(rng.IntN(20001)-10000) * time.Millisecond})
		s.Sometimes = append(s.Sometimes, "clock.skew")
	}
	if rng.IntN(3) == 0 && !rolling {
		// A broker is killed with long polls parked and leases held by
		// its consumers, and comes back (not during a rolling restart,
		// which may have it stopped already).
		b, t := rng.IntN(s.Brokers), at+time.Duration(rng.IntN(600))*time.Millisecond
		s.Faults = append(s.Faults, sim.FaultAt{At: t, Kind: "broker.crash", Broker: b},
			sim.FaultAt{At: t + time.Duration(300+rng.IntN(500))*time.Millisecond, Kind: "broker.start", Broker: b})
		s.Sometimes = append(s.Sometimes, "broker.crash")
	}
}

// drawFreeTimersAndHolds sets the timer, KV and leaving weights, and
// holds COMMITs on every broker's database path.
func drawFreeTimersAndHolds(s *Scenario, rng *rand.Rand) {
	// Timers and KV rows, scheduled and put on one broker and fired or
	// read on another, through whatever faults the run has.
	s.Weights.Timer, s.Weights.KV = 2+rng.IntN(4), 2+rng.IntN(3)
	// Pops whose client gives up mid-request, wherever the broker is:
	// whatever it claimed for them must come back, and nothing else move.
	s.Weights.Leave = 1 + rng.IntN(3)
	s.Weights.EarlyPct = 25
	// Half the COMMITs on every broker's database path, drawn at random,
	// are held 30-80 ms: transactions commit in another order than they
	// wrote in, so an order fixed before COMMIT shows (the stranded
	// canary).
	s.Faults = append(s.Faults, sim.FaultAt{At: 0, Kind: "pg.hold", Broker: -1, For: time.Minute,
		By: time.Duration(30+rng.IntN(51)) * time.Millisecond})
	s.Sometimes = append(s.Sometimes, "pg.hold")
}

// addFreeReadOnlyAndStall adds, chosen by the seed's bits, not its stream,
// a read-only window with the retention leader's lock session cut, the
// share of burst pushes and a slow sweeper.
func addFreeReadOnlyAndStall(s *Scenario, seed uint64, at time.Duration) {
	if h := seedBits(seed); (h>>27)%3 == 0 {
		// A failover's read-only window on one broker's address, and
		// the retention leader's lock session ended over and over.
		s.Faults = append(s.Faults, sim.FaultAt{At: at + time.Duration((h>>29)%400)*time.Millisecond, Kind: "pg.readonly",
			Broker: int((h >> 33) % uint64(s.Brokers)), For: time.Duration(1+(h>>35)%2) * time.Second},
			sim.FaultAt{At: at, Kind: "leader.kill", Broker: -1, For: 2 * time.Second})
		s.Sometimes = append(s.Sometimes, "pg.readonly")
	}
	// Some pushes come in bursts of parallel requests, which meet in a
	// broker's push combiner (seed bits, not the stream, choose how many).
	s.Weights.BurstPct = 15 + int((seedBits(seed)>>23)%11)
	if h := seedBits(seed); (h>>19)%2 == 0 {
		// A slow sweeper on one broker: a second between its claims and
		// their fires, under the lease, so no other sweeper may claim
		// those timers meanwhile. Seed bits, not the stream, choose it.
		s.Faults = append(s.Faults, sim.FaultAt{At: 100 * time.Millisecond, Kind: "sweeper.stall", Broker: int((h >> 21) % uint64(s.Brokers)),
			For: 3 * time.Second, By: time.Second})
		s.Sometimes = append(s.Sometimes, "sweeper.stall")
	}
}

// addWakeProbeAndRecreate adds the wake probes and the queue recreation,
// placed by the seed's bits, not its stream.
func addWakeProbeAndRecreate(s *Scenario, seed uint64, at time.Duration) {
	// Two wake probes, with every mesh frame dropped while they run: a
	// long poll parked on one broker, its message pushed through another,
	// must be answered within the periodic floor (seed bits choose when).
	s.Faults = append(s.Faults, sim.FaultAt{At: at + time.Duration((seedBits(seed)>>41)%800)*time.Millisecond, Kind: "wake.probe",
		Broker: int((seedBits(seed) >> 47) % uint64(s.Brokers)), Count: 2})
	s.Sometimes = append(s.Sometimes, "wake.probe")
	// A queue both brokers cached, deleted through one and created again
	// by pushes through both: only what came after the delete is
	// delivered, promptly.
	s.Faults = append(s.Faults, sim.FaultAt{At: at + time.Duration((seedBits(seed)>>51)%800)*time.Millisecond, Kind: "queue.recreate",
		Broker: int((seedBits(seed) >> 57) % uint64(s.Brokers)), Count: 1})
	s.Sometimes = append(s.Sometimes, "queue.recreate")
}

// addHostileFreeFaults adds the free-running fault classes of issue 28,
// chosen by the seed's bits, not its stream:
//   - pg.rowlock, in half the seeds: an outside session holds the hot
//     partition's row (or, in half of those, its queue-mode cursor row)
//     FOR UPDATE for 1.5-1.8 s; pushes and acks of every other partition
//     must not wait for it;
//   - cache.stale, in half the seeds: a queue deleted through one broker
//     whose mesh frames are all lost, then created again through another
//     that had cached it; that broker's transactions and group pops into
//     it must work at once.
func addHostileFreeFaults(s *Scenario, seed uint64, at time.Duration) {
	h := seedBits(seed) ^ seedBits(seed>>7)
	if h%2 == 0 {
		s.Faults = append(s.Faults, sim.FaultAt{At: at + time.Duration((h>>3)%300)*time.Millisecond, Kind: "pg.rowlock", Broker: -1,
			For: time.Duration(1500+(h>>11)%300) * time.Millisecond, Count: int((h >> 21) % 2)})
		s.Sometimes = append(s.Sometimes, "pg.rowlock")
	}
	if (h>>1)%2 == 0 {
		s.Faults = append(s.Faults, sim.FaultAt{At: at + time.Duration((h>>31)%800)*time.Millisecond, Kind: "cache.stale",
			Broker: int((h >> 41) % uint64(s.Brokers)), Count: 1})
		s.Sometimes = append(s.Sometimes, "cache.stale")
	}
}

// addHostileFaults adds the lockstep fault classes of issue 28, chosen by
// the seed's bits, not its stream, so every other choice of every seed
// stays as it was:
//   - spool.corrupt, in half the seeds with an outage of every broker's
//     database path: a second into it, pushes buffered into one spool file
//     and one of its records rotted on disk, with records after it;
//   - autoAck on half the leaving pops of consumer groups, in two thirds
//     of the seeds: the client goes while the claim runs, and the broker
//     must not consume what nobody will receive.
func addHostileFaults(s *Scenario, seed uint64, fired map[string]bool, p plan) {
	h := seedBits(seed)
	if (h>>43)%2 == 0 || p.fault == "spool.corrupt" {
		for _, f := range s.Faults {
			if (f.Kind == "pg.refuse" || f.Kind == "pg.blackhole") && f.Broker < 0 && f.For >= 3*time.Second {
				s.Faults = append(s.Faults, sim.FaultAt{At: f.At + time.Second, Kind: "spool.corrupt", Broker: -1, Count: 6})
				fired["spool.corrupted"] = true
				break
			}
		}
	}
	if (h>>45)%3 != 0 {
		s.Weights.LeaveAutoAckPct = 50
	}
}

// addRetentionProbe schedules the retention probe (retention.fail) in
// every seed (it costs about 0.2 s of a run's real time): after the drain,
// one retention rule (expired or completed, each before a rule with due
// work in the pass order) fails for 20 s while the others must go on
// deleting what is due. The seed's bits (mixed apart from the other
// choices') choose which rule fails, not its stream.
func addRetentionProbe(s *Scenario, seed uint64) {
	h := seedBits(seed ^ 0x726574656e74696f)
	s.Faults = append(s.Faults, sim.FaultAt{At: time.Duration(5+(h>>8)%60) * time.Second, Kind: "retention.fail", Broker: -1,
		For: 20 * time.Second, Count: int((h >> 1) % 2)})
	s.Sometimes = append(s.Sometimes, "retention.fail")
}

// addLeaderCuts cuts the lock sessions of one to three leader passes as
// they start, before any statement of theirs (leader.cut), in three
// quarters of the seeds: every such pass must fail, a pass on a dead lock
// session acting on another session is a deposed leader. Lockstep: from
// 5-60 s in, when every broker leads a retention pass each 5 s; free
// running: from the start, not required to happen. Chosen by the seed's
// own mix of bits, not its stream, so every other choice of every seed
// stays as it was.
func addLeaderCuts(s *Scenario, seed uint64) {
	h := seedBits(seed ^ 0x6c6561646572) // "leader"
	if h%4 == 0 {
		return
	}
	if s.Mode == "free" {
		// A free run lasts seconds: its brokers may lead no pass after
		// the workload starts, so the cut is not required to happen.
		s.Faults = append(s.Faults, sim.FaultAt{At: 0, Kind: "leader.cut", Broker: -1, Count: 1 + int((h>>8)%3)})
		return
	}
	at := time.Duration(5+(h>>2)%56) * time.Second
	s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "leader.cut", Broker: -1, Count: 1 + int((h>>8)%3)})
	s.Sometimes = append(s.Sometimes, "leader.cut")
}

// addLateExtendsAndSecondSpool adds issue 29's late extends and second
// spool, chosen by the seed's bits, not its stream:
//   - in every seed, 20-35% of held batches are extended once more after
//     their lease ended (a second past its expiry while still held, and
//     right after their ack): each must be refused (late-extend);
//   - in every seed, a second spool opens every running broker's spool
//     directory (spool.second), two seconds into an outage of every
//     broker's database path if the seed has one (the active spool file
//     then has pushes in it), else at 5-94 s: it must be refused
//     (spool-exclusive).
func addLateExtendsAndSecondSpool(s *Scenario, seed uint64) {
	h := seedBits(seed ^ 0x29e7)
	s.Weights.LateExtendPct = 20 + int(h%16)
	at := time.Duration(5+(h>>4)%90) * time.Second
	for _, f := range s.Faults {
		if (f.Kind == "pg.refuse" || f.Kind == "pg.blackhole") && f.Broker < 0 && f.For >= 3*time.Second {
			at = f.At + 2*time.Second
			break
		}
	}
	s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "spool.second", Broker: -1})
	s.Sometimes = append(s.Sometimes, "spool.second")
}

// addQueueOptions sets the queue options of issue 29 (lockstep), chosen by
// bits of the seed mixed apart from the other choices' bits, not by its
// stream, so every other choice of every seed stays as it was:
//   - delayedProcessing of 1-3 s on orders, in half the seeds: each message
//     is hidden that long after it is stored;
//   - windowBuffer of 1-2 s on billing.invoices wherever it exists (half
//     the seeds), and on orders in a quarter of the others: a partition is
//     served only once its newest message is that old;
//   - priorities on every queue, in half the seeds (they order only
//     namespace/task pops, which the workload does not send yet).
//
// They are short beside the run (a step is 0.4-0.8 s of virtual time) and
// the final drain waits them out, so every message is still delivered.
func addQueueOptions(s *Scenario, seed uint64, p plan) {
	if p.queue == "plain" {
		return
	}
	h := seedBits(seed ^ 0x9a7e5c0ffee)
	if h%2 == 0 || p.queue == "delayed" {
		s.Queues[0].DelayedSecs = 1 + int((h>>1)%3)
	}
	window := 1 + int((h>>3)%2)
	for i := range s.Queues {
		if s.Queues[i].Name == "billing.invoices" || (len(s.Queues) == 1 && (h>>5)%4 == 0) || (i == 0 && p.queue == "window") {
			s.Queues[i].WindowSecs = window
		}
		if (h>>7)%2 == 0 || p.queue == "priority" {
			s.Queues[i].Priority = 1 + int((h>>(9+4*i))%9)
		}
	}
}

// addEncryption turns the first queue's encryption on mid-run through one
// broker in a third of the seeds, and rotates the sealing key (every broker
// restarted in turn) in a quarter, after from plus up to spread seconds.
// Chosen by the seed's bits, not its stream, so every other choice of every
// seed stays as it was.
func addEncryption(s *Scenario, seed uint64, from time.Duration, spread uint64, p plan) {
	h := seedBits(seed)
	if (h%3 == 0 || p.queue == "encrypted") && p.queue != "plain" {
		at := from + time.Duration((h>>5)%spread)*time.Second
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "queue.encrypt", Broker: int((h >> 11) % uint64(s.Brokers))})
	}
	if (h>>13)%4 == 0 {
		at := from + time.Duration((h>>17)%spread)*time.Second + 500*time.Millisecond
		s.Faults = append(s.Faults, sim.FaultAt{At: at, Kind: "key.rotate", Broker: -1})
	}
}

// addSealedPaths writes into an encrypted queue through every write path
// (push, transaction, timer fire, DLQ retry; sealed.paths), in every
// lockstep seed, 1-4 s in (before the generated outages), through a
// broker the seed's bits choose; the final drain pops it all and the
// payloads rule holds every delivery to the payload written.
func addSealedPaths(s *Scenario, seed uint64) {
	h := seedBits(seed)
	s.Faults = append(s.Faults, sim.FaultAt{At: time.Second + time.Duration((h>>53)%3000)*time.Millisecond, Kind: "sealed.paths",
		Broker: int((h >> 50) % uint64(s.Brokers))})
	s.Sometimes = append(s.Sometimes, "sealed.paths")
}

// seedBits mixes a seed into bits that differ between neighbouring seeds
// (the canary hunts walk base, base+1, ...), for choices that must not
// draw from the seed's stream.
func seedBits(seed uint64) uint64 {
	x := seed * 0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>29
}

// addTenants gives s one or two tenants, t1 and maybe t2. The loop
// condition draws anew each time: changing that would change every
// generated scenario of every seed already printed.
func addTenants(s *Scenario, rng *rand.Rand) {
	for i := 0; i <= rng.IntN(2); i++ {
		s.TenantNames = append(s.TenantNames, fmt.Sprintf("t%d", i+1))
		s.Tenants = append(s.Tenants, TenantID(fmt.Sprintf("t%d", i+1)))
	}
}
