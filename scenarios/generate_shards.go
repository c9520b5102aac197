package scenarios

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/queen-go/queen/sim"
)

// GenerateShardMove derives a shard world's scenario from a seed: two or
// three brokers, one tenant, the queue "orders" (and maybe a second that
// stays on s0) under pushes, pops with leases, acks, extends,
// transactions and abandons, and a move of "orders" from s0 to s1 planned
// a third of the way in, its steps interleaved with the operations by the
// seed. The brokers' placement caches going stale is one fault (the mover
// is the runner's; every broker learns by the fence); the mover killed
// between a step's effect and its state write is another: three seeds
// in four kill it, with odds of 15 to 60 percent at each point; and one
// seed in two takes s0 down for the brokers while the move runs.
func GenerateShardMove(seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x54a7d5))
	s := &Scenario{Generated: true}
	s.Name = fmt.Sprintf("shards-%#x", seed)
	s.Seed = seed
	s.Mode = "lockstep"
	s.Brokers = 2 + rng.IntN(2)
	s.TenantNames = []string{"t1"}
	s.Tenants = []string{TenantID("t1")}
	s.Queues = []sim.QueueSpec{{Name: "orders", Partitions: 1 + rng.IntN(4), LeaseSecs: 5 + rng.IntN(16),
		Groups: []string{sim.QueueMode, "audit"}}}
	if rng.IntN(2) == 0 {
		s.Queues = append(s.Queues, sim.QueueSpec{Name: "billing.invoices", Partitions: 1 + rng.IntN(2), LeaseSecs: 5 + rng.IntN(26), Groups: []string{"mailer"}})
	}
	s.Clients = 2 + rng.IntN(4)
	s.Ops = 120 + rng.IntN(81)
	s.VTime = 90 * time.Second
	s.Converge = 60 * time.Second
	s.Weights = sim.DefaultWeights
	s.Weights.ReusePct = rng.IntN(11)
	s.Weights.FailPct = rng.IntN(15)
	s.Move = &sim.MoveSpec{Queue: "orders", At: s.Ops/4 + rng.IntN(s.Ops/4), StepPct: 8 + rng.IntN(23)}
	if rng.IntN(4) != 0 {
		s.Move.CrashPct = 15 + rng.IntN(46)
	}
	if rng.IntN(2) == 0 {
		// s0, the source, down for the brokers while the move runs
		// (their path to it is their proxy; the mover's and the
		// catalogue's are not).
		at := time.Duration(s.Move.At+rng.IntN(s.Ops/3)) * (s.VTime / time.Duration(s.Ops))
		s.Faults = append(s.Faults, shardDown(rng, at))
	}
	s.Sometimes = []string{"move.done"}
	return s
}

// shardDown is an outage of the brokers' first shard at at: refused,
// swallowed or read-only for 3 to 12 seconds, or every connection reset
// once.
func shardDown(rng *rand.Rand, at time.Duration) sim.FaultAt {
	f := sim.FaultAt{At: at, Kind: []string{"pg.refuse", "pg.blackhole", "pg.reset", "pg.readonly"}[rng.IntN(4)], Broker: -1}
	if f.Kind != "pg.reset" {
		f.For = time.Duration(3+rng.IntN(10)) * time.Second
	}
	return f
}
