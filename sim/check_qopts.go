package sim

import (
	"fmt"
	"math"
)

// Queue options (issue 29): delayedProcessing and windowBuffer hide
// messages from pops for a while, legitimately. This file holds the rule
// that they do hide them (CheckQueueOptions) and the allowance every other
// checker makes for them (hiding): a pop that finds nothing, or serves
// other partitions, while a message is hidden is no violation of liveness,
// lease recovery or fairness.
//
// Times: a message's created_at and a pop's "now" are both the database's
// time. In lockstep that is the virtual clock the history records (a
// broker's skewed clock never enters), and it does not move during a call;
// free-running runs set no queue options.

// addQueueOptions notes q's delayedProcessing and windowBuffer in s.
func (s *Spec) addQueueOptions(q QueueSpec) {
	if q.DelayedSecs > 0 {
		if s.DelayMS == nil {
			s.DelayMS = map[string]int64{}
		}
		s.DelayMS[q.Name] = int64(q.DelayedSecs) * 1000
	}
	if q.WindowSecs > 0 {
		if s.WindowMS == nil {
			s.WindowMS = map[string]int64{}
		}
		s.WindowMS[q.Name] = int64(q.WindowSecs) * 1000
	}
}

// queueOptions adds q's delayedProcessing, windowBuffer and priority to a
// configure's options.
func queueOptions(opts map[string]any, q QueueSpec) {
	if q.DelayedSecs > 0 {
		opts["delayedProcessing"] = q.DelayedSecs
	}
	if q.WindowSecs > 0 {
		opts["windowBuffer"] = q.WindowSecs
	}
	if q.Priority != 0 {
		opts["priority"] = q.Priority
	}
}

// CheckQueueOptions: a message of a queue with delayedProcessing D is never
// delivered before it is D old, and a partition of a queue with
// windowBuffer W is never served while its newest message is younger than
// W. Only what is certain is judged: a message was created no earlier than
// the first push of it was invoked, and delivered no later than its pop
// was answered; a push answered queued (or a committed transaction's)
// before a pop was invoked was in its partition when the pop claimed, the
// claim no later than the pop's answer.
func CheckQueueOptions(h []Event, s Spec) []Violation {
	if len(s.DelayMS) == 0 && len(s.WindowMS) == 0 {
		return nil
	}
	t := build(h)
	type stored struct {
		key Key
		okI int
		vt  int64 // invoke: the row was created no earlier
	}
	byPart := map[[3]string][]stored{}
	for _, c := range calls(h) {
		if c.in.Foreign || !c.ok() {
			continue
		}
		switch {
		case c.in.Op == "push" && c.done.Status == "queued" && s.WindowMS[c.in.Queue] > 0:
			k := c.in.Key()
			byPart[[3]string{k.Tenant, k.Q, k.P}] = append(byPart[[3]string{k.Tenant, k.Q, k.P}], stored{k, c.done.Index, c.in.VT})
		case c.in.Op == "txn" && c.done.Status == "committed":
			for _, m := range c.in.Msgs {
				if m.Op == "push" && m.Status != "duplicate" && s.WindowMS[m.Queue] > 0 {
					byPart[[3]string{m.Tenant, m.Queue, m.Partition}] = append(byPart[[3]string{m.Tenant, m.Queue, m.Partition}], stored{m.Key(), c.done.Index, c.in.VT})
				}
			}
		}
	}
	var out []Violation
	for _, d := range t.deliveries {
		if D := s.DelayMS[d.key.Q]; D > 0 {
			if at, ok := t.pushVT[d.key]; ok && d.okVT < at+D {
				out = append(out, Violation{"queue-options", fmt.Sprintf("%s delivered in group %s by vt %d (pop event %d), created no earlier than vt %d: before its queue's delayedProcessing of %d ms",
					d.key, d.group, d.okVT, d.okI, at, D)})
				continue
			}
		}
		if W := s.WindowMS[d.key.Q]; W > 0 {
			for _, a := range byPart[[3]string{d.key.Tenant, d.key.Q, d.key.P}] {
				if a.okI < d.invokeI && d.okVT < a.vt+W {
					out = append(out, Violation{"queue-options", fmt.Sprintf("%s delivered in group %s by vt %d (pop event %d) while its partition's newest message %s was created no earlier than vt %d: inside its queue's windowBuffer of %d ms",
						d.key, d.group, d.okVT, d.okI, a.key, a.vt, W)})
					break
				}
			}
		}
	}
	return limit(out, 20)
}

// hiding is what delayedProcessing and windowBuffer may hide from a pop,
// for the checkers that expect a pop to find a message (nil: no queue of
// the run has either option).
type hiding struct {
	s Spec
	// queuedAt is, per message, the latest time it may have been created:
	// the earliest answer of a push of it answered queued (or of a
	// committed transaction pushing it).
	queuedAt map[Key]int64
	// seenAt is, per message, the earliest answer of a pop delivering it:
	// it was visible by then.
	seenAt map[Key]int64
	// appends are, per partition of a queue with windowBuffer, the spans
	// of time in which a push may have stored a message there (to is
	// never for a push whose answer was lost or that was buffered: a
	// spool replay stores it whenever it drains).
	appends map[[3]string][]appendSpan
}

type appendSpan struct{ from, to int64 }

const never = math.MaxInt64

func newHiding(h []Event, s Spec) *hiding {
	if len(s.DelayMS) == 0 && len(s.WindowMS) == 0 {
		return nil
	}
	hd := &hiding{s: s, queuedAt: map[Key]int64{}, seenAt: map[Key]int64{}, appends: map[[3]string][]appendSpan{}}
	note := func(k Key, from, to int64, queued bool) {
		if queued {
			if at, ok := hd.queuedAt[k]; !ok || to < at {
				hd.queuedAt[k] = to
			}
		}
		if s.WindowMS[k.Q] > 0 {
			p := [3]string{k.Tenant, k.Q, k.P}
			hd.appends[p] = append(hd.appends[p], appendSpan{from, to})
		}
	}
	for _, c := range calls(h) {
		if c.in.Foreign {
			continue
		}
		switch c.in.Op {
		case "push":
			switch {
			case c.done == nil || c.done.Kind == KInfo:
				note(c.in.Key(), c.in.VT, never, false)
			case c.done.Kind != KOK:
			case c.done.Status == "queued":
				note(c.in.Key(), c.in.VT, c.done.VT, true)
			case c.done.Status == "buffered" || c.done.Status == "":
				note(c.in.Key(), c.in.VT, never, false)
			}
		case "txn":
			for _, m := range c.in.Msgs {
				switch {
				case m.Op != "push":
				case c.done == nil || c.done.Kind == KInfo:
					note(m.Key(), c.in.VT, never, false)
				case c.ok() && c.done.Status == "committed" && m.Status != "duplicate":
					note(m.Key(), c.in.VT, c.done.VT, true)
				}
			}
		case "pop":
			if !c.ok() {
				continue
			}
			for _, m := range c.done.Msgs {
				k := m.Key()
				if k.Tenant == "" {
					k.Tenant = c.in.Tenant
				}
				if at, ok := hd.seenAt[k]; !ok || c.done.VT < at {
					hd.seenAt[k] = c.done.VT
				}
			}
		}
	}
	return hd
}

// hidden reports whether k may be hidden from a pop that claimed between
// from and to (its invoke and its answer): still delayed, unless it is
// certainly old enough or was delivered already; or its partition still
// inside the window of a message stored in it.
func (hd *hiding) hidden(k Key, from, to int64) bool {
	if hd == nil {
		return false
	}
	if d := hd.s.DelayMS[k.Q]; d > 0 {
		seen, delivered := hd.seenAt[k]
		at, queued := hd.queuedAt[k]
		if !(delivered && seen <= from) && !(queued && at+d+hd.s.SkewMS <= from) {
			return true
		}
	}
	if w := hd.s.WindowMS[k.Q]; w > 0 {
		for _, a := range hd.appends[[3]string{k.Tenant, k.Q, k.P}] {
			if a.from <= to && (a.to == never || a.to+w+hd.s.SkewMS > from) {
				return true
			}
		}
	}
	return false
}
