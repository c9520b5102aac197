package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// The coverage matrix: which combinations of write path, queue option,
// consumer option, edge input and fault a run exercised, derived from its
// history alone (so a recorded history shows its own coverage). A cell is
// its dimensions' values joined by " x ", e.g. "write=timer x
// queue=encrypted": a message a timer fired into an encrypted queue was
// delivered. make sim adds up the cells of all its generated seeds,
// prints the matrix, and fails naming every cell SPEC.md requires that no
// seed reached (scenarios.RequiredCells).
//
// Dimensions:
//   - write: how a delivered message was written: push, txn (a
//     transaction's push), timer (a timer's fire), stream (a stream
//     cycle's sink message), dlq-retry (retried out of the dead-letter
//     queue), spool (answered buffered, replayed from the spool);
//   - queue: an option of the message's queue when it was written: plain
//     (none of these), encrypted, retention (completed retention), expiry
//     (retentionSeconds), eviction (maxWaitTimeSeconds), delayed,
//     window, priority; and dlq: the message was dead-lettered after its
//     retry limit;
//   - consume: how it was delivered: queue-mode, group (subscribed from
//     the start), group-new and group-from (subscribed later with
//     subscriptionMode new or subscriptionFrom), seek (delivered after its
//     group's cursor was moved by a seek), autoack, extend-early and
//     extend-late (an extend of its lease answered, before or after the
//     lease ended), long-poll, leave (a pop whose client left mid-claim),
//     direct (a pop driven through the broker's consume.Consumer, not
//     HTTP);
//   - edge: an input at or past a limit of queen/limits sent on a route
//     and answered: edge=<route>:<at|past>;
//   - fault: a write path or a pop invoked while a fault was active:
//     "fault=<kind> x write=<path>", "fault=<kind> x consume=pop".
type Coverage map[string]int

// Cell joins dimension=value pairs into a cell name.
func Cell(pairs ...string) string { return strings.Join(pairs, " x ") }

// KQueue is a queue's configuration as the run set it (What: its options,
// comma-separated, "" for plain), for the coverage matrix.
const KQueue = "queue"

// Add counts every cell of o once more (make sim counts seeds per cell).
func (c Coverage) Add(o Coverage) {
	for k := range o {
		c[k]++
	}
}

// faultWindowMS is how long a fault without a duration (a reset, a crash,
// a skew) counts as active for the fault x path cells.
const faultWindowMS = 2000

// Cover derives the cells a run exercised from its history.
func Cover(h []Event) Coverage {
	cov := Coverage{}
	w := writesOf(h)
	opts := optionsOverTime(h)
	leases := map[string]*call{}
	sought := map[[3]string]bool{}
	for _, c := range calls(h) {
		if c.in.Op == "seek" && c.ok() {
			sought[[3]string{c.in.Tenant, c.in.Queue, c.in.Group}] = true
		}
		coverCall(cov, c, w, opts, leases, sought)
	}
	coverFaults(cov, h, w)
	return cov
}

// written is how and when a key was first written.
type written struct {
	path string
	vt   int64
}

// writesOf maps each key to the write path that first wrote it.
func writesOf(h []Event) map[Key]written {
	w := map[Key]written{}
	note := func(k Key, path string, vt int64) {
		if _, ok := w[k]; !ok {
			w[k] = written{path, vt}
		}
	}
	for _, c := range calls(h) {
		in := c.in
		switch {
		case in.Op == "push" && c.done != nil && c.done.Status == "buffered":
			note(in.Key(), "spool", in.VT)
		case in.Op == "push" || in.Op == "stream-push":
			note(in.Key(), "push", in.VT)
		case in.Op == "txn":
			for _, m := range in.Msgs {
				if m.Op == "push" {
					note(m.Key(), "txn", in.VT)
				}
			}
		case in.Op == "timer":
			note(in.Key(), "timer", in.VT)
		case in.Op == "sealed-write":
			note(in.Key(), in.What, in.VT)
		case in.Op == "sealed-retry" && c.ok() && c.done.Status != "":
			w[Key{in.Tenant, in.Queue, in.Partition, c.done.Status}] = written{"dlq-retry", c.done.VT}
		}
	}
	for _, e := range h {
		switch {
		case e.Kind == KOK && e.Op == "stream-cycle":
			for _, m := range e.Msgs {
				note(m.Key(), "stream", e.VT)
			}
		case e.Kind == KOK && e.Op == "dlq-retry":
			for _, m := range e.Msgs {
				w[m.Key()] = written{"dlq-retry", e.VT}
			}
		}
	}
	return w
}

// queueOpt is a queue's options from a point in the run on.
type queueOpt struct {
	vt   int64
	opts []string
}

// optionsOverTime reads the KQueue events: per tenant/queue, its options over
// time.
func optionsOverTime(h []Event) map[[2]string][]queueOpt {
	out := map[[2]string][]queueOpt{}
	for _, e := range h {
		if e.Kind != KQueue {
			continue
		}
		var opts []string
		if e.What != "" {
			opts = strings.Split(e.What, ",")
		}
		k := [2]string{e.Tenant, e.Queue}
		out[k] = append(out[k], queueOpt{e.VT, opts})
	}
	return out
}

// optionsAt are the options of tenant's queue q at vt ("plain" for none).
func optionsAt(all map[[2]string][]queueOpt, tenant, q string, vt int64) []string {
	var cur []string
	for _, o := range all[[2]string{tenant, q}] {
		if o.vt <= vt {
			cur = o.opts
		}
	}
	if len(cur) == 0 {
		return []string{"plain"}
	}
	return cur
}

// coverCall adds the cells of one operation.
func coverCall(cov Coverage, c *call, w map[Key]written, opts map[[2]string][]queueOpt, leases map[string]*call, sought map[[3]string]bool) {
	in := c.in
	if c.done != nil {
		if route, at, ok := edgeInput(in); ok {
			cov[Cell("edge="+route+":"+at)]++
			if at == "past" {
				cov[Cell("edge="+route+":past:"+in.What)]++ // which limit
			}
		}
	}
	if c.done == nil || c.done.Kind != KOK {
		return
	}
	switch in.Op {
	case "pop", "sealed-pop":
		if c.done.Code != 200 {
			return
		}
		modes := consumeModes(in, sought[[3]string{in.Tenant, in.Queue, in.Group}])
		if in.Lease == "" && len(c.done.Msgs) > 0 {
			leases[c.done.Msgs[0].Lease] = c
		}
		for _, m := range c.done.Msgs {
			leases[m.Lease] = c
			if m.Tenant == "" {
				m.Tenant = in.Tenant
			}
			wr, ok := w[m.Key()]
			if !ok {
				continue
			}
			for _, o := range optionsAt(opts, m.Tenant, m.Queue, wr.vt) {
				cov[Cell("write="+wr.path, "queue="+o)]++
				for _, mode := range modes {
					cov[Cell("consume="+mode, "queue="+o)]++
				}
			}
		}
	case "ack":
		for _, m := range c.done.Msgs {
			if !m.DLQ {
				continue
			}
			if m.Tenant == "" {
				m.Tenant = in.Tenant
			}
			if wr, ok := w[m.Key()]; ok {
				cov[Cell("write="+wr.path, "queue=dlq")]++
			}
		}
	case "sealed-retry":
		if wr, ok := w[in.Key()]; ok {
			cov[Cell("write="+wr.path, "queue=dlq")]++
		}
	case "extend":
		pop := leases[in.Lease]
		if pop == nil || in.Foreign {
			return
		}
		when := "extend-early"
		if in.VT > pop.done.VT+int64(pop.in.LeaseSecs)*1000 {
			when = "extend-late"
		}
		for _, m := range pop.done.Msgs {
			if wr, ok := w[m.Key()]; ok {
				for _, o := range optionsAt(opts, m.Tenant, m.Queue, wr.vt) {
					cov[Cell("consume="+when, "queue="+o)]++
				}
			}
		}
	}
}

// edgeInput reports whether an operation sent an input at or past a limit:
// its route and "at" or "past".
func edgeInput(in Event) (route, at string, ok bool) {
	if !edgeOps[in.Op] {
		return "", "", false
	}
	switch {
	case in.What != "" && in.What != edgeAtLimit:
		return in.Op, "past", true
	case in.What == edgeAtLimit:
		return in.Op, "at", true
	case in.Op == "push" && len(in.Txid) >= txidLimit, in.Op == "timer" && len(in.Txid) >= timerKeyLimit:
		return in.Op, "at", true
	}
	for _, m := range in.Msgs {
		if in.Op == "txn" && m.Op == "push" && len(m.Txid) >= txidLimit {
			return in.Op, "at", true
		}
	}
	return "", "", false
}

// consumeModes are the consume values of a pop's invoke; sought says
// whether its group's cursor was moved by a seek before it.
func consumeModes(in Event, sought bool) []string {
	var modes []string
	switch {
	case in.Group == "":
		modes = append(modes, "queue-mode")
	case sought:
		modes = append(modes, "seek")
	case in.SubMode == "new":
		modes = append(modes, "group-new")
	case in.SubMode != "":
		modes = append(modes, "group-from")
	default:
		modes = append(modes, "group")
	}
	if in.Status == "autoack" {
		modes = append(modes, "autoack")
	}
	if in.Direct {
		modes = append(modes, "direct")
	}
	return modes
}

// coverFaults adds a fault x path cell for every write path and pop
// invoked while a fault was active.
func coverFaults(cov Coverage, h []Event, w map[Key]written) {
	type window struct {
		kind     string
		from, to int64
	}
	var ws []window
	for i, e := range h {
		switch {
		case e.Kind == KBroker && e.What == "crash":
			// A crashed broker is down until it starts again.
			to := e.VT + faultWindowMS
			for _, later := range h[i+1:] {
				if later.Kind == KBroker && later.Broker == e.Broker && later.What == "start" {
					to = max(to, later.VT)
					break
				}
			}
			ws = append(ws, window{"broker.crash", e.VT, to})
		case e.Kind == KFault && e.Fault == "clock.skew":
			ws = append(ws, window{e.Fault, e.VT, math.MaxInt64}) // a skew stays
		case e.Kind == KFault && slices.Contains(FaultKinds, e.Fault):
			ws = append(ws, window{e.Fault, e.VT, max(e.Until, e.VT+faultWindowMS)})
		}
	}
	for _, c := range calls(h) {
		var paths []string
		switch c.in.Op {
		case "pop":
			paths = []string{"consume=pop"}
		case "push":
			if wr, ok := w[c.in.Key()]; ok {
				paths = []string{"write=" + wr.path}
			}
		case "txn", "timer", "stream-push", "dlq-retry":
			paths = []string{"write=" + strings.TrimSuffix(c.in.Op, "-push")}
		}
		for _, p := range paths {
			for _, f := range ws {
				if c.in.VT >= f.from && c.in.VT <= f.to {
					cov[Cell("fault="+f.kind, p)]++
				}
			}
		}
	}
}

// Table prints the matrix: for each pair of dimensions seen, a grid of
// how many seeds reached each cell ("." for none), then the
// one-dimensional cells.
func (c Coverage) Table(seeds int) string {
	type grid struct {
		rows, cols map[string]bool
		n          map[[2]string]int
	}
	grids := map[string]*grid{}
	var singles []string
	for cell, n := range c {
		parts := strings.Split(cell, " x ")
		if len(parts) != 2 {
			singles = append(singles, fmt.Sprintf("%s: %d", cell, n))
			continue
		}
		rd, rv, _ := strings.Cut(parts[0], "=")
		cd, cv, _ := strings.Cut(parts[1], "=")
		g := grids[rd+" x "+cd]
		if g == nil {
			g = &grid{rows: map[string]bool{}, cols: map[string]bool{}, n: map[[2]string]int{}}
			grids[rd+" x "+cd] = g
		}
		g.rows[rv], g.cols[cv] = true, true
		g.n[[2]string{rv, cv}] = n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "coverage matrix: seeds reaching each cell, of %d\n", seeds)
	for _, name := range slices.Sorted(maps.Keys(grids)) {
		g := grids[name]
		cols := slices.Sorted(maps.Keys(g.cols))
		fmt.Fprintf(&b, "  %s\n    %-22s", name, "")
		for _, col := range cols {
			fmt.Fprintf(&b, " %10.10s", col)
		}
		b.WriteString("\n")
		for _, row := range slices.Sorted(maps.Keys(g.rows)) {
			fmt.Fprintf(&b, "    %-22.22s", row)
			for _, col := range cols {
				if n := g.n[[2]string{row, col}]; n > 0 {
					fmt.Fprintf(&b, " %10d", n)
				} else {
					fmt.Fprintf(&b, " %10s", ".")
				}
			}
			b.WriteString("\n")
		}
	}
	sort.Strings(singles)
	for _, s := range singles {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	return b.String()
}

// options names q's options as the coverage matrix's queue dimension does.
func (q QueueSpec) options() []string {
	var out []string
	if q.CompletedRetentionSecs > 0 {
		out = append(out, "retention")
	}
	if q.MaxWaitSecs > 0 {
		out = append(out, "eviction")
	}
	if q.DelayedSecs > 0 {
		out = append(out, "delayed")
	}
	if q.WindowSecs > 0 {
		out = append(out, "window")
	}
	if q.Priority != 0 {
		out = append(out, "priority")
	}
	return out
}

// noteQueue records tenant's queue q configured with opts (KQueue).
func (r *runner) noteQueue(tenant, q string, opts []string) {
	r.hist.Add(Event{Kind: KQueue, VT: r.vt(), Tenant: tenant, Queue: q, What: strings.Join(opts, ",")})
}
