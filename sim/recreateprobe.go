package sim

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// RecreateProbeQueue prefixes the queues the re-create probes use, one per
// try; no simulated client touches them.
const RecreateProbeQueue = "sim-recreate"

// recreateWait bounds how long a re-create probe polls for what was pushed
// after the delete: far past recreateSlackMS, far short of the process
// caches' lifetime (QUEEN_CACHE_REFRESH_INTERVAL_MS, 60 s), so a cache
// that outlived the delete shows.
const recreateWait = 10 * time.Second

// probeRecreates (queue.recreate, free-running) deletes a queue both
// brokers had cached and creates it again by pushing. Before the delete,
// one broker (the deleter) pushed and popped it and another pushed it, so
// each holds its partition id and the deleter its subscription. After,
// both push again and the deleter polls: it must deliver exactly what was
// pushed after the delete, promptly, and nothing from before it. Each
// judged probe is a KProbe event (What "recreate"; CheckRecreates judges
// it); one that met a stopped broker or an outage is starved and tried
// again, like a wake probe.
func (r *runner) probeRecreates(f FaultAt) {
	tenant := r.probeTenant()
	r.retryProbe(f, &r.recreateProbes, func(try, deleter, other int) (Event, bool) {
		return r.probeRecreate(tenant, deleter, other, fmt.Sprintf("%s-%d", RecreateProbeQueue, try))
	})
}

// probeRecreate runs one probe; ok is false when it could not be judged,
// with the reason in the event's Err.
func (r *runner) probeRecreate(tenant string, deleter, other int, queue string) (Event, bool) {
	e := Event{Kind: KProbe, What: "recreate", Broker: deleter, Tenant: tenant, Queue: queue}
	if !r.cluster.Up(deleter) || !r.cluster.Up(other) {
		e.Err = fmt.Sprintf("broker %d or %d was down", deleter, other)
		return e, false
	}
	starve := func(format string, args ...any) (Event, bool) {
		e.Err = fmt.Sprintf(format, args...)
		return e, false
	}
	before := []string{queue + "-before-a", queue + "-before-b"}
	after := []string{queue + "-after-a", queue + "-after-b"}
	for i, b := range []int{deleter, other} {
		if err := r.probePush(tenant, b, queue, before[i]); err != nil {
			return starve("%v", err)
		}
	}
	// The deleter pops one under a lease (and so subscribes, and caches
	// the subscription); the other stays pending. Neither may come back.
	if _, err := r.probePop(tenant, deleter, queue, false); err != nil {
		return starve("%v", err)
	}
	code, raw, err := r.cluster.Do(r.ctx, deleter, "DELETE", "/api/v1/resources/queues/"+url.PathEscape(queue), tenant, nil)
	if err != nil || code >= 300 {
		return starve("delete on broker %d answered %d %s %v", deleter, code, clip(raw), err)
	}
	for i, b := range []int{deleter, other} {
		if err := r.probePush(tenant, b, queue, after[i]); err != nil {
			return starve("%v", err)
		}
	}
	pushed := time.Now()
	e.Txid = strings.Join(after, ",")
	var got []string
	for deadline := pushed.Add(recreateWait); len(got) < len(after) && time.Now().Before(deadline); {
		txids, err := r.probePop(tenant, deleter, queue, true)
		if err != nil {
			return starve("%v", err)
		}
		got = append(got, txids...)
	}
	e.VT, e.Until = r.vt(), time.Since(pushed).Milliseconds()
	slices.Sort(got)
	e.Status = strings.Join(got, ",")
	return e, true
}

// probePush pushes one message; an answer other than queued is an error
// (the probe cannot be judged).
func (r *runner) probePush(tenant string, b int, queue, txid string) error {
	body, _ := json.Marshal(map[string]any{"items": []any{map[string]any{
		"queue": queue, "partition": "p", "transactionId": txid, "payload": map[string]any{"probe": txid}}}})
	code, raw, err := r.cluster.Do(r.ctx, b, "POST", "/api/v1/push", tenant, body)
	if err != nil || code != 201 || !strings.Contains(string(raw), `"queued"`) {
		return fmt.Errorf("push of %s on broker %d answered %d %s %v", txid, b, code, clip(raw), err)
	}
	return nil
}

// probePop pops through broker b and returns the transactionIds it got:
// when wait, a long poll of at most a second for up to ten, acknowledged
// on delivery; otherwise one, under a lease.
func (r *runner) probePop(tenant string, b int, queue string, wait bool) ([]string, error) {
	return r.probePopAs(tenant, b, queue, "", wait)
}

// probePopAs is probePop as consumer group group ("": queue mode).
func (r *runner) probePopAs(tenant string, b int, queue, group string, wait bool) ([]string, error) {
	v := url.Values{"batch": {"1"}}
	if wait {
		v = url.Values{"batch": {"10"}, "autoAck": {"true"}, "wait": {"true"}, "timeout": {"1000"}}
	}
	who := ""
	if group != "" {
		v.Set("consumerGroup", group)
		who = " by " + group
	}
	code, raw, err := r.cluster.Do(r.ctx, b, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+v.Encode(), tenant, nil)
	if err != nil || (code != 200 && code != 204) {
		return nil, fmt.Errorf("pop of %s%s on broker %d answered %d %s %v", queue, who, b, code, clip(raw), err)
	}
	var res struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
		} `json:"messages"`
	}
	if code == 200 {
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("pop of %s on broker %d answered %d %s", queue, b, code, clip(raw))
		}
	}
	var out []string
	for _, m := range res.Messages {
		out = append(out, m.TransactionID)
	}
	return out, nil
}

// probeTenant is the tenant probes run under: the last of the run's
// tenants, or the default one.
func (r *runner) probeTenant() string {
	if len(r.o.Tenants) == 0 {
		return ""
	}
	return r.o.Tenants[len(r.o.Tenants)-1]
}
