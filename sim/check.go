package sim

import (
	"fmt"
	"sort"
	"strings"
)

// Violation is one broken property, with enough detail to find it in the
// history.
type Violation struct {
	Property string
	Detail   string
}

func (v Violation) String() string { return v.Property + ": " + v.Detail }

// Spec is what the checkers need to know about a run beyond its history.
type Spec struct {
	// Groups lists, per queue, the consumer groups that consume it
	// (QueueMode for plain queue-mode consumers). No-loss is checked per
	// group.
	Groups map[string][]string
	// Partitions is each queue's partition count (the fairness bound).
	Partitions map[string]int
	// RecoverySlackMS is how long after a lease ends an abandoned message
	// may stay hidden before a pop that finds nothing is a violation.
	RecoverySlackMS int64
	// RetentionMS is each queue's completed retention (absent: none): a
	// message every group completed may be deleted that long after it was
	// created, and its transactionId then stored again (see Generations).
	RetentionMS map[string]int64
	// MaxWaitMS is each queue's eviction age (absent: none): a message may
	// be deleted unconsumed once it waited that long.
	MaxWaitMS map[string]int64
	// SkewMS is the largest clock skew the run injects: time bounds
	// between brokers' clocks are loosened by it.
	SkewMS int64
	// DelayMS and WindowMS are each queue's delayedProcessing and
	// windowBuffer (absent: none): what they hide, the checkers do not
	// expect a pop to find (check_qopts.go).
	DelayMS, WindowMS map[string]int64
}

// QueueMode is the consumer group of queue-mode pops.
const QueueMode = "__QUEUE_MODE__"

// Checker judges one property.
type Checker struct {
	Name  string
	Check func(h []Event, s Spec) []Violation
	// Lockstep marks a property judged on virtual time only: free-running
	// runs leave it out of their default expectations.
	Lockstep bool
}

// Checkers are every property the simulator checks, by name. Scenario files
// name them in "expect properties".
var Checkers = []Checker{
	{Name: "no-loss", Check: CheckNoLoss},
	{Name: "no-double-delivery", Check: CheckNoDoubleDelivery},
	{Name: "fifo", Check: CheckFIFO},
	{Name: "dedup", Check: CheckDedup},
	{Name: "tenant", Check: CheckTenant},
	{Name: "lease-recovery", Check: CheckLeaseRecovery},
	{Name: "fairness", Check: CheckFairness},
	{Name: "answers", Check: CheckAnswers},
	{Name: "redelivery", Check: CheckRedelivery},
	{Name: "liveness", Check: CheckLiveness, Lockstep: true},
	{Name: "timers", Check: CheckTimers},
	{Name: "kv", Check: CheckKV},
	{Name: "stream", Check: CheckStream},
	{Name: "edges", Check: CheckEdges},
	{Name: "sealed", Check: CheckSealed},
	{Name: "quarantine", Check: CheckQuarantine},
	{Name: "timer-claims", Check: CheckClaims},
	{Name: "lost-wake", Check: CheckWakes},
	{Name: "recreate", Check: CheckRecreates},
	{Name: "abandoned-claims", Check: CheckAbandonedClaims},
	{Name: "spool-corrupt", Check: CheckSpoolCorrupt},
	{Name: "row-lock", Check: CheckRowLocks},
	{Name: "retention-progress", Check: CheckRetention, Lockstep: true},
	{Name: "leader-passes", Check: CheckLeaderPasses},
	{Name: "payloads", Check: CheckPayloads},
	{Name: "late-extend", Check: CheckLateExtends, Lockstep: true},
	{Name: "spool-exclusive", Check: CheckSpoolExclusive},
	{Name: "queue-options", Check: CheckQueueOptions},
	{Name: "subscription", Check: CheckSubscription},
	{Name: "shard-overlap", Check: CheckShardOverlap},
}

// Judge runs the checker on h with re-inserted transactionIds told apart
// (Generations), as every run is judged.
func (c Checker) Judge(h []Event, s Spec) []Violation { return c.Check(Generations(h, s), s) }

// CheckerNamed returns the checker called name.
func CheckerNamed(name string) (Checker, bool) {
	for _, c := range Checkers {
		if c.Name == name {
			return c, true
		}
	}
	return Checker{}, false
}

// call is an invoke and its completion (nil while pending).
type call struct {
	in   Event
	done *Event
}

// calls pairs invokes with completions, in invoke order.
func calls(h []Event) []*call {
	byID := map[int]*call{}
	var out []*call
	for i := range h {
		e := h[i]
		switch e.Kind {
		case KInvoke:
			c := &call{in: e}
			byID[e.Call] = c
			out = append(out, c)
		case KOK, KFail, KInfo:
			if c := byID[e.Call]; c != nil {
				c.done = &h[i]
			}
		}
	}
	return out
}

func (c *call) ok() bool { return c.done != nil && c.done.Kind == KOK }

// normStatus maps ack statuses the way the broker does.
func normStatus(s string) string {
	switch strings.ToLower(s) {
	case "", "completed", "success", "acked", "ok":
		return "completed"
	case "retry", "dlq":
		return strings.ToLower(s)
	}
	return "failed"
}

// delivery is one message handed to a consumer.
type delivery struct {
	key          Key
	group        string
	lease        string
	leaseSecs    int
	invokeI, okI int
	invokeVT     int64
	okVT         int64
	pos          int // position within the pop's messages
	client       int
	autoAck      bool
}

// completion is an ack (or autoAck pop, or committed transaction ack) that
// finished a message for a group.
type completion struct {
	key     Key
	group   string
	okI     int
	invokeI int
	lease   string
	dlq     bool
	// uncertain: an autoAck delivery answered inside a fault window, whose
	// completion after the answer may have failed (completionExcused):
	// it counts for every rule but no-double-delivery, which lets the
	// message be delivered and completed again.
	uncertain bool
}

// timeline is what the checkers derive from a history.
type timeline struct {
	foreign     []*call // acks and extends sent under another tenant
	attempted   map[Key]bool
	pushVT      map[Key]int64 // earliest invoke time of a push of the key
	acked       map[Key]bool  // push answered queued/duplicate/buffered (or committed in a txn)
	queuedOK    map[Key]int   // push items answered "queued"
	pushTenants map[[3]string]map[string]bool
	pushes      []pushRec
	deliveries  []delivery
	completions []completion
	releases    map[string][]int  // lease -> invoke indexes of acks that released it, or may have (answer lost)
	released    map[string]int    // lease -> answer index of the first ack known to have released it
	extends     map[string][]ext  // lease -> renewals
	leaseGroup  map[string]string // lease -> group
	rows        []Row
	final       bool
	hide        *hiding  // set by the checkers that allow for queue options (check_qopts.go)
	late        *lateSet // late subscriptions (check_subscription.go)
}

type pushRec struct {
	key          Key
	invokeI, okI int
	status       string
}

type ext struct {
	invokeVT int64
	secs     int
	invokeI  int
}

// completionExcused reports, for an autoAck pop answered between from and
// to (virtual ms), whether a fault may have failed the completion the broker
// runs right after writing the answer (consume.Complete): a database fault
// on any broker, a read-only server among them (the completion is a write),
// or a broker stopping or crashing, from the fault's start to answerGrace
// after its end. Such a completion is indeterminate: the lease then ends and
// the messages are delivered again (at least once, as SPEC's autoAck
// says), so no-double-delivery does not hold the delivery as a completion
// (completion.uncertain). Faults that only slow or reorder excuse nothing.
func completionExcused(h []Event) func(from, to int64) bool {
	type window struct{ from, to int64 }
	var windows []window
	for _, e := range h {
		switch {
		case e.Kind == KFault && e.Fault != "pg.readonly" && benign(e.Fault):
		case e.Kind == KFault && strings.HasPrefix(e.Fault, "spool."):
		case e.Kind == KFault:
			windows = append(windows, window{e.VT, max(e.Until, e.VT) + answerGrace})
		case e.Kind == KBroker:
			windows = append(windows, window{e.VT, e.VT + answerGrace})
		}
	}
	return func(from, to int64) bool {
		for _, w := range windows {
			if from <= w.to && to >= w.from {
				return true
			}
		}
		return false
	}
}

func build(h []Event) *timeline {
	excused := completionExcused(h)
	t := &timeline{attempted: map[Key]bool{}, pushVT: map[Key]int64{}, acked: map[Key]bool{}, queuedOK: map[Key]int{},
		pushTenants: map[[3]string]map[string]bool{}, releases: map[string][]int{}, released: map[string]int{}, extends: map[string][]ext{},
		leaseGroup: map[string]string{}}
	addPush := func(k Key, c *call, status string) {
		t.attempted[k] = true
		if at, ok := t.pushVT[k]; !ok || c.in.VT < at {
			t.pushVT[k] = c.in.VT
		}
		pk := [3]string{k.Q, k.P, k.Txid}
		if t.pushTenants[pk] == nil {
			t.pushTenants[pk] = map[string]bool{}
		}
		t.pushTenants[pk][k.Tenant] = true
		if c.ok() {
			switch status {
			case "queued", "duplicate", "buffered":
				t.acked[k] = true
				t.pushes = append(t.pushes, pushRec{key: k, invokeI: c.in.Index, okI: c.done.Index, status: status})
			}
			if status == "queued" {
				t.queuedOK[k]++
			}
		}
	}
	ackItems := func(c *call, group string, items []Msg, txn bool) {
		for _, m := range items {
			if !(m.OK || txn) {
				continue
			}
			st := normStatus(m.Status)
			if m.Released && m.Lease != "" {
				// The release took effect somewhere between the ack's
				// invoke and its answer: record the earliest it may have.
				t.releases[m.Lease] = append(t.releases[m.Lease], c.in.Index)
				if at, ok := t.released[m.Lease]; !ok || c.done.Index < at {
					t.released[m.Lease] = c.done.Index
				}
			}
			if st == "completed" || st == "dlq" || m.DLQ || (txn && st == "failed") {
				t.completions = append(t.completions, completion{key: m.Key(), group: group, okI: c.done.Index, invokeI: c.in.Index, lease: m.Lease, dlq: m.DLQ})
			}
		}
	}
	for _, c := range calls(h) {
		if c.in.Foreign {
			// Sent under the wrong tenant: it must fail and it counts
			// for nothing; the tenant checker judges it.
			t.foreign = append(t.foreign, c)
			continue
		}
		in := c.in
		switch in.Op {
		case "push":
			status := ""
			if c.ok() {
				status = c.done.Status
			}
			addPush(in.Key(), c, status)
		case "pop":
			if !c.ok() {
				continue
			}
			for pos, m := range c.done.Msgs {
				g := groupOf(in.Group)
				d := delivery{key: m.Key(), group: g, lease: m.Lease, leaseSecs: in.LeaseSecs, invokeI: in.Index,
					okI: c.done.Index, invokeVT: in.VT, okVT: c.done.VT, pos: pos, client: in.Client, autoAck: in.Status == "autoack"}
				if d.key.Tenant == "" {
					d.key.Tenant = in.Tenant
				}
				t.deliveries = append(t.deliveries, d)
				if m.Lease != "" {
					t.leaseGroup[m.Lease] = g
				}
				if d.autoAck {
					t.completions = append(t.completions, completion{key: d.key, group: g, okI: c.done.Index, invokeI: c.in.Index,
						uncertain: excused(in.VT, c.done.VT)})
				}
			}
		case "ack":
			if c.ok() {
				ackItems(c, groupOf(in.Group), c.done.Msgs, false)
			}
			if c.done != nil && c.done.Kind == KInfo {
				// Indeterminate (e.g. the connection reset after COMMIT):
				// the ack may have released its lease, from its invoke on.
				for _, m := range in.Msgs {
					if m.Lease != "" {
						t.releases[m.Lease] = append(t.releases[m.Lease], c.in.Index)
					}
				}
			}
		case "extend":
			if c.ok() && c.done.Status == "renewed" {
				t.extends[in.Lease] = append(t.extends[in.Lease], ext{invokeVT: in.VT, secs: in.LeaseSecs, invokeI: in.Index})
			}
		case "txn":
			committed := c.ok() && c.done.Status == "committed"
			for _, m := range in.Msgs {
				if m.Op == "push" {
					st := ""
					if committed {
						st = "queued"
						if m.Status == "duplicate" {
							st = "duplicate"
						}
					}
					addPush(m.Key(), c, st)
				}
			}
			if committed {
				var acks []Msg
				for _, m := range in.Msgs {
					if m.Op == "ack" {
						acks = append(acks, m)
					}
				}
				ackItems(c, groupOf(in.Group), acks, true)
			}
		}
	}
	for _, e := range h {
		if e.Kind == KFinal {
			t.rows, t.final = e.Rows, true
		}
	}
	t.late = lateGroups(h)
	return t
}

// evictable reports whether k's queue evicts and k may have waited past
// its maxWait by vt (its earliest push counted as its creation), so that
// it may be gone unconsumed.
func (t *timeline) evictable(k Key, vt int64, s Spec) bool {
	w := s.MaxWaitMS[k.Q]
	at, ok := t.pushVT[k]
	return w > 0 && ok && at+w-s.SkewMS <= vt
}

func groupOf(g string) string {
	if g == "" {
		return QueueMode
	}
	return g
}

func sortedKeys[V any](m map[Key]V) []Key {
	out := make([]Key, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func limit(vs []Violation, n int) []Violation {
	if len(vs) <= n {
		return vs
	}
	return append(vs[:n], Violation{vs[0].Property, fmt.Sprintf("... and %d more", len(vs)-n)})
}
