package sim

import (
	"fmt"
	"math"
	"sort"
)

// CheckSubscription judges the late groups (LateGroup): groups whose pops
// send subscriptionMode new or subscriptionFrom, and that may be sought to
// a timestamp. Each subscription, and each seek answered after it, starts
// an epoch of the group with a start point in database time: for mode new
// the instant of the pop that subscribed (somewhere between the first
// subscribing pop's invoke and the first one answered), for
// subscriptionFrom and a seek the timestamp sent. In each epoch:
//   - no message stored certainly at or before the start point (a push
//     answered queued in an earlier millisecond) is delivered to the
//     group;
//   - the group's first delivery in each partition is the first message
//     stored after the start point: no message stored certainly after it
//     (every push of it invoked later) and certainly before the delivered
//     one (answered queued before any push of that one was invoked) is
//     passed over, unless it may have been evicted.
//
// What the start point leaves uncertain is not judged, and a seek whose
// answer was lost ends the judging of its group. No-loss holds each late
// group to every message stored certainly after the start point of its
// last epoch (timeline.late), and liveness to those of the epoch a pop
// falls in.
func CheckSubscription(h []Event, s Spec) []Violation {
	t := build(h)
	var out []Violation
	type part struct {
		lateID
		p string
		e int
	}
	first := map[part]delivery{}
	var parts []part
	for _, d := range t.deliveries {
		id := lateID{d.key.Tenant, d.key.Q, d.group}
		lg := t.late.groups[id]
		if lg == nil {
			continue
		}
		e, ok := lg.epochOf(d)
		if !ok {
			continue
		}
		ep := lg.epochs[e]
		if t.storedBy(d.key, ep.lo) {
			out = append(out, Violation{"subscription", fmt.Sprintf("group %s (%s) was given %s at vt %d, stored before its start point (vt %d)",
				d.group, ep.what(), d.key, d.okVT, ep.lo)})
		}
		pk := part{id, d.key.P, e}
		if _, seen := first[pk]; !seen {
			first[pk] = d
			parts = append(parts, pk)
		}
	}
	for _, pk := range parts {
		d := first[pk]
		lg := t.late.groups[pk.lateID]
		ep := lg.epochs[pk.e]
		dFirst, ok := t.late.firstAttempt[d.key]
		if !ok {
			continue // never pushed: no-loss reports it
		}
		for _, p := range t.pushes {
			m := p.key
			if p.status != "queued" || m == d.key || m.Tenant != d.key.Tenant || m.Q != d.key.Q || m.P != d.key.P ||
				p.okI >= dFirst || !t.storedAfter(m, ep.hi) || t.evictable(m, d.okVT, s) {
				continue
			}
			if s.RetentionMS[m.Q] > 0 && t.deliveredIn(m, d.group, ep.beginI) {
				continue // completed before the seek: retention may have deleted it
			}
			out = append(out, Violation{"subscription", fmt.Sprintf("group %s (%s): its first delivery in partition %s was %s at vt %d, but %s was stored after the start point (vt %d) and before it",
				d.group, ep.what(), d.key.P, d.key, d.okVT, m, ep.hi)})
			break
		}
	}
	return limit(out, 20)
}

// lateID is a late group of a tenant's queue.
type lateID struct{ tenant, q, g string }

// lateEpoch is a stretch of a late group's life with one start point,
// known to lie in [lo, hi] (virtual ms, database time).
type lateEpoch struct {
	mode   string // new, from, seek
	lo, hi int64
	// Deliveries of pops invoked after beginI and answered before endI
	// belong to it.
	beginI, endI int
}

func (e lateEpoch) what() string {
	if e.mode == "new" {
		return fmt.Sprintf("subscribed new between vt %d and %d", e.lo, e.hi)
	}
	if e.mode == "seek" {
		return fmt.Sprintf("sought to vt %d", e.lo)
	}
	return fmt.Sprintf("subscribed from vt %d", e.lo)
}

// lateGroup is what the history tells of a late group.
type lateGroup struct {
	epochs []lateEpoch
	// lost: a seek whose answer was lost ended the last epoch; nothing
	// after it is judged.
	lost bool
}

func (g *lateGroup) epochOf(d delivery) (int, bool) {
	for i, e := range g.epochs {
		if d.invokeI > e.beginI && d.okI < e.endI {
			return i, true
		}
	}
	return 0, false
}

// lateSet is what the history tells of the late groups, and the push
// facts their rules need.
type lateSet struct {
	groups map[lateID]*lateGroup
	// firstAttempt is the invoke index of a key's first push (any
	// outcome); queuedVT the earliest answer time of a push of it
	// answered queued.
	firstAttempt map[Key]int
	queuedVT     map[Key]int64
}

// lateGroups reads the late groups' epochs from the history.
func lateGroups(h []Event) *lateSet {
	ls := &lateSet{groups: map[lateID]*lateGroup{}, firstAttempt: map[Key]int{}, queuedVT: map[Key]int64{}}
	lastTry := map[lateID]int64{}
	pushed := func(k Key, c *call, queued bool) {
		if _, ok := ls.firstAttempt[k]; !ok {
			ls.firstAttempt[k] = c.in.Index
		}
		if at, ok := ls.queuedVT[k]; queued && (!ok || c.done.VT < at) {
			ls.queuedVT[k] = c.done.VT
		}
	}
	for _, c := range calls(h) {
		in := c.in
		if in.Foreign {
			continue
		}
		id := lateID{in.Tenant, in.Queue, groupOf(in.Group)}
		switch {
		case in.Op == "push":
			pushed(in.Key(), c, c.ok() && c.done.Status == "queued")
		case in.Op == "txn":
			for _, m := range in.Msgs {
				if m.Op == "push" {
					k := m.Key()
					if k.Tenant == "" {
						k.Tenant = in.Tenant
					}
					pushed(k, c, c.ok() && c.done.Status == "committed" && m.Status != "duplicate")
				}
			}
		case in.Op == "pop" && in.SubMode != "" && in.Group != "":
			if c.done != nil && c.done.Kind == KFail {
				continue // refused: it subscribed nothing
			}
			g := ls.groups[id]
			if g == nil {
				g = &lateGroup{epochs: []lateEpoch{{mode: in.SubMode, lo: in.VT, hi: math.MaxInt64, beginI: -1, endI: math.MaxInt}}}
				if in.SubMode == "from" {
					g.epochs[0].lo, g.epochs[0].hi = in.SubFrom, in.SubFrom
				}
				ls.groups[id] = g
			}
			e := &g.epochs[0]
			if e.mode == "new" && e.hi == math.MaxInt64 {
				lastTry[id] = in.VT
				if c.ok() {
					e.hi = c.done.VT
				}
			}
		case in.Op == "seek":
			g := ls.groups[id]
			if g == nil || g.lost || (c.done != nil && c.done.Kind == KFail) {
				continue
			}
			g.epochs[len(g.epochs)-1].endI = in.Index
			if !c.ok() {
				g.lost = true
				continue
			}
			g.epochs = append(g.epochs, lateEpoch{mode: "seek", lo: in.SubFrom, hi: in.SubFrom, beginI: c.done.Index, endI: math.MaxInt})
		}
	}
	for id, g := range ls.groups {
		if e := &g.epochs[0]; e.hi == math.MaxInt64 {
			// Never answered: any of its subscribing pops may have
			// subscribed it, the last one included.
			e.hi = max(e.lo, lastTry[id])
		}
	}
	return ls
}

// storedBy reports whether k was certainly stored at or before vt: a push
// of it answered queued before then. Strictly before: a history's times
// are whole milliseconds, cut from the database's finer ones (a push and
// a start point recorded at the same millisecond may be in either order).
func (t *timeline) storedBy(k Key, vt int64) bool {
	at, ok := t.late.queuedVT[k]
	return ok && at < vt
}

// storedAfter reports whether k, if stored, was certainly stored after vt:
// every push of it was invoked in a later millisecond.
func (t *timeline) storedAfter(k Key, vt int64) bool {
	at, ok := t.pushVT[k]
	return ok && at > vt
}

// deliveredIn reports whether k was given to g in an answer before index i.
func (t *timeline) deliveredIn(k Key, g string, i int) bool {
	for _, d := range t.deliveries {
		if d.key == k && d.group == g && d.okI < i {
			return true
		}
	}
	return false
}

// lateExpects reports whether g, when it is a late group, must complete k
// by the end: stored certainly after the start point of its last epoch.
// Groups that are not late expect everything.
func (t *timeline) lateExpects(k Key, g string) bool {
	lg := t.late.groups[lateID{k.Tenant, k.Q, g}]
	if lg == nil {
		return true
	}
	return !lg.lost && t.storedAfter(k, lg.epochs[len(lg.epochs)-1].hi)
}

// lateExpectsAt is lateExpects for a pop invoked at index i: the epoch it
// falls in, if any.
func (t *timeline) lateExpectsAt(k Key, g string, i int) bool {
	lg := t.late.groups[lateID{k.Tenant, k.Q, g}]
	if lg == nil {
		return true
	}
	for _, e := range lg.epochs {
		if i > e.beginI && i < e.endI {
			return t.storedAfter(k, e.hi)
		}
	}
	return false
}

// lateGroupsOf lists the late groups of k's tenant and queue that must
// complete k (no-loss).
func (t *timeline) lateGroupsOf(k Key) []string {
	var out []string
	for id := range t.late.groups {
		if id.tenant == k.Tenant && id.q == k.Q && t.lateExpects(k, id.g) {
			out = append(out, id.g)
		}
	}
	sort.Strings(out)
	return out
}
