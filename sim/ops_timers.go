package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"
)

// TimerQueue is where the workload's timers fire; no simulated consumer
// pops it, so the final read sees every fired timer as it was stored.
const TimerQueue = "sim-timers"

// timerRef is a timer a client scheduled, for a later cancel.
type timerRef struct{ tenant, key string }

// kvRef is a KV row a client put, for a later get.
type kvRef struct{ tenant, key string }

// scheduleTimer schedules a timer due in delay under key (its txn too).
// The answer's deliverAt is recorded: no message may be stored before it.
func (a *actor) scheduleTimer(ctx context.Context, c, b int, tenant, key string, delay time.Duration) {
	call := a.hist.Invoke(Event{Op: "timer", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: TimerQueue, Partition: "Default", Txid: key})
	body, _ := json.Marshal([]any{map[string]any{"op": "schedule", "queue": TimerQueue, "timerKey": key, "txn": key,
		"delayMs": delay.Milliseconds(), "payload": map[string]any{"timer": key}}})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/timers", tenant, body)
	a.finish(call, "timer", b, code, err, func(e *Event) {
		var r struct {
			Results []struct {
				Status    string `json:"status"`
				DeliverAt string `json:"deliverAt"`
			} `json:"results"`
		}
		if json.Unmarshal(raw, &r) != nil || len(r.Results) != 1 || r.Results[0].Status == "" {
			e.Bad = "timer schedule answered " + clip(raw)
			return
		}
		e.Status = r.Results[0].Status
		if at, err := time.Parse(time.RFC3339Nano, r.Results[0].DeliverAt); err == nil {
			e.At = at.UnixMilli()
		} else if e.Status == "scheduled" {
			e.Bad = "timer scheduled without a deliverAt: " + clip(raw)
		}
	})
}

// cancelTimer cancels a timer: cancelled (it will not fire), absent (it
// fired) or too_late (it is firing).
func (a *actor) cancelTimer(ctx context.Context, c, b int, t timerRef) {
	call := a.hist.Invoke(Event{Op: "timer-cancel", Client: c, Broker: b, VT: a.vt(), Tenant: t.tenant, Queue: TimerQueue, Partition: "Default", Txid: t.key})
	code, raw, err := a.cluster.Do(ctx, b, "DELETE", "/api/v1/timers/"+TimerQueue+"/"+url.PathEscape(t.key), t.tenant, nil)
	a.finish(call, "timer-cancel", b, code, err, func(e *Event) {
		var r struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(raw, &r) != nil || r.Status == "" {
			e.Bad = "timer cancel answered " + clip(raw)
			return
		}
		e.Status = r.Status
	})
}

// putKV puts a row that expires after ttl.
func (a *actor) putKV(ctx context.Context, c, b int, t kvRef, ttl time.Duration) {
	call := a.hist.Invoke(Event{Op: "kv-put", Client: c, Broker: b, VT: a.vt(), Tenant: t.tenant, Txid: t.key, LeaseSecs: int(ttl / time.Second)})
	body, _ := json.Marshal(map[string]any{"value": map[string]any{"k": t.key}, "ttlSeconds": ttl.Seconds()})
	code, raw, err := a.cluster.Do(ctx, b, "PUT", "/api/v1/kv/sim/"+url.PathEscape(t.key), t.tenant, body)
	a.finish(call, "kv-put", b, code, err, func(e *Event) {
		var r struct {
			Applied bool `json:"applied"`
		}
		if json.Unmarshal(raw, &r) != nil || !r.Applied {
			e.Bad = "kv put answered " + clip(raw)
		}
	})
}

// kvReads are the ways a row is read: every one must hide an expired row.
var kvReads = []string{"get", "getMany", "getPrefix"}

// getKV reads a row through one of kvReads: found or missing.
func (a *actor) getKV(ctx context.Context, c, b int, t kvRef, how string) {
	call := a.hist.Invoke(Event{Op: "kv-get", Client: c, Broker: b, VT: a.vt(), Tenant: t.tenant, Txid: t.key, What: how})
	if how == "get" {
		code, raw, err := a.cluster.Do(ctx, b, "GET", "/api/v1/kv/sim/"+url.PathEscape(t.key), t.tenant, nil)
		a.finish(call, "kv-get", b, code, err, func(e *Event) {
			var r struct {
				Found *bool `json:"found"`
			}
			if json.Unmarshal(raw, &r) != nil || r.Found == nil {
				e.Bad = "kv get answered " + clip(raw)
				return
			}
			e.Status = map[bool]string{true: "found", false: "missing"}[*r.Found]
		})
		return
	}
	op := map[string]any{"op": how, "ns": "sim"}
	if how == "getMany" {
		op["keys"] = []string{t.key}
	} else {
		op["prefix"] = t.key
	}
	body, _ := json.Marshal(map[string]any{"operations": []any{op}})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/kv", t.tenant, body)
	a.finish(call, "kv-get", b, code, err, func(e *Event) {
		var r struct {
			Results []struct {
				Rows []struct {
					Key string `json:"key"`
				} `json:"rows"`
			} `json:"results"`
		}
		if json.Unmarshal(raw, &r) != nil || len(r.Results) != 1 {
			e.Bad = "kv " + how + " answered " + clip(raw)
			return
		}
		e.Status = "missing"
		for _, row := range r.Results[0].Rows {
			if row.Key == t.key {
				e.Status = "found"
			}
		}
	})
}

// poisonEvery: one timer key in poisonEvery is a poison timer.
const poisonEvery = 17

// poisonTimer writes a timer whose fire PostgreSQL refuses every time (a
// txn of 3000 incompressible bytes, past the messages index's row limit),
// due now, straight into log_timers: a timer scheduled before the edge
// refused such a txn. It must not hold back the timers claimed with it;
// it fails for good after QUEEN_SWEEPER_MAX_ATTEMPTS and stays listed.
func (r *runner) poisonTimer(c, b int, tenant, key string) {
	br := r.cluster.Broker(b)
	if br == nil {
		return
	}
	call := r.hist.Invoke(Event{Op: "timer-poison", Client: c, Broker: b, VT: r.vt(), Tenant: tenant, Queue: TimerQueue, Partition: "Default", Txid: key})
	var now *time.Time
	if r.pg != nil {
		t := r.pg.Now()
		now = &t
	}
	_, err := br.Store().Pool().Exec(r.ctx, `INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload)
		VALUES ($1, $2, $3, 'Default', coalesce($4::timestamptz, now()), $5, gen_random_uuid(), 'null')`,
		tenant, TimerQueue, key, now, key+"-"+noise(r.o.Seed, len(key), pastIndexRows))
	k := KOK
	if err != nil {
		k = KInfo // the database may be out: it may or may not be there
	}
	r.hist.Add(Event{Kind: k, Call: call, Op: "timer-poison", Broker: b, VT: r.vt()})
}

// timerStep is one timer or KV operation of client c: schedule a timer
// (0-3 s ahead) or cancel one it scheduled; put a row with a 1-2 s ttl or
// read one it put.
func (r *runner) timerStep(pick func(int) int, c *client, b int, kv bool) {
	tenant := r.o.Tenants[pick(len(r.o.Tenants))]
	r.mu.Lock()
	r.nextTx++
	n := r.nextTx
	key := fmt.Sprintf("s%x-%s%d", r.o.Seed&0xffff, map[bool]string{true: "kv", false: "tm"}[kv], n)
	r.mu.Unlock()
	switch {
	case kv && len(c.kv) > 0 && pick(2) == 0:
		// Every way of reading, one after another: each must hide the
		// row once it expired.
		t := c.kv[pick(len(c.kv))]
		for _, how := range kvReads {
			r.act.getKV(r.ctx, c.id, b, t, how)
		}
	case kv:
		t := kvRef{tenant, key}
		r.act.putKV(r.ctx, c.id, b, t, time.Duration(1+pick(2))*time.Second)
		c.kv = append(c.kv, t)
	case !kv && n%poisonEvery == 9:
		// The counter picks it, so the seed's stream is unchanged.
		r.poisonTimer(c.id, b, tenant, key)
	case len(c.timers) > 0 && pick(4) == 0:
		i := pick(len(c.timers))
		r.act.cancelTimer(r.ctx, c.id, b, c.timers[i])
		c.timers = append(c.timers[:i], c.timers[i+1:]...)
	default:
		key = r.timerEdges(c, b, tenant, key)
		r.act.scheduleTimer(r.ctx, c.id, b, tenant, key, time.Duration(pick(3000))*time.Millisecond)
		c.timers = append(c.timers, timerRef{tenant, key})
	}
}
