package sim

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"time"
)

// LateGroup is a consumer group that subscribes to its queue after pushes
// began (lockstep runs only): its first pop, at At, sends
// subscriptionMode=new, or (Mode "from") subscriptionFrom = the instant
// Back before it, and every later pop sends the same, as a client library
// does. It pops now and then (one step in 50) and completes what it gets at
// once. When Seek
// is set the group is sought then to a timestamp between its last pop and
// that instant, so the seek moves its cursors forward (a message it was
// given is never given again). The subscription rule judges it: nothing
// stored before its start point is delivered to it, everything stored
// after is, the first message after it first.
type LateGroup struct {
	Name string
	Mode string // new or from
	At   time.Duration
	Back time.Duration // mode from: subscriptionFrom is At - Back
	Seek time.Duration // > 0: when the group is sought
}

// lateRun is a late group's progress in a run.
type lateRun struct {
	spec       LateGroup
	tenant     string
	q          QueueSpec
	attempted  bool // a subscribing pop was sent
	subscribed bool // one was answered
	sought     bool
	lastPopVT  int64
	fromVT     int64
}

// lateVT is when, in virtual ms, a duration from the run's start falls.
func lateVT(d time.Duration) int64 { return d.Milliseconds() }

// lateStep lets each late group of the run act after the workload's step
// (lockstep): subscribe once due, then pop and complete now and then, and
// be sought once. A counter mixed with the seed decides, not the
// workload's stream, so every other choice of the seed stays as it was.
func (r *runner) lateStep() {
	if r.late == nil {
		for _, q := range r.o.Queues {
			for _, g := range q.Late {
				r.late = append(r.late, &lateRun{spec: g, tenant: r.o.Tenants[0], q: q})
			}
		}
		if r.late == nil {
			r.late = []*lateRun{}
		}
	}
	now := r.vt()
	for _, l := range r.late {
		r.lateN++
		roll := mix64(r.o.Seed ^ uint64(r.lateN)*0xd1b54a32d192ed69)
		b, ok := r.brokerFor(&client{broker: int(roll>>8) % r.o.Brokers})
		switch {
		case !ok || now < lateVT(l.spec.At):
		case !l.subscribed && l.attempted && roll%4 != 0:
			// Its subscription is in doubt (an outage): try again now
			// and then, not at every step.
		case !l.subscribed:
			if !l.attempted {
				l.attempted = true
				l.fromVT = lateVT(l.spec.At - l.spec.Back)
			}
			r.latePop(r.o.Clients+1, b, l, 1+int(roll>>16)%4)
		case l.spec.Seek > 0 && !l.sought && now >= lateVT(l.spec.Seek):
			l.sought = true
			// Between its last pop and now: forward only, so nothing it
			// was given comes back (past the millisecond of its last pop,
			// whose database time has a fraction).
			if r.act.seek(r.ctx, r.o.Clients+1, b, l.tenant, l.q.Name, l.spec.Name, l.lastPopVT+1+(now-l.lastPopVT)/2) == KOK {
				r.fired["seek"]++
			}
		case roll%50 == 0:
			r.latePop(r.o.Clients+1, b, l, 1+int(roll>>16)%4)
		}
	}
}

// latePop pops for l and completes what it got at once.
func (r *runner) latePop(c, b int, l *lateRun, batch int) *held {
	l.lastPopVT = r.vt()
	h, ok := r.act.popSub(r.ctx, c, b, l, batch)
	if ok && !l.subscribed {
		l.subscribed = true
		r.fired["subscribe."+l.spec.Mode]++
	}
	if h != nil {
		statuses := make([]string, len(h.msgs))
		for i := range statuses {
			statuses[i] = "completed"
		}
		r.act.ack(r.ctx, c, b, h, statuses)
	}
	return h
}

// drainLate drains the late groups that asked to subscribe, as drain does
// the others; it reports whether it got anything.
func (r *runner) drainLate() bool {
	got := false
	for _, l := range r.late {
		if !l.attempted {
			continue
		}
		for i := 0; i < 1000 && r.latePop(0, 0, l, 100) != nil; i++ {
			got = true
		}
	}
	return got
}

// popSub is a late group's pop, with its subscription parameters; ok
// reports an answer.
func (a *actor) popSub(ctx context.Context, c, b int, l *lateRun, batch int) (*held, bool) {
	e := Event{Op: "pop", Client: c, Broker: b, VT: a.vt(), Tenant: l.tenant, Queue: l.q.Name, Group: l.spec.Name, LeaseSecs: l.q.LeaseSecs, SubMode: l.spec.Mode}
	v := url.Values{"batch": {strconv.Itoa(batch)}, "consumerGroup": {l.spec.Name}}
	if l.spec.Mode == "from" {
		e.SubFrom = l.fromVT
		v.Set("subscriptionFrom", epoch.Add(time.Duration(l.fromVT)*time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00"))
	} else {
		v.Set("subscriptionMode", l.spec.Mode)
	}
	call := a.hist.Invoke(e)
	code, raw, err := a.cluster.Do(ctx, b, "GET", "/api/v1/pop/queue/"+url.PathEscape(l.q.Name)+"?"+v.Encode(), l.tenant, nil)
	h := a.finishPop(call, b, code, raw, err, l.tenant, l.q, l.spec.Name, false)
	return h, outcome(code, err) == KOK
}

// seek moves group g's cursors on queue q to the instant atVT (virtual
// ms): every message stored after it is delivered next.
func (a *actor) seek(ctx context.Context, c, b int, tenant, q, g string, atVT int64) string {
	call := a.hist.Invoke(Event{Op: "seek", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: q, Group: g, SubFrom: atVT})
	body, _ := json.Marshal(map[string]any{"timestamp": epoch.Add(time.Duration(atVT) * time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/consumer-groups/"+url.PathEscape(g)+"/queues/"+url.PathEscape(q)+"/seek", tenant, body)
	return a.finish(call, "seek", b, code, err, func(e *Event) {
		var res struct {
			Success bool `json:"success"`
			N       int  `json:"partitionsUpdated"`
		}
		if json.Unmarshal(raw, &res) != nil || !res.Success {
			e.Bad = "seek answered " + strconv.Itoa(code) + " with " + clip(raw)
			return
		}
		e.Status = strconv.Itoa(res.N)
	})
}
