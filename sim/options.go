package sim

import (
	"time"

	"github.com/queen-go/queen/queen/store"
)

// QueueSpec is one queue of a run: its partitions, lease and the consumer
// groups that read it (QueueMode for queue-mode consumers).
type QueueSpec struct {
	Name       string
	Partitions int
	LeaseSecs  int
	Groups     []string
	// CompletedRetentionSecs > 0 turns on "completed" retention: the
	// retention leader deletes messages every group consumed that long ago,
	// while groups read at their own speeds.
	CompletedRetentionSecs int
	// MaxWaitSecs > 0 turns on eviction: the retention leader deletes
	// messages that waited longer than this, consumed or not.
	MaxWaitSecs int
	// Queue options of issue 29: DelayedSecs > 0 is delayedProcessing (a
	// message is invisible until that long after it was created);
	// WindowSecs > 0 is windowBuffer (a partition is served only once its
	// newest message is that old); Priority orders namespace/task pops.
	DelayedSecs, WindowSecs, Priority int
	// Late are consumer groups that subscribe after pushes began, with
	// subscriptionMode new or subscriptionFrom, and may be sought (see
	// LateGroup). Lockstep only; not in Groups: the subscription rule
	// judges them from their start point.
	Late []LateGroup
}

// Weights are the relative odds of each workload operation.
type Weights struct {
	Push, Pop, Ack, Extend, Txn, Abandon int
	// ReusePct is the percentage of pushes that resend an earlier
	// transactionId (which must come back duplicate).
	ReusePct int
	// FailPct is the percentage of acked messages acked as failed.
	FailPct int
	// HotPct is the percentage of fresh pushes that go to partition p0
	// (also the run's first push, so p0 is the oldest partition): one busy
	// partition that must not starve the others.
	HotPct int
	// Foreign is the weight of acks and extends a consumer sends under
	// another tenant than its lease's: every one must be refused.
	Foreign int
	// Leave is the weight of pops whose client goes away while the broker
	// claims (lockstep: at its first read of database time; free-running:
	// a client timeout of 1-20 ms).
	Leave int
	// EarlyPct is the percentage of those pops whose client is gone
	// before the broker starts on them (lockstep: the request's context
	// is done when it is served; free-running: cancelled once written).
	EarlyPct int
	// LeaveAutoAckPct is the percentage of leaving pops of a consumer
	// group that ask for autoAck (lockstep only): nobody receives what
	// they claim, so the broker must leave it where it was.
	LeaveAutoAckPct int
	// PollPct is the percentage of pops that long-poll (free-running
	// only): a push on another broker wakes them through the mesh.
	PollPct int
	// BurstPct is the percentage of pushes sent as a burst (free-running
	// only): three to six fresh pushes at once, each its own request, to
	// the client's broker, as a producer with parallel requests sends
	// them. They meet in the broker's push combiner, whose answers the
	// answers rule ties to what is delivered.
	BurstPct int
	// Timer is the weight of timer operations (schedule 0-3 s ahead into
	// TimerQueue, sometimes cancel); KV the weight of KV puts (1-2 s ttl)
	// and reads.
	Timer, KV int
	// Stream is the weight of streaming operations: source pushes, batch
	// pops and cycles of a query counting the source per partition.
	Stream int
	// LateExtendPct is the percentage of held batches (lockstep only,
	// chosen by a hash of the lease mixed with the seed, not the
	// workload's stream) extended once more after their lease ended: a
	// second past its expiry while still held, and right after the ack
	// that let them go. Every such extend must be refused (late-extend).
	LateExtendPct int
	// DirectPct is the percentage of workload pops that go through their
	// broker's consume.Consumer directly rather than over HTTP (chosen
	// by a counter of the client's pops mixed with the seed, not the
	// workload's stream), recorded and judged as HTTP pops are.
	DirectPct int
}

// DefaultWeights is the workload mix when a scenario names none.
var DefaultWeights = Weights{Push: 45, Pop: 30, Ack: 18, Extend: 2, Txn: 3, Abandon: 2, ReusePct: 5, FailPct: 8, Foreign: 2, Leave: 2}

// FaultAt is one scheduled fault.
type FaultAt struct {
	At     time.Duration // from the start of the safety phase
	Kind   string        // one of FaultKinds
	Broker int           // -1: every broker
	For    time.Duration // how long a pg.* fault lasts
	By     time.Duration // clock.skew offset, pg.delay and mesh.delay delay, pg.hold longest hold
	Count  int           // spool.eio, spool.enospc, spool.torn: how many writes fail; spool.corrupt: records pushed into the file it damages
}

// Options describe one simulator run. Everything random derives from Seed.
type Options struct {
	Name     string
	Seed     uint64
	Mode     string // lockstep (default) or free
	Brokers  int
	Tenants  []string
	Queues   []QueueSpec
	Clients  int
	Ops      int
	VTime    time.Duration // safety phase length (virtual in lockstep, wall in free mode)
	Converge time.Duration // liveness bound after heal
	Weights  Weights
	Faults   []FaultAt
	// Move, in a shard world (RunSharded), moves a queue from s0 to s1
	// during the run.
	Move *MoveSpec
	// Expect names the properties to check (default: all).
	Expect []string
	// Sometimes names events that must have happened in the run ("pg.refuse",
	// "broker.crash", "lease.recovered", ...); a run where one did not is
	// a failed run.
	Sometimes []string
}

func (o *Options) defaults() {
	if o.Mode == "" {
		o.Mode = "lockstep"
	}
	if o.Brokers == 0 {
		o.Brokers = 1
	}
	if len(o.Tenants) == 0 {
		o.Tenants = []string{store.DefaultTenant}
	}
	if len(o.Queues) == 0 {
		o.Queues = []QueueSpec{{Name: "orders", Partitions: 4, LeaseSecs: 10, Groups: []string{QueueMode}}}
	}
	for i := range o.Queues {
		if o.Queues[i].Partitions == 0 {
			o.Queues[i].Partitions = 1
		}
		if o.Queues[i].LeaseSecs == 0 {
			o.Queues[i].LeaseSecs = 10
		}
		if len(o.Queues[i].Groups) == 0 {
			o.Queues[i].Groups = []string{QueueMode}
		}
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Ops == 0 {
		o.Ops = 200
	}
	if o.VTime == 0 {
		o.VTime = 120 * time.Second
	}
	if o.Converge == 0 {
		o.Converge = 60 * time.Second
	}
	if o.Weights == (Weights{}) {
		o.Weights = DefaultWeights
	}
	if len(o.Expect) == 0 {
		for _, c := range Checkers {
			if c.Lockstep && o.Mode == "free" {
				continue
			}
			o.Expect = append(o.Expect, c.Name)
		}
	}
}

// Spec derives the checkers' view of the run.
func (o Options) Spec() Spec {
	s := Spec{Groups: map[string][]string{}, Partitions: map[string]int{}, RecoverySlackMS: 2000,
		RetentionMS: map[string]int64{}, MaxWaitMS: map[string]int64{}}
	for _, q := range o.Queues {
		s.Groups[q.Name] = q.Groups
		s.Partitions[q.Name] = q.Partitions
		if q.CompletedRetentionSecs > 0 {
			s.RetentionMS[q.Name] = int64(q.CompletedRetentionSecs) * 1000
		}
		if q.MaxWaitSecs > 0 {
			s.MaxWaitMS[q.Name] = int64(q.MaxWaitSecs) * 1000
		}
		s.addQueueOptions(q)
	}
	for _, f := range o.Faults {
		if f.Kind == "clock.skew" {
			s.SkewMS = max(s.SkewMS, f.By.Abs().Milliseconds())
		}
	}
	return s
}
