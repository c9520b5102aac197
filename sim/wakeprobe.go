package sim

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// WakeProbeQueue prefixes the queues the wake probes use, one per try; no
// simulated client touches them, so nothing but the probe's own push (not
// an earlier try's, buffered and replayed late) can satisfy its poll.
const WakeProbeQueue = "sim-wake-probe"

// wakeProbeTimeout is a probe poll's timeout: far past the periodic floor
// (PopWaitMax plus wakeSlackMS), so a poll that sleeps until it is woken
// answers after it, not within it.
const wakeProbeTimeout = 10 * time.Second

// probeBudget bounds how long a probe keeps trying: far past the outages,
// restarts, crashes and spool catch-ups a free-running run schedules, on a
// loaded machine (a probe that met one is tried again half a second later).
const probeBudget = 3 * time.Minute

// probeWakes (wake.probe, free-running) measures what a lost wake costs.
// With every mesh frame dropped, a long poll parks on one broker and a
// message is pushed through another, whose in-process wake cannot reach
// it: the poll must still answer with the message within the periodic
// floor. Each probe is recorded as a KProbe event (CheckWakes judges it);
// one that met an outage, a stopped broker or a poll ended early (a
// graceful stop answers parked polls at once) is noted as starved and tried
// again half a second later, until f.Count probes were judged or
// probeBudget passed.
func (r *runner) probeWakes(f FaultAt) {
	tenant := ""
	if len(r.o.Tenants) > 0 {
		tenant = r.o.Tenants[0]
	}
	r.retryProbe(f, &r.wakeProbes, func(try, poller, pusher int) (Event, bool) {
		return r.probeWake(tenant, poller, pusher, fmt.Sprintf("%s-%d", WakeProbeQueue, try))
	})
}

// retryProbe runs one probe after another, between a broker (f.Broker,
// then the next at each try) and the one after it, until f.Count were
// judged or probeBudget passed, half a second apart. A judged probe's
// event goes into the history and is counted in judged; a starved one's
// reason is kept for the report.
func (r *runner) retryProbe(f FaultAt, judged *atomic.Int64, probe func(try, first, second int) (Event, bool)) {
	want := max(f.Count, 1)
	deadline := time.Now().Add(probeBudget)
	for try, n := 0, 0; n < want && time.Now().Before(deadline) && r.ctx.Err() == nil; try++ {
		if try > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		first := (max(f.Broker, 0) + try) % r.o.Brokers
		e, ok := probe(try, first, (first+1)%r.o.Brokers)
		if ok {
			r.hist.Add(e)
			n++
			judged.Add(1)
			continue
		}
		r.pmu.Lock()
		r.probeStarved = append(r.probeStarved, f.Kind+": "+e.Err)
		r.pmu.Unlock()
	}
}

// probeWake runs one probe; ok is false when it could not be judged (the
// push was not committed at once, or a broker or the database was away),
// with the reason in the event's Err.
func (r *runner) probeWake(tenant string, poller, pusher int, queue string) (Event, bool) {
	txid := queue
	e := Event{Kind: KProbe, What: "wake", Broker: poller, Tenant: tenant, Queue: queue, Txid: txid}
	if !r.cluster.Up(poller) || !r.cluster.Up(pusher) {
		e.Err = fmt.Sprintf("broker %d or %d was down", poller, pusher)
		return e, false
	}
	r.cluster.Mesh().Drop(-1, wakeProbeTimeout+2*time.Second)
	type answer struct {
		code int
		raw  []byte
		err  error
		at   time.Time
	}
	polled := make(chan answer, 1)
	path := "/api/v1/pop/queue/" + url.PathEscape(queue) + "?" + url.Values{"batch": {"1"}, "autoAck": {"true"},
		"wait": {"true"}, "timeout": {fmt.Sprint(wakeProbeTimeout.Milliseconds())}}.Encode()
	polling := time.Now()
	go func() {
		code, raw, err := r.cluster.Do(r.ctx, poller, "GET", path, tenant, nil)
		polled <- answer{code, raw, err, time.Now()}
	}()
	// Let the poll park (its first empty check) before the push: a push
	// that comes first is found at once, which proves nothing but costs
	// nothing either.
	time.Sleep(300 * time.Millisecond)
	body, _ := json.Marshal(map[string]any{"items": []any{map[string]any{
		"queue": queue, "partition": "p", "transactionId": txid, "payload": map[string]any{"probe": txid}}}})
	code, raw, err := r.cluster.Do(r.ctx, pusher, "POST", "/api/v1/push", tenant, body)
	pushed := time.Now()
	got := <-polled
	switch {
	case err != nil || code != 201 || !strings.Contains(string(raw), `"queued"`):
		e.Err = fmt.Sprintf("push on broker %d answered %d %s %v", pusher, code, clip(raw), err)
		return e, false
	case got.err != nil || got.code >= 500:
		e.Err = fmt.Sprintf("poll on broker %d answered %d %s %v", poller, got.code, clip(got.raw), got.err)
		return e, false
	case got.code == 204 && got.at.Sub(polling) < wakeProbeTimeout-time.Second:
		// A parked poll answered empty before its timeout: its broker
		// stopped gracefully or paused pops, which is what it should
		// do; a lost wake shows as a late answer or an empty one at the
		// timeout.
		e.Err = fmt.Sprintf("poll on broker %d answered 204 after %v, before its timeout (a graceful stop?)", poller, got.at.Sub(polling).Round(time.Millisecond))
		return e, false
	}
	e.VT, e.Code = r.vt(), got.code
	e.Until = max(got.at.Sub(pushed).Milliseconds(), 0)
	var res struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
		} `json:"messages"`
	}
	if json.Unmarshal(got.raw, &res) == nil && len(res.Messages) == 1 {
		e.Status = res.Messages[0].TransactionID
	}
	return e, true
}
