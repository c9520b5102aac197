package sim

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// StaleProbeQueue prefixes the queues the stale-cache probes use, one per
// try; no simulated client touches them.
const StaleProbeQueue = "sim-stale"

// staleGroup is the consumer group a stale-cache probe reads with.
const staleGroup = "sim-stale-g"

// probeStales (cache.stale, free-running) deletes a queue through one
// broker while every mesh frame that broker sends is lost (the mesh down,
// or the invalidation frame dropped), so another broker, the stale one,
// keeps whatever it cached of the old queue: a partition id from a push
// and a transaction into it, a consumer group's subscription from a pop.
// Then, through the stale broker only, a transaction and a plain push
// create the queue again, and the group long-polls it. The transaction
// must commit (not "a partition was deleted during the transaction"), and
// the group must get both messages, promptly: a stale cache may cost one
// retry, never a failure or a wait for the cache's lifetime. Each judged
// probe is a KProbe event (What "stale"; CheckRecreates judges it).
func (r *runner) probeStales(f FaultAt) {
	tenant := r.probeTenant()
	r.retryProbe(f, &r.staleProbes, func(try, deleter, stale int) (Event, bool) {
		return r.probeStale(tenant, deleter, stale, fmt.Sprintf("%s-%d", StaleProbeQueue, try))
	})
}

// probeStale runs one probe; ok is false when it could not be judged,
// with the reason in the event's Err.
func (r *runner) probeStale(tenant string, deleter, stale int, queue string) (Event, bool) {
	e := Event{Kind: KProbe, What: "stale", Broker: stale, Tenant: tenant, Queue: queue, Group: staleGroup}
	starve := func(format string, args ...any) (Event, bool) {
		e.Err = fmt.Sprintf(format, args...)
		return e, false
	}
	if !r.cluster.Up(deleter) || !r.cluster.Up(stale) {
		return starve("broker %d or %d was down", deleter, stale)
	}
	// The stale broker caches the old queue every way the workload can.
	if err := r.probePush(tenant, stale, queue, queue+"-before-push"); err != nil {
		return starve("%v", err)
	}
	if bad, err := r.probeTxn(tenant, stale, queue, queue+"-before-txn"); err != nil || bad != "" {
		return starve("before the delete: %v%s", err, bad)
	}
	if _, err := r.probeGroupPop(tenant, stale, queue, false); err != nil {
		return starve("%v", err)
	}
	// The deleter's frames are lost from now on: the stale broker never
	// hears of the delete.
	r.cluster.Mesh().Drop(deleter, recreateWait+5*time.Second)
	code, raw, err := r.cluster.Do(r.ctx, deleter, "DELETE", "/api/v1/resources/queues/"+url.PathEscape(queue), tenant, nil)
	if err != nil || code >= 300 {
		return starve("delete on broker %d answered %d %s %v", deleter, code, clip(raw), err)
	}
	after := []string{queue + "-after-push", queue + "-after-txn"}
	pushed := time.Now()
	bad, err := r.probeTxn(tenant, stale, queue, after[1])
	if err != nil {
		return starve("%v", err)
	}
	e.Bad = bad
	if err := r.probePush(tenant, stale, queue, after[0]); err != nil {
		return starve("%v", err)
	}
	want := after
	if bad != "" {
		want = after[:1] // the transaction stored nothing
	}
	e.Txid = strings.Join(want, ",")
	var got []string
	for deadline := pushed.Add(recreateWait); len(got) < len(want) && time.Now().Before(deadline); {
		txids, err := r.probeGroupPop(tenant, stale, queue, true)
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

// probeTxn sends a transaction of one push through broker b. bad says
// how a valid transaction was refused (an answer other than 5xx without
// success); err is for answers that leave it undecided (5xx, transport),
// for which the probe cannot be judged.
func (r *runner) probeTxn(tenant string, b int, queue, txid string) (bad string, err error) {
	body, _ := json.Marshal(map[string]any{"operations": []any{map[string]any{"type": "push", "items": []any{
		map[string]any{"queue": queue, "partition": "p", "transactionId": txid, "payload": map[string]any{"probe": txid}}}}}})
	code, raw, err := r.cluster.Do(r.ctx, b, "POST", "/api/v1/transaction", tenant, body)
	if err != nil || code >= 500 {
		return "", fmt.Errorf("transaction of %s on broker %d answered %d %s %v", txid, b, code, clip(raw), err)
	}
	var res struct {
		Success bool `json:"success"`
	}
	if json.Unmarshal(raw, &res) != nil || !res.Success {
		return fmt.Sprintf("transaction of %s on broker %d answered %d %s", txid, b, code, clip(raw)), nil
	}
	return "", nil
}

// probeGroupPop pops staleGroup through broker b: when wait, a long poll
// of at most a second for up to ten, acknowledged on delivery; otherwise
// one, under a lease (which subscribes the group and caches it).
func (r *runner) probeGroupPop(tenant string, b int, queue string, wait bool) ([]string, error) {
	return r.probePopAs(tenant, b, queue, staleGroup, wait)
}
