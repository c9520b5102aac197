package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// The edges of the routes beside the push (issue 29): transactions, timer
// schedules and stream cycles get values at and past the limits table
// (queen/limits) too. At the limit a request behaves as any other; past it
// the broker must refuse it as a whole (4xx, naming the field), store
// nothing from it and apply none of it (a transaction's ack, a cycle's
// state and ack). The requests past a limit are extra requests beside the
// workload's, chosen by counters mixed with the seed, never by the
// workload's stream: every other choice of a seed stays as it was, and a
// refused request changes nothing the workload sees.
const (
	edgePartition = "partition-past-limit"
	edgeAckGroup  = "ack-group-past-limit"
	edgeTimerKey  = "timerKey-past-limit"
	edgeDelay     = "delayMs-past-limit"
	edgeStateKey  = "state-key-past-limit"
	edgeAckTxid   = "ack-txid-past-limit"

	// edgeTxnEvery: one pop in edgeTxnEvery that leaves its client holding
	// a batch is followed by a transaction past a limit acking the batch's
	// first message (the client keeps holding it).
	edgeTxnEvery = 5
	// edgeTimerEvery: one timer schedule in edgeTimerEvery is preceded by
	// one past a limit, and one in edgeTimerEvery (another) is at the
	// timerKey limit.
	edgeTimerEvery = 3
	// edgeCycleEvery: one stream cycle in edgeCycleEvery is preceded by a
	// cycle of the same batch past a limit.
	edgeCycleEvery = 2

	timerKeyLimit = 512
)

// edgeRoutes counts the requests the route edges were chosen among
// (guarded by runner.mu).
type edgeRoutes struct {
	heldPops, txns, schedules, cycles int
}

// edgeField is the wire name a refusal of edge must name.
var edgeField = map[string]string{
	edgeTxid: "transactionId", edgeQueue: "queue", edgeNumber: "payload", edgePartition: "partition",
	edgeAckGroup: "consumerGroup", edgeTimerKey: "timerKey", edgeDelay: "delayMs", edgeStateKey: "key",
	edgeAckTxid: "transactionId",
}

// edgePick chooses among kinds by the counter n, in turn from an offset
// the seed chooses.
func (r *runner) edgePick(n int, salt uint64, kinds []string) string {
	return kinds[(n+int(mix64(r.o.Seed^salt)%uint64(len(kinds))))%len(kinds)]
}

// txnEdgeOf is the edge a workload transaction's fresh key k is: a key
// the counter made past a limit, or (every other transaction) one whose
// transactionId is padded to exactly its limit.
func (r *runner) txnEdgeOf(k Key) (Key, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.edgeN.txns++
	if edge := r.edges[k]; edge != "" {
		return k, edge
	}
	if r.edgeN.txns%2 == 1 && len(k.Txid) < txidLimit-8 {
		was := k
		k.Txid = atLimit(k.Txid, r.o.Seed, 1<<20+r.edgeN.txns)
		// A later push may resend it (ReusePct): the padded key, as sent.
		for i := len(r.pushed) - 1; i >= 0 && i >= len(r.pushed)-64; i-- {
			if r.pushed[i] == was {
				r.pushed[i] = k
				break
			}
		}
	}
	return k, ""
}

// edgeTxnAfterPop follows a pop that left c holding h, on the counter,
// with a transaction past a limit: push a fresh key of h's queue and ack
// h's first message. It must be refused as a whole; c still holds h and
// acks it later as it would have.
func (r *runner) edgeTxnAfterPop(c *client, b int, h *held) {
	r.mu.Lock()
	r.edgeN.heldPops++
	n := r.edgeN.heldPops
	r.mu.Unlock()
	if n%edgeTxnEvery != 1 {
		return
	}
	edge := r.edgePick(n/edgeTxnEvery, 0x7478, []string{edgeQueue, edgePartition, edgeTxid, edgeNumber, edgeAckGroup})
	k := Key{Tenant: h.tenant, Q: h.q, P: "p0", Txid: fmt.Sprintf("s%x-etx%d", r.o.Seed&0xffff, n)}
	if edge == edgePartition {
		k.P += "-" + noise(r.o.Seed, n, pastIndexRows)
	} else if edge != edgeAckGroup {
		k = pastLimit(k, edge, r.o.Seed, n)
	}
	r.act.txnAs(r.ctx, c.id, b, k, h, edge, noise(r.o.Seed, n, pastIndexRows))
}

// txnAs is txn with its edge recorded in What and applied: a number past
// numeric's range in the pushed payload, or a consumer group past its
// limit (pad) in the ack.
func (a *actor) txnAs(ctx context.Context, c, b int, k Key, h *held, edge, pad string) {
	m := h.msgs[0]
	ops := []Msg{{Op: "push", Tenant: k.Tenant, Queue: k.Q, Partition: k.P, Txid: k.Txid},
		{Op: "ack", Tenant: m.Tenant, Queue: m.Queue, Partition: m.Partition, Txid: m.Txid, Lease: m.Lease, Status: "completed"}}
	call := a.hist.Invoke(Event{Op: "txn", Client: c, Broker: b, VT: a.vt(), Tenant: k.Tenant, Group: h.g, Msgs: ops, What: edge})
	var group any
	if h.g != "" {
		group = h.g
	}
	if edge == edgeAckGroup {
		group = h.g + "-" + pad
	}
	body, _ := json.Marshal(map[string]any{"operations": []any{
		map[string]any{"type": "push", "items": []any{map[string]any{"queue": k.Q, "partition": k.P, "transactionId": k.Txid, "payload": writtenPayload(k.Txid)}}},
		map[string]any{"type": "ack", "transactionId": m.Txid, "partitionId": m.PID, "consumerGroup": group, "leaseId": m.Lease},
	}, "requiredLeases": []string{m.Lease}})
	if edge == edgeNumber {
		body = []byte(strings.Replace(string(body), `"payload":{"sum":`, `"payload":{"n":1e200000,"sum":`, 1))
	}
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/transaction", k.Tenant, body)
	a.finishEdge(call, "txn", b, code, raw, err, edge, func(e *Event) {
		var res struct {
			Success bool `json:"success"`
		}
		if json.Unmarshal(raw, &res) == nil && res.Success {
			e.Status = "committed"
		} else {
			e.Status = "rolledback"
		}
	})
}

// finishEdge is finish for a request that may be past a limit: a refusal
// of one that does not name the field is recorded with Status
// edgeUnnamed.
func (a *actor) finishEdge(call int, op string, b, code int, raw []byte, err error, edge string, fill func(*Event)) {
	if edge == "" || edge == edgeAtLimit || outcome(code, err) != KFail {
		a.finish(call, op, b, code, err, fill)
		return
	}
	e := Event{Kind: KFail, Call: call, Op: op, Broker: b, VT: a.vt(), Code: code, Err: fmt.Sprint(code)}
	if f := edgeField[edge]; len(raw) > 0 && !strings.Contains(string(raw), f) {
		e.Status = edgeUnnamed
	}
	a.hist.Add(e)
}

// edgeUnnamed is the Status of a refusal that did not name its field.
const edgeUnnamed = "unnamed"

// timerEdges runs before the schedule of key: on the counter, one
// schedule past a limit first; and the key, on the counter, padded to
// the timerKey limit (it is its txn too).
func (r *runner) timerEdges(c *client, b int, tenant, key string) string {
	r.mu.Lock()
	r.edgeN.schedules++
	n := r.edgeN.schedules
	r.mu.Unlock()
	switch n % edgeTimerEvery {
	case 1:
		edge := r.edgePick(n/edgeTimerEvery, 0x746d, []string{edgeTimerKey, edgeQueue, edgePartition, edgeTxid, edgeNumber, edgeDelay})
		r.scheduleEdge(c.id, b, tenant, key+"-x", edge, noise(r.o.Seed, 1<<21+n, pastIndexRows))
	case 2:
		return key + "-" + noise(r.o.Seed, 1<<22+n, timerKeyLimit-len(key)-1)
	}
	return key
}

// scheduleEdge schedules a timer with one field past its limit: it must
// be refused, and never fire.
func (r *runner) scheduleEdge(c, b int, tenant, key, edge, pad string) {
	a := r.act
	op := map[string]any{"op": "schedule", "queue": TimerQueue, "timerKey": key, "txn": key, "partition": "Default",
		"delayMs": 100, "payload": map[string]any{"timer": key}}
	k := Key{Tenant: tenant, Q: TimerQueue, P: "Default", Txid: key}
	switch edge {
	case edgeTimerKey:
		op["timerKey"] = key + "-" + pad
	case edgeQueue:
		k.Q += "-" + pad
		op["queue"] = k.Q
	case edgePartition:
		k.P += "-" + pad
		op["partition"] = k.P
	case edgeTxid:
		k.Txid += "-" + pad
		op["txn"] = k.Txid
	case edgeDelay:
		op["delayMs"] = 1e300
	}
	call := a.hist.Invoke(Event{Op: "timer", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: k.Q, Partition: k.P, Txid: k.Txid, What: edge})
	body, _ := json.Marshal([]any{op})
	if edge == edgeNumber {
		body = []byte(strings.Replace(string(body), `"payload":{`, `"payload":{"n":1e200000,`, 1))
	}
	code, raw, err := a.cluster.Do(r.ctx, b, "POST", "/api/v1/timers", tenant, body)
	a.finishEdge(call, "timer", b, code, raw, err, edge, func(e *Event) {
		var res struct {
			Results []struct {
				Status    string `json:"status"`
				DeliverAt string `json:"deliverAt"`
			} `json:"results"`
		}
		if json.Unmarshal(raw, &res) == nil && len(res.Results) == 1 {
			e.Status = res.Results[0].Status
			if at, err := time.Parse(time.RFC3339Nano, res.Results[0].DeliverAt); err == nil {
				e.At = at.UnixMilli()
			}
		}
	})
}

// cycleEdge runs before the cycle of h: on the counter, a cycle of the
// same batch with one field past its limit (the sink push's partition or
// queue, the state key, the ack's transactionId). It must be refused and
// commit nothing: no state, no sink message, no ack.
func (r *runner) cycleEdge(c *client, b int, query string, h *streamBatch) {
	r.mu.Lock()
	r.edgeN.cycles++
	n := r.edgeN.cycles
	r.mu.Unlock()
	if n%edgeCycleEvery != 1 || len(h.txids) == 0 {
		return
	}
	edge := r.edgePick(n/edgeCycleEvery, 0x6379, []string{edgePartition, edgeQueue, edgeStateKey, edgeAckTxid, edgeNumber})
	pad := noise(r.o.Seed, 1<<23+n, pastIndexRows)
	cycleID := fmt.Sprintf("s%x-ecyc%d", r.o.Seed&0xffff, n)
	a := r.act
	msgs := make([]Msg, len(h.txids))
	for i, t := range h.txids {
		msgs[i] = Msg{Tenant: h.tenant, Queue: StreamSource, Partition: h.partition, Txid: t, Lease: h.lease}
	}
	call := a.hist.Invoke(Event{Op: "stream-cycle", Client: c.id, Broker: b, VT: a.vt(), Tenant: h.tenant, Queue: StreamSource, Partition: h.partition,
		Txid: cycleID, Lease: h.lease, Msgs: msgs, What: edge})
	item := map[string]any{"queue": StreamSink, "partition": h.partition, "payload": map[string]any{"cycle": cycleID, "ids": h.txids}}
	stateKey, ackTxid := streamKey, h.txids[len(h.txids)-1]
	switch edge {
	case edgePartition:
		item["partition"] = h.partition + "-" + pad
	case edgeQueue:
		item["queue"] = StreamSink + "-" + pad
	case edgeStateKey:
		stateKey += "-" + pad
	case edgeAckTxid:
		ackTxid += "-" + pad
	}
	body, _ := json.Marshal(map[string]any{"query_id": query, "partition_id": h.pid, "consumer_group": StreamGroup,
		"state_ops":     []any{map[string]any{"type": "upsert", "key": stateKey, "value": streamValue{IDs: h.txids, N: len(h.txids)}}},
		"push_items":    []any{item},
		"ack":           map[string]any{"transactionId": ackTxid, "leaseId": h.lease, "status": "completed", "count": len(h.txids)},
		"release_lease": true})
	if edge == edgeNumber {
		body = []byte(strings.Replace(string(body), `"payload":{`, `"payload":{"n":1e200000,`, 1))
	}
	code, raw, err := a.cluster.Do(r.ctx, b, "POST", "/streams/v1/cycle", h.tenant, body)
	a.finishEdge(call, "stream-cycle", b, code, raw, err, edge, func(e *Event) {
		var res struct {
			Success *bool `json:"success"`
		}
		if json.Unmarshal(raw, &res) == nil && res.Success != nil && *res.Success {
			e.Status = "committed"
		} else {
			e.Status = "rejected"
		}
	})
}

// edgesFired counts the requests past a limit, per operation, that were
// refused (edge.<op>.refused): the run's report shows which routes' edges
// it reached.
func edgesFired(h []Event, fired map[string]int) {
	for _, c := range calls(h) {
		if refusedEdge(c) {
			fired["edge."+c.in.Op+".refused"]++
		}
	}
}

// refusedEdge: c was past a limit and refused (4xx), so none of it
// applied.
func refusedEdge(c *call) bool {
	return edgeOps[c.in.Op] && c.in.What != "" && c.in.What != edgeAtLimit && c.done != nil && c.done.Kind == KFail
}

// refusedTxnAcks: a transaction refused past a limit is atomic, so its
// ack did not apply either. Its client still holds the message; the
// first operation after it that names the message in its group, when it
// is an ack sent while the lease was still live and answered "already
// committed" (the group's cursor past it), shows the refused transaction
// completed it: nothing else could have in between. Queues that evict
// are left out (eviction moves cursors).
func refusedTxnAcks(h []Event, s Spec) []Violation {
	type ref struct {
		key   Key
		group string
		at    int // the refusal's event index
		what  string
		until int64 // the lease's end, as first granted, less a second
	}
	granted := map[string]int64{} // lease -> its end as its pop was invoked
	var open []ref
	var out []Violation
	names := func(c *call, r ref) bool {
		if c.in.Foreign || groupOf(c.in.Group) != r.group {
			return false
		}
		if c.in.Op == "pop" && c.done != nil {
			for _, m := range c.done.Msgs {
				if k := m.Key(); k == r.key || (k.Tenant == "" && Key{c.in.Tenant, k.Q, k.P, k.Txid} == r.key) {
					return true
				}
			}
			return false
		}
		if c.in.Op != "ack" && c.in.Op != "txn" {
			return false
		}
		for _, m := range c.in.Msgs {
			if m.Op != "push" && m.Key() == r.key {
				return true
			}
		}
		return false
	}
	for _, c := range calls(h) {
		if c.in.Op == "pop" && c.ok() {
			for _, m := range c.done.Msgs {
				if _, ok := granted[m.Lease]; !ok && m.Lease != "" {
					granted[m.Lease] = c.in.VT + int64(c.in.LeaseSecs)*1000
				}
			}
		}
		keep := open[:0]
		for _, r := range open {
			if c.in.Index < r.at || !names(c, r) {
				keep = append(keep, r)
				continue
			}
			if c.in.Op == "ack" && c.ok() && c.in.VT <= r.until {
				for _, m := range c.done.Msgs {
					if m.Key() == r.key && !m.OK && m.Err == store.ErrAlreadyCommitted {
						out = append(out, Violation{"edges", fmt.Sprintf("a transaction past a limit (%s) was refused (event %d), yet its ack applied: the next ack of %.60s in group %s was answered %q (event %d)",
							r.what, r.at, r.key, r.group, m.Err, c.done.Index)})
					}
				}
			}
		}
		open = keep
		if c.in.Op == "txn" && refusedEdge(c) && !c.in.Foreign {
			for _, m := range c.in.Msgs {
				if end, ok := granted[m.Lease]; ok && m.Op == "ack" && s.MaxWaitMS[m.Queue] == 0 {
					open = append(open, ref{m.Key(), groupOf(c.in.Group), c.done.Index, c.in.What, end - 1000})
				}
			}
		}
	}
	return out
}
