package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// held is a batch a simulated consumer holds under a lease.
type held struct {
	tenant, q, g, lease string
	msgs                []Msg
	// until is the latest its lease may end (lockstep: the pop's answer
	// plus the lease, pushed out by renewals), and lateDone that it had
	// its late extend (Weights.LateExtendPct).
	until    int64
	lateDone bool
}

// actor performs operations against the cluster and records them.
type actor struct {
	cluster *Cluster
	hist    *History
	vt      func() int64
}

// outcome classifies an HTTP answer: 2xx ok, 4xx fail (it did not happen),
// anything else info (it may have happened).
func outcome(code int, err error) string {
	switch {
	case err != nil || code == 0:
		return KInfo
	case code >= 200 && code < 300:
		return KOK
	case code >= 400 && code < 500:
		return KFail
	}
	return KInfo
}

func (a *actor) finish(call int, op string, b int, code int, err error, fill func(*Event)) string {
	k := outcome(code, err)
	e := Event{Kind: k, Call: call, Op: op, Broker: b, VT: a.vt(), Code: code}
	if err != nil {
		e.Code = 0
	}
	if k == KOK && fill != nil {
		fill(&e)
	} else if k != KOK {
		e.Err = strconv.Itoa(code)
		if err != nil {
			e.Err = "transport"
		}
	}
	a.hist.Add(e)
	return k
}

func (a *actor) push(ctx context.Context, c, b int, k Key) {
	call := a.hist.Invoke(Event{Op: "push", Client: c, Broker: b, VT: a.vt(), Tenant: k.Tenant, Queue: k.Q, Partition: k.P, Txid: k.Txid})
	body, _ := json.Marshal(map[string]any{"items": []any{map[string]any{
		"queue": k.Q, "partition": k.P, "transactionId": k.Txid, "payload": map[string]any{"sum": k.Txid}}}})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/push", k.Tenant, body)
	a.finish(call, "push", b, code, err, func(e *Event) {
		var res []struct {
			Index         int    `json:"index"`
			Status        string `json:"status"`
			Queue         string `json:"queueName"`
			TransactionID string `json:"transactionId"`
			MessageID     string `json:"messageId"`
		}
		if json.Unmarshal(raw, &res) == nil && len(res) == 1 && res[0].Status != "" {
			e.Status, e.MsgID = res[0].Status, res[0].MessageID
			if r := res[0]; r.Index != 0 || r.Queue != k.Q || r.TransactionID != k.Txid {
				e.Bad = fmt.Sprintf("push of %s answered another item: index %d, queue %q, transactionId %q", k, r.Index, r.Queue, r.TransactionID)
			}
			return
		}
		e.Bad = fmt.Sprintf("push answered %d with %q", code, clip(raw))
	})
}

// sealedEnvelope reports a payload that is an encryption envelope: a
// consumer must never be handed one (encryption at rest is the broker's).
func sealedEnvelope(data json.RawMessage) bool {
	var env struct {
		Encrypted *string `json:"encrypted"`
		IV        *string `json:"iv"`
		AuthTag   *string `json:"authTag"`
	}
	return json.Unmarshal(data, &env) == nil && env.Encrypted != nil && env.IV != nil && env.AuthTag != nil
}

// clip shortens a body for a violation message.
func clip(raw []byte) string {
	if len(raw) > 80 {
		return string(raw[:80]) + "..."
	}
	return string(raw)
}

// pop returns the batch it got, if any.
// pop pops a batch; waitMS > 0 makes it a long poll of that timeout.
func (a *actor) pop(ctx context.Context, c, b int, tenant string, q QueueSpec, g string, batch int, autoAck bool, waitMS int) *held {
	status := ""
	if autoAck {
		status = "autoack"
	}
	grp := wireGroup(g)
	call := a.hist.Invoke(Event{Op: "pop", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: q.Name, Group: grp, LeaseSecs: q.LeaseSecs, Status: status})
	v := url.Values{"batch": {strconv.Itoa(batch)}}
	if grp != "" {
		v.Set("consumerGroup", grp)
	}
	if autoAck {
		v.Set("autoAck", "true")
	}
	if waitMS > 0 {
		v.Set("wait", "true")
		v.Set("timeout", strconv.Itoa(waitMS))
	}
	code, raw, err := a.cluster.Do(ctx, b, "GET", "/api/v1/pop/queue/"+url.PathEscape(q.Name)+"?"+v.Encode(), tenant, nil)
	return a.finishPop(call, b, code, raw, err, tenant, q, grp, autoAck)
}

// popLeaving is a pop whose client goes away while the broker is claiming
// (lockstep: at its first read of database time; free-running: after
// wait, a short client timeout): recorded as an answer lost to a cancel
// ("cancelled"). The
// broker must give back whatever it claimed at once, so the partition is
// claimable again within the slack counted from the cancel, not from the
// end of a lease nobody knows.
//
// With autoAck there is no lease to give back: the broker must not
// consume what it cannot deliver (no-loss holds it to that, since a
// cancelled pop is not an answer merely lost on the way).
func (a *actor) popLeaving(ctx context.Context, c, b int, tenant string, q QueueSpec, g string, batch int, wait time.Duration, autoAck bool) {
	grp := g
	if g == QueueMode {
		grp = ""
	}
	status := ""
	if autoAck {
		status = "autoack"
	}
	call := a.hist.Invoke(Event{Op: "pop", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: q.Name, Group: grp, LeaseSecs: q.LeaseSecs, Status: status})
	v := url.Values{"batch": {strconv.Itoa(batch)}}
	if grp != "" {
		v.Set("consumerGroup", grp)
	}
	if autoAck {
		v.Set("autoAck", "true")
	}
	code, raw, left, err := a.cluster.DoLeaving(ctx, b, "GET", "/api/v1/pop/queue/"+url.PathEscape(q.Name)+"?"+v.Encode(), tenant, wait)
	if left {
		a.hist.Add(Event{Kind: KInfo, Call: call, Op: "pop", Broker: b, VT: a.vt(), Err: Cancelled})
		return
	}
	// It answered before the client left; whatever it got, the client
	// walks away from.
	if h := a.finishPop(call, b, code, raw, err, tenant, q, grp, autoAck); h != nil {
		a.hist.Add(Event{Kind: KClient, What: "abandon", Client: c, VT: a.vt(), Lease: h.lease})
	}
}

// Cancelled is the Err of a pop whose client left while it was claiming.
const Cancelled = "cancelled"

// finishPop records a pop's answer and returns the batch it got, if any.
func (a *actor) finishPop(call, b, code int, raw []byte, err error, tenant string, q QueueSpec, grp string, autoAck bool) *held {
	var h *held
	a.finish(call, "pop", b, code, err, func(e *Event) {
		if code == 204 {
			return
		}
		if code != 200 || len(raw) == 0 {
			e.Bad = fmt.Sprintf("pop answered %d with %q", code, clip(raw))
			return
		}
		var res popAnswer
		if json.Unmarshal(raw, &res) != nil || len(res.Messages) == 0 {
			e.Bad = fmt.Sprintf("pop answered %d with %q", code, clip(raw))
			return
		}
		h = a.delivered(e, res, tenant, q, grp, autoAck)
	})
	return h
}

// delivered records a pop's delivery on its completion e and returns the
// batch the client now holds (none for autoAck).
func (a *actor) delivered(e *Event, res popAnswer, tenant string, q QueueSpec, grp string, autoAck bool) *held {
	h := &held{tenant: tenant, q: q.Name, g: grp, lease: res.LeaseID, until: a.vt() + int64(q.LeaseSecs)*1000}
	for _, m := range res.Messages {
		msg := Msg{Tenant: tenant, Queue: q.Name, Partition: m.Partition, Txid: m.TransactionID, Lease: m.LeaseID, PID: m.PartitionID, ID: m.ID,
			Data: deliveredAs(m.TransactionID, m.Data)}
		e.Msgs = append(e.Msgs, msg)
		msg.Data = nil
		h.msgs = append(h.msgs, msg)
	}
	if autoAck || len(h.msgs) == 0 {
		return nil
	}
	return h
}

// popAnswer is a pop's 200 answer, as the simulator reads it.
type popAnswer struct {
	LeaseID  string       `json:"leaseId"`
	Messages []popMessage `json:"messages"`
}

// popMessage is one message of a pop's answer.
type popMessage struct {
	ID            string          `json:"id"`
	Data          json.RawMessage `json:"data"`
	TransactionID string          `json:"transactionId"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
}

// wireGroup is the consumerGroup a pop of g sends ("" in queue mode).
func wireGroup(g string) string {
	if g == QueueMode {
		return ""
	}
	return g
}

// foreign sends an ack of h's messages (or an extend of its lease) under
// tenant, which is not h's: it must be refused, and h stays held.
func (a *actor) foreign(ctx context.Context, c, b int, h *held, tenant string, extend bool) {
	if extend {
		call := a.hist.Invoke(Event{Op: "extend", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Lease: h.lease, LeaseSecs: extendSecs, Foreign: true})
		code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/lease/"+h.lease+"/extend", tenant, []byte(fmt.Sprintf(`{"seconds":%d}`, extendSecs)))
		a.finish(call, "extend", b, code, err, func(e *Event) { e.Status = renewed(raw) })
		return
	}
	f := *h
	f.tenant = tenant
	statuses := make([]string, len(h.msgs))
	for i := range statuses {
		statuses[i] = "completed"
	}
	a.sendAck(ctx, c, b, &f, statuses, true)
}

func renewed(raw []byte) string {
	var res struct {
		Renewed int `json:"renewed"`
	}
	if json.Unmarshal(raw, &res) == nil && res.Renewed > 0 {
		return "renewed"
	}
	return ""
}

func (a *actor) ack(ctx context.Context, c, b int, h *held, statuses []string) {
	a.sendAck(ctx, c, b, h, statuses, false)
}

func (a *actor) sendAck(ctx context.Context, c, b int, h *held, statuses []string, foreign bool) {
	// A broker that answered more messages than the pop asked for (a
	// planted bug handing one pop another's claim) gets the extra ones
	// completed: the checkers judge what it did, the actor must not crash.
	for len(statuses) < len(h.msgs) {
		statuses = append(statuses, "completed")
	}
	items := make([]Msg, len(h.msgs))
	var acks []any
	for i, m := range h.msgs {
		items[i] = m
		items[i].Status = statuses[i]
		acks = append(acks, map[string]any{"transactionId": m.Txid, "partitionId": m.PID,
			"leaseId": m.Lease, "status": statuses[i]})
	}
	call := a.hist.Invoke(Event{Op: "ack", Client: c, Broker: b, VT: a.vt(), Tenant: h.tenant, Queue: h.q, Group: h.g, Lease: h.lease, Msgs: items, Foreign: foreign})
	var group any
	if h.g != "" {
		group = h.g
	}
	body, _ := json.Marshal(map[string]any{"consumerGroup": group, "acknowledgments": acks})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/ack/batch", h.tenant, body)
	a.finish(call, "ack", b, code, err, func(e *Event) {
		var res []struct {
			TransactionID string  `json:"transactionId"`
			Success       bool    `json:"success"`
			Error         *string `json:"error"`
			LeaseReleased bool    `json:"leaseReleased"`
			DLQ           bool    `json:"dlq"`
		}
		if json.Unmarshal(raw, &res) != nil || len(res) != len(items) {
			e.Bad = fmt.Sprintf("ack of %d answered %d with %q", len(items), code, clip(raw))
			return
		}
		for i, r := range res {
			m := items[i]
			if r.TransactionID != m.Txid {
				// Acks combine across requests: an answer must be its own
				// item's, or the client settles messages it never acked.
				e.Bad = fmt.Sprintf("ack of %s answered another item: index %d, transactionId %q", m.Txid, i, r.TransactionID)
				return
			}
			m.OK, m.Released, m.DLQ = r.Success, r.LeaseReleased, r.DLQ
			if r.Error != nil {
				m.Err = *r.Error
			}
			e.Msgs = append(e.Msgs, m)
		}
	})
}

func (a *actor) extend(ctx context.Context, c, b int, h *held, secs int) {
	call := a.hist.Invoke(Event{Op: "extend", Client: c, Broker: b, VT: a.vt(), Tenant: h.tenant, Lease: h.lease, LeaseSecs: secs})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/lease/"+h.lease+"/extend", h.tenant, []byte(fmt.Sprintf(`{"seconds":%d}`, secs)))
	a.finish(call, "extend", b, code, err, func(e *Event) {
		if e.Status = renewed(raw); e.Status != "" {
			h.until = max(h.until, a.vt()+int64(secs)*1000)
		}
	})
}

// txn pushes k and completes h's first message atomically.
func (a *actor) txn(ctx context.Context, c, b int, k Key, h *held) {
	a.txnAs(ctx, c, b, k, h, "", "")
}
