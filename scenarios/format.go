// Package scenarios names simulator runs: a seed, a cluster, a workload, a
// fault schedule and the properties to check, in a line-oriented text
// format that is easy to review and to hand-edit. It generates scenarios
// from seeds, prints and parses them, and runs them.
//
//	scenario  pg-blackhole-and-crash
//	seed      0x5eed
//	mode      lockstep
//	brokers   3
//	tenants   t1 t2
//	queues    orders(partitions=4,leaseTime=10s,groups=__QUEUE_MODE__|audit,completedRetention=5s)
//	workload  clients=6 ops=300 push=45 pop=30 ack=18 extend=2 txn=3 abandon=2 reuse=5% fail=8% hot=80%
//	vtime     120s
//	converge  60s
//	fault at=10s pg.blackhole broker=all for=15s
//	fault at=40s broker.crash broker=1
//	expect properties no-loss no-double-delivery fifo dedup tenant lease-recovery
//	expect sometimes  pg.blackhole broker.crash
//
// "#" starts a comment. Tenant names that are not UUIDs map to a fixed
// UUID derived from the name.
package scenarios

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/sim"
)

// Scenario is a parsed scenario file.
type Scenario struct {
	sim.Options
	// TenantNames are the names as written; Options.Tenants holds UUIDs.
	TenantNames []string
	// Generated is true when Generate(Seed) reproduces the scenario, so
	// the seed alone replays it.
	Generated bool
}

// TenantID maps a tenant name to its UUID.
func TenantID(name string) string {
	if ids.Valid(name) {
		return strings.ToLower(name)
	}
	sum := sha256.Sum256([]byte("queen-sim-tenant:" + name))
	var b [16]byte
	copy(b[:], sum[:16])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return ids.Format(b)
}

// Parse reads a scenario.
func Parse(r io.Reader) (*Scenario, error) {
	s := &Scenario{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := s.apply(f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if s.Name == "" {
		return nil, fmt.Errorf("missing 'scenario' line")
	}
	return s, nil
}

// apply sets what one line of a scenario file says.
func (s *Scenario) apply(f []string) error {
	switch f[0] {
	case "scenario", "seed", "mode", "brokers", "vtime", "converge":
		return s.applySetting(f)
	case "tenants":
		s.TenantNames = f[1:]
		s.Tenants = nil
		for _, t := range f[1:] {
			s.Tenants = append(s.Tenants, TenantID(t))
		}
	case "queues":
		for _, q := range f[1:] {
			qs, err := parseQueue(q)
			if err != nil {
				return err
			}
			s.Queues = append(s.Queues, qs)
		}
	case "workload":
		return s.parseWorkload(f[1:])
	case "fault":
		fa, err := parseFault(f[1:])
		if err != nil {
			return err
		}
		s.Faults = append(s.Faults, fa)
	case "expect":
		return s.applyExpect(f)
	default:
		return fmt.Errorf("unknown key %q", f[0])
	}
	return nil
}

// applySetting sets one of the keys that take a single value.
func (s *Scenario) applySetting(f []string) error {
	one := func() (string, error) {
		if len(f) != 2 {
			return "", fmt.Errorf("%s takes one value", f[0])
		}
		return f[1], nil
	}
	var err error
	var v string
	switch f[0] {
	case "scenario":
		s.Name, err = one()
	case "seed":
		if v, err = one(); err == nil {
			s.Seed, err = strconv.ParseUint(v, 0, 64)
		}
	case "mode":
		if v, err = one(); err == nil {
			if v != "lockstep" && v != "free" {
				return fmt.Errorf("mode must be lockstep or free")
			}
			s.Mode = v
		}
	case "brokers":
		if v, err = one(); err == nil {
			s.Brokers, err = strconv.Atoi(v)
			if err == nil && (s.Brokers < 1 || s.Brokers > 3) {
				err = fmt.Errorf("brokers must be 1..3")
			}
		}
	case "vtime":
		if v, err = one(); err == nil {
			s.VTime, err = time.ParseDuration(v)
		}
	case "converge":
		if v, err = one(); err == nil {
			s.Converge, err = time.ParseDuration(v)
		}
	}
	return err
}

// applyExpect reads an "expect properties" or "expect sometimes" line.
func (s *Scenario) applyExpect(f []string) error {
	if len(f) < 2 {
		return fmt.Errorf("expect needs properties or sometimes")
	}
	switch f[1] {
	case "properties":
		for _, p := range f[2:] {
			if _, ok := sim.CheckerNamed(p); !ok {
				return fmt.Errorf("unknown property %q", p)
			}
		}
		s.Expect = f[2:]
	case "sometimes":
		s.Sometimes = f[2:]
	default:
		return fmt.Errorf("expect %s: want properties or sometimes", f[1])
	}
	return nil
}

// parseQueue reads name(partitions=N,leaseTime=Ds,groups=a|b,completedRetention=Ds,maxWait=Ds,delayed=Ds,window=Ds,priority=N,late=...).
func parseQueue(s string) (sim.QueueSpec, error) {
	q := sim.QueueSpec{Name: s}
	open := strings.IndexByte(s, '(')
	if open < 0 {
		return q, nil
	}
	if !strings.HasSuffix(s, ")") {
		return q, fmt.Errorf("queue %q: missing ')'", s)
	}
	q.Name = s[:open]
	for _, kv := range strings.Split(s[open+1:len(s)-1], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return q, fmt.Errorf("queue %s: %q is not key=value", q.Name, kv)
		}
		var err error
		switch k {
		case "partitions":
			q.Partitions, err = strconv.Atoi(v)
		case "leaseTime":
			q.LeaseSecs, err = parseSecs(v)
		case "groups":
			q.Groups = strings.Split(v, "|")
		case "completedRetention":
			q.CompletedRetentionSecs, err = parseSecs(v)
		case "maxWait":
			q.MaxWaitSecs, err = parseSecs(v)
		case "delayed":
			q.DelayedSecs, err = parseSecs(v)
		case "window":
			q.WindowSecs, err = parseSecs(v)
		case "priority":
			q.Priority, err = strconv.Atoi(v)
		case "late":
			q.Late, err = parseLate(v)
		default:
			err = fmt.Errorf("unknown option %q", k)
		}
		if err != nil {
			return q, fmt.Errorf("queue %s: %w", q.Name, err)
		}
	}
	return q, nil
}

func (s *Scenario) parseWorkload(f []string) error {
	w := sim.Weights{}
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("workload: %q is not key=value", kv)
		}
		n, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
		if err != nil {
			return fmt.Errorf("workload %s: %w", k, err)
		}
		switch k {
		case "clients":
			s.Clients = n
		case "ops":
			s.Ops = n
		case "push":
			w.Push = n
		case "pop":
			w.Pop = n
		case "ack":
			w.Ack = n
		case "extend":
			w.Extend = n
		case "txn":
			w.Txn = n
		case "abandon":
			w.Abandon = n
		case "foreign":
			w.Foreign = n
		case "leave":
			w.Leave = n
		case "reuse":
			w.ReusePct = n
		case "fail":
			w.FailPct = n
		case "hot":
			w.HotPct = n
		case "poll":
			w.PollPct = n
		case "burst":
			w.BurstPct = n
		case "early":
			w.EarlyPct = n
		case "leaveack":
			w.LeaveAutoAckPct = n
		case "lateextend":
			w.LateExtendPct = n
		case "direct":
			w.DirectPct = n
		case "timer":
			w.Timer = n
		case "kv":
			w.KV = n
		case "stream":
			w.Stream = n
		default:
			return fmt.Errorf("workload: unknown %q", k)
		}
	}
	s.Weights = w
	return nil
}

func parseFault(f []string) (sim.FaultAt, error) {
	fa := sim.FaultAt{Broker: -1}
	for _, tok := range f {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			if fa.Kind != "" {
				return fa, fmt.Errorf("fault: two kinds (%s, %s)", fa.Kind, tok)
			}
			fa.Kind = tok
			continue
		}
		var err error
		switch k {
		case "at":
			fa.At, err = time.ParseDuration(v)
		case "for":
			fa.For, err = time.ParseDuration(v)
		case "by":
			fa.By, err = time.ParseDuration(strings.TrimPrefix(v, "+"))
		case "count":
			fa.Count, err = strconv.Atoi(v)
		case "broker":
			if v == "all" {
				fa.Broker = -1
			} else {
				fa.Broker, err = strconv.Atoi(v)
			}
		default:
			err = fmt.Errorf("unknown %q", k)
		}
		if err != nil {
			return fa, fmt.Errorf("fault %s: %w", tok, err)
		}
	}
	if !slices.Contains(sim.FaultKinds, fa.Kind) {
		return fa, fmt.Errorf("fault: unknown kind %q", fa.Kind)
	}
	return fa, nil
}

// Print writes s in the scenario format; Parse(Print(s)) gives s back.
func Print(w io.Writer, s *Scenario) error {
	b := &strings.Builder{}
	printHeader(b, s)
	if len(s.Queues) > 0 {
		var qs []string
		for _, q := range s.Queues {
			qs = append(qs, queueSpec(q))
		}
		fmt.Fprintf(b, "queues    %s\n", strings.Join(qs, " "))
	}
	printWorkload(b, s)
	if s.VTime > 0 {
		fmt.Fprintf(b, "vtime     %s\n", s.VTime)
	}
	if s.Converge > 0 {
		fmt.Fprintf(b, "converge  %s\n", s.Converge)
	}
	for _, f := range s.Faults {
		printFault(b, f)
	}
	if len(s.Expect) > 0 {
		fmt.Fprintf(b, "expect properties %s\n", strings.Join(s.Expect, " "))
	}
	if len(s.Sometimes) > 0 {
		fmt.Fprintf(b, "expect sometimes  %s\n", strings.Join(s.Sometimes, " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// printHeader writes the scenario, seed, mode, brokers and tenants lines.
func printHeader(b *strings.Builder, s *Scenario) {
	fmt.Fprintf(b, "scenario  %s\n", s.Name)
	fmt.Fprintf(b, "seed      %#x\n", s.Seed)
	if s.Mode != "" {
		fmt.Fprintf(b, "mode      %s\n", s.Mode)
	}
	if s.Brokers > 0 {
		fmt.Fprintf(b, "brokers   %d\n", s.Brokers)
	}
	if len(s.TenantNames) > 0 {
		fmt.Fprintf(b, "tenants   %s\n", strings.Join(s.TenantNames, " "))
	}
}

// queueSpec gives a queue as parseQueue reads it, its options printed only
// when set.
func queueSpec(q sim.QueueSpec) string {
	spec := fmt.Sprintf("%s(partitions=%d,leaseTime=%ds,groups=%s", q.Name, q.Partitions, q.LeaseSecs, strings.Join(q.Groups, "|"))
	if q.CompletedRetentionSecs > 0 {
		spec += fmt.Sprintf(",completedRetention=%ds", q.CompletedRetentionSecs)
	}
	if q.MaxWaitSecs > 0 {
		spec += fmt.Sprintf(",maxWait=%ds", q.MaxWaitSecs)
	}
	if q.DelayedSecs > 0 {
		spec += fmt.Sprintf(",delayed=%ds", q.DelayedSecs)
	}
	if q.WindowSecs > 0 {
		spec += fmt.Sprintf(",window=%ds", q.WindowSecs)
	}
	if q.Priority != 0 {
		spec += fmt.Sprintf(",priority=%d", q.Priority)
	}
	spec += printLate(q.Late)
	return spec + ")"
}

// printWorkload writes the workload line.
func printWorkload(b *strings.Builder, s *Scenario) {
	w8 := s.Weights
	fmt.Fprintf(b, "workload  clients=%d ops=%d push=%d pop=%d ack=%d extend=%d txn=%d abandon=%d reuse=%d%% fail=%d%%",
		s.Clients, s.Ops, w8.Push, w8.Pop, w8.Ack, w8.Extend, w8.Txn, w8.Abandon, w8.ReusePct, w8.FailPct)
	// Optional weights, printed only when set, in this order.
	for _, o := range []struct {
		key, unit string
		n         int
	}{{"hot", "%", w8.HotPct}, {"foreign", "", w8.Foreign}, {"leave", "", w8.Leave}, {"early", "%", w8.EarlyPct}, {"leaveack", "%", w8.LeaveAutoAckPct}, {"poll", "%", w8.PollPct},
		{"burst", "%", w8.BurstPct}, {"timer", "", w8.Timer}, {"stream", "", w8.Stream}, {"kv", "", w8.KV},
		{"lateextend", "%", w8.LateExtendPct}, {"direct", "%", w8.DirectPct}} {
		if o.n > 0 {
			fmt.Fprintf(b, " %s=%d%s", o.key, o.n, o.unit)
		}
	}
	fmt.Fprintln(b)
}

// printFault writes one fault line.
func printFault(b *strings.Builder, f sim.FaultAt) {
	broker := "all"
	if f.Broker >= 0 {
		broker = strconv.Itoa(f.Broker)
	}
	fmt.Fprintf(b, "fault at=%s %s broker=%s", f.At, f.Kind, broker)
	if f.For > 0 {
		fmt.Fprintf(b, " for=%s", f.For)
	}
	if f.By != 0 {
		fmt.Fprintf(b, " by=%s", f.By)
	}
	if f.Count != 0 {
		fmt.Fprintf(b, " count=%d", f.Count)
	}
	b.WriteString("\n")
}

// parseSecs reads a duration option in whole seconds.
func parseSecs(v string) (int, error) {
	d, err := time.ParseDuration(v)
	return int(d / time.Second), err
}
