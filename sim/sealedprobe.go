package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/crypt"
)

// SealedQueue is the queue of the sealed-paths probe (sealed.paths): it is
// encrypted from its creation, and every write path that can reach a queue
// writes into it, so that what each path stores is opened by a pop: no
// workload queue has timers, DLQ retries or a stream sink that is popped.
const SealedQueue = "sim-sealed"

// sealedPaths (sealed.paths, lockstep) writes into SealedQueue, for the
// run's first tenant, through every write path the workload can drive: a
// push, a transaction's push, two timers (due at once and a second
// later), and a push that the final drain dead-letters and retries from
// the DLQ through the route, and a streaming query's cycle whose sink it
// is (sealedStream). Every payload is writtenPayload(txid); the
// final drain (drainSealed) pops them all and records what each delivery
// carried when it is anything else (the payloads rule).
func (r *runner) sealedPaths(f FaultAt) error {
	tenant := r.o.Tenants[0]
	b := max(f.Broker, 0) % r.o.Brokers
	if !r.cluster.Up(b) {
		var ok bool
		if b, ok = r.brokerFor(r.clients[0]); !ok {
			r.starved = append(r.starved, fmt.Sprintf("sealed.paths at=%v: no broker was up", f.At))
			return nil
		}
	}
	body, _ := json.Marshal(map[string]any{"queue": SealedQueue, "options": map[string]any{"encryptionEnabled": true, "leaseTime": 30, "retryLimit": 2}})
	code, raw, err := r.cluster.Do(r.ctx, b, "POST", "/api/v1/configure", tenant, body)
	if err != nil || code != 200 {
		r.starved = append(r.starved, fmt.Sprintf("sealed.paths at=%v broker=%d: the configure answered %d %s %v", f.At, b, code, clip(raw), err))
		return nil
	}
	r.sealedProbe = true
	r.noteQueue(tenant, SealedQueue, []string{"encrypted"})
	if r.sealedSince == nil {
		r.sealedSince = map[[2]string]time.Time{}
	}
	// Encrypted from its creation: no row of it may be stored in the
	// clear (plainRows) or sealed twice (twiceRows).
	r.sealedSince[[2]string{tenant, SealedQueue}] = r.start
	r.fired["sealed.paths"]++
	key := func(what string) Key { return Key{Tenant: tenant, Q: SealedQueue, P: "p", Txid: "sealed-" + what} }
	r.sealedWrite(b, "push", key("push"))
	r.sealedWrite(b, "txn", key("txn"))
	r.sealedWrite(b, "push", key(sealedDLQ))
	r.sealedWrite(b, "timer", key("tm0"))
	r.sealedWrite(b, "timer", key("tm1"))
	if err := r.sealedStream(b, key("sink")); err != nil {
		r.starved = append(r.starved, fmt.Sprintf("sealed.paths at=%v broker=%d: the stream sink path could not be set up: %v", f.At, b, err))
	}
	return nil
}

// sealedStream writes k into SealedQueue as a streaming query's sink: a
// query over a plain source queue of its own (granted, configured and
// registered here, one source message pushed and popped by the query's
// group, none of it recorded) commits one cycle whose push item is k
// (recorded as a "sealed-write" of What "stream").
func (r *runner) sealedStream(b int, k Key) error {
	const src, query = SealedQueue + "-src", "sim-sealed-sink"
	br := r.cluster.Broker(b)
	if br == nil {
		return fmt.Errorf("broker %d is down", b)
	}
	if _, err := br.Store().Pool().Exec(r.ctx, `INSERT INTO queen_streams.quota (tenant_id) VALUES ($1::uuid) ON CONFLICT DO NOTHING`, k.Tenant); err != nil {
		return err
	}
	do := func(method, path string, body any) ([]byte, error) {
		raw, _ := json.Marshal(body)
		code, out, err := r.cluster.Do(r.ctx, b, method, path, k.Tenant, raw)
		if err != nil || code/100 != 2 {
			return nil, fmt.Errorf("%s %s answered %d %s %v", method, path, code, clip(out), err)
		}
		return out, nil
	}
	raw, err := do("POST", "/streams/v1/queries", map[string]any{"name": query, "source_queue": src, "sink_queue": SealedQueue,
		"config_hash": "sim-v1", "reset": false})
	if err != nil {
		return err
	}
	var reg struct {
		QueryID string `json:"query_id"`
	}
	if json.Unmarshal(raw, &reg) != nil || reg.QueryID == "" {
		return fmt.Errorf("register answered %s", clip(raw))
	}
	if _, err := do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": src, "partition": "p", "transactionId": "sealed-src",
		"payload": json.RawMessage(writtenPayload("sealed-src"))}}}); err != nil {
		return err
	}
	if raw, err = do("GET", "/api/v1/pop/queue/"+src+"?batch=1&consumerGroup=streams."+query, nil); err != nil {
		return err
	}
	var pop struct {
		LeaseID  string `json:"leaseId"`
		Messages []struct {
			TransactionID string `json:"transactionId"`
			PartitionID   string `json:"partitionId"`
			LeaseID       string `json:"leaseId"`
		} `json:"messages"`
	}
	if json.Unmarshal(raw, &pop) != nil || len(pop.Messages) != 1 {
		return fmt.Errorf("pop of %s answered %s", src, clip(raw))
	}
	m := pop.Messages[0]
	if m.LeaseID == "" {
		m.LeaseID = pop.LeaseID
	}
	call := r.hist.Invoke(Event{Op: "sealed-write", What: "stream", Broker: b, VT: r.vt(), Tenant: k.Tenant, Queue: k.Q, Partition: k.P, Txid: k.Txid})
	body, _ := json.Marshal(map[string]any{"query_id": reg.QueryID, "partition_id": m.PartitionID, "consumer_group": "streams." + query,
		"push_items":    []any{map[string]any{"queue": k.Q, "partition": k.P, "transactionId": k.Txid, "payload": json.RawMessage(writtenPayload(k.Txid))}},
		"ack":           map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID, "status": "completed", "count": 1},
		"release_lease": true})
	code, out, err := r.cluster.Do(r.ctx, b, "POST", "/streams/v1/cycle", k.Tenant, body)
	r.act.finish(call, "sealed-write", b, code, err, func(e *Event) {
		var res struct {
			Success *bool `json:"success"`
		}
		if json.Unmarshal(out, &res) != nil || res.Success == nil || !*res.Success {
			e.Bad = "stream cycle into " + k.Q + " answered " + clip(out)
		}
	})
	return nil
}

// sealedDLQ names the probe's message that the drain dead-letters once and
// retries from the DLQ.
const sealedDLQ = "dlq"

// writtenPayload is the payload every simulated write of transactionId
// txid sends (push, transaction, timer, spool replay of a push): a
// delivery carrying anything else carries what nobody wrote.
func writtenPayload(txid string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"sum": txid})
	return b
}

// deliveredAs is what a delivery of txid records of its data: nothing when
// it is the payload written for txid, else the data as delivered.
func deliveredAs(txid string, data json.RawMessage) json.RawMessage {
	if samePayload(data, txid) {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, data) == nil {
		return buf.Bytes()
	}
	return append(json.RawMessage(nil), data...)
}

// samePayload reports whether data is, as JSON, writtenPayload(txid):
// an object whose one member "sum" is txid (the database may space or
// escape it otherwise).
func samePayload(data json.RawMessage, txid string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || len(m) != 1 {
		return false
	}
	var s string
	return json.Unmarshal(m["sum"], &s) == nil && s == txid
}

// sealedWrite writes k into SealedQueue through path (push, txn or timer)
// and records it as a "sealed-write" (What the path).
func (r *runner) sealedWrite(b int, path string, k Key) {
	call := r.hist.Invoke(Event{Op: "sealed-write", What: path, Broker: b, VT: r.vt(), Tenant: k.Tenant, Queue: k.Q, Partition: k.P, Txid: k.Txid})
	item := map[string]any{"queue": k.Q, "partition": k.P, "transactionId": k.Txid, "payload": json.RawMessage(writtenPayload(k.Txid))}
	var method, route string
	var body []byte
	switch path {
	case "push":
		method, route = "POST", "/api/v1/push"
		body, _ = json.Marshal(map[string]any{"items": []any{item}})
	case "txn":
		method, route = "POST", "/api/v1/transaction"
		body, _ = json.Marshal(map[string]any{"operations": []any{map[string]any{"type": "push", "items": []any{item}}}})
	case "timer":
		delay := 0
		if k.Txid == "sealed-tm1" {
			delay = 1000
		}
		method, route = "POST", "/api/v1/timers"
		body, _ = json.Marshal([]any{map[string]any{"op": "schedule", "queue": k.Q, "partition": k.P, "timerKey": k.Txid, "txn": k.Txid,
			"delayMs": delay, "payload": json.RawMessage(writtenPayload(k.Txid))}})
	}
	code, raw, err := r.cluster.Do(r.ctx, b, method, route, k.Tenant, body)
	r.act.finish(call, "sealed-write", b, code, err, func(e *Event) {
		var ok bool
		switch path {
		case "push":
			var res []struct {
				Status string `json:"status"`
			}
			ok = json.Unmarshal(raw, &res) == nil && len(res) == 1 && (res[0].Status == "queued" || res[0].Status == "buffered")
			if ok {
				e.Status = res[0].Status
			}
		case "txn":
			var res struct {
				Success bool `json:"success"`
			}
			ok = json.Unmarshal(raw, &res) == nil && res.Success
		case "timer":
			var res struct {
				Results []struct {
					Status string `json:"status"`
				} `json:"results"`
			}
			ok = json.Unmarshal(raw, &res) == nil && len(res.Results) == 1 && res.Results[0].Status == "scheduled"
		}
		if !ok {
			e.Bad = fmt.Sprintf("%s into %s answered %s", path, k.Q, clip(raw))
		}
	})
}

// drainSealed pops SealedQueue until every write of the probe answered ok
// was delivered (the timers fire meanwhile: the services are stepped),
// within the convergence bound. The probe's dead-letter candidate is acked
// "dlq" at its first delivery and retried from the DLQ through the route
// (a "sealed-retry", Status the transactionId it was replayed as); the rest
// is completed.
func (r *runner) drainSealed() {
	if !r.sealedProbe {
		return
	}
	tenant := r.o.Tenants[0]
	want := map[string]bool{}
	for _, c := range calls(r.hist.Events()) {
		if c.in.Op == "sealed-write" && c.done != nil && c.done.Kind != KFail {
			want[c.in.Txid] = true
		}
	}
	retried := false
	deadline := r.vt() + r.o.Converge.Milliseconds()
	for len(want) > 0 && r.vt() < deadline {
		msgs, lease := r.sealedPop(tenant)
		if len(msgs) == 0 {
			r.wait(500 * time.Millisecond)
			if r.pg != nil {
				r.stepServices() // free-running, the sweepers run on their own
			}
			continue
		}
		for _, m := range msgs {
			status := "completed"
			if m.Txid == "sealed-"+sealedDLQ && !retried {
				status = "dlq"
			}
			r.sealedAck(tenant, m, lease, status)
			delete(want, m.Txid)
			if status == "dlq" {
				retried = true
				if as := r.sealedRetry(tenant, m); as != "" {
					want[as] = true
				}
			}
		}
	}
}

// sealedPop pops a batch of SealedQueue (queue mode) through broker 0 and
// records it as a "sealed-pop", each message's data recorded when it is
// not the payload written (deliveredAs).
func (r *runner) sealedPop(tenant string) ([]Msg, string) {
	call := r.hist.Invoke(Event{Op: "sealed-pop", VT: r.vt(), Tenant: tenant, Queue: SealedQueue})
	code, raw, err := r.cluster.Do(r.ctx, 0, "GET", "/api/v1/pop/queue/"+SealedQueue+"?batch=10", tenant, nil)
	var msgs []Msg
	var lease string
	r.act.finish(call, "sealed-pop", 0, code, err, func(e *Event) {
		if code == 204 {
			return
		}
		var res popAnswer
		if json.Unmarshal(raw, &res) != nil || len(res.Messages) == 0 {
			e.Bad = fmt.Sprintf("pop of %s answered %d with %q", SealedQueue, code, clip(raw))
			return
		}
		lease = res.LeaseID
		for _, m := range res.Messages {
			msg := Msg{Tenant: tenant, Queue: SealedQueue, Partition: m.Partition, Txid: m.TransactionID, Lease: m.LeaseID, PID: m.PartitionID,
				Data: deliveredAs(m.TransactionID, m.Data)}
			if msg.Lease == "" {
				msg.Lease = lease
			}
			e.Msgs = append(e.Msgs, msg)
			msgs = append(msgs, msg)
		}
	})
	return msgs, lease
}

// sealedAck acks one message of SealedQueue ("sealed-ack").
func (r *runner) sealedAck(tenant string, m Msg, lease, status string) {
	call := r.hist.Invoke(Event{Op: "sealed-ack", VT: r.vt(), Tenant: tenant, Queue: SealedQueue, Partition: m.Partition, Txid: m.Txid, Status: status})
	if m.Lease != "" {
		lease = m.Lease
	}
	body, _ := json.Marshal(map[string]any{"transactionId": m.Txid, "partitionId": m.PID, "leaseId": lease, "status": status})
	code, _, err := r.cluster.Do(r.ctx, 0, "POST", "/api/v1/ack", tenant, body)
	r.act.finish(call, "sealed-ack", 0, code, err, nil)
}

// sealedRetry retries m from the DLQ through the route and answers the
// transactionId it was replayed as ("" when the route refused).
func (r *runner) sealedRetry(tenant string, m Msg) string {
	call := r.hist.Invoke(Event{Op: "sealed-retry", VT: r.vt(), Tenant: tenant, Queue: SealedQueue, Partition: m.Partition, Txid: m.Txid})
	code, raw, err := r.cluster.Do(r.ctx, 0, "POST", "/api/v1/messages/"+url.PathEscape(m.PID)+"/"+url.PathEscape(m.Txid)+"/retry", tenant, []byte(`{}`))
	as := ""
	r.act.finish(call, "sealed-retry", 0, code, err, func(e *Event) {
		var res struct {
			ReplayedAs struct {
				TransactionID string `json:"transaction_id"`
			} `json:"replayedAs"`
		}
		if json.Unmarshal(raw, &res) != nil || res.ReplayedAs.TransactionID == "" {
			e.Bad = "DLQ retry answered " + strconv.Itoa(code) + " " + clip(raw)
			return
		}
		as = res.ReplayedAs.TransactionID
		e.Status = as
	})
	return as
}

// twiceRows reads the rows stored sealed twice in the queues that encrypt
// (sealed): a sealed row whose envelope, opened with any simulated key,
// is an envelope again.
func twiceRows(ctx context.Context, conn *pgx.Conn, sealed map[[2]string]time.Time) ([]Key, error) {
	c, err := crypt.New(simKeys[0], simKeys[1:]...)
	if err != nil {
		return nil, err
	}
	var out []Key
	for tq := range sealed {
		rows, err := conn.Query(ctx, `SELECT p.name, m.transaction_id, m.payload::text FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant_id = $1 AND q.name = $2 AND m.is_encrypted ORDER BY 1, 2`, tq[0], tq[1])
		if err != nil {
			return nil, fmt.Errorf("final read: %w", err)
		}
		for rows.Next() {
			k := Key{Tenant: tq[0], Q: tq[1]}
			var payload string
			if err := rows.Scan(&k.P, &k.Txid, &payload); err != nil {
				rows.Close()
				return nil, err
			}
			if plain, err := c.Open([]byte(payload)); err == nil && sealedEnvelope(plain) {
				out = append(out, k)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
