package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The streaming workload: a query counts the messages of StreamSource per
// partition, the way Queen's SDKs run one. A client pops a batch (group
// StreamGroup), and later commits a cycle for it: it reads the
// partition's state (the list of transactionIds counted so far), appends
// the batch, and sends the new list, one sink message naming the cycle and
// the batch, and the ack of the batch's last message, in one cycle. A
// client that holds its batch past the lease, or whose broker died, sends a
// cycle that must commit nothing. The stream checker judges the final
// state and sink against the history.
const (
	StreamSource  = "sim-stream"
	StreamSink    = "sim-stream-out"
	StreamGroup   = "streams.sim-count"
	streamQuery   = "sim-count"
	streamLease   = 8 // seconds
	streamKey     = "count"
	streamPartsOf = 2
)

// streamBatch is a batch a client popped from the source and not yet
// committed.
type streamBatch struct {
	tenant, pid, partition, lease string
	txids                         []string
}

// streamValue is the state row the query keeps per source partition.
type streamValue struct {
	IDs []string `json:"ids"`
	N   int      `json:"n"`
}

// registerStream registers the counting query for a tenant and answers
// its id.
func (a *actor) registerStream(ctx context.Context, b int, tenant string) (string, error) {
	body, _ := json.Marshal(map[string]any{"name": streamQuery, "source_queue": StreamSource, "sink_queue": StreamSink,
		"config_hash": "sim-v1", "reset": false})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/streams/v1/queries", tenant, body)
	if err != nil || code != 200 {
		return "", fmt.Errorf("register stream: %d %s %v", code, raw, err)
	}
	var r struct {
		QueryID string `json:"query_id"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.QueryID == "" {
		return "", fmt.Errorf("register stream: %s", raw)
	}
	return r.QueryID, nil
}

// streamPush pushes one source message.
func (a *actor) streamPush(ctx context.Context, c, b int, tenant, partition, txid string) {
	call := a.hist.Invoke(Event{Op: "stream-push", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: StreamSource, Partition: partition, Txid: txid})
	body, _ := json.Marshal(map[string]any{"items": []any{map[string]any{"queue": StreamSource, "partition": partition,
		"transactionId": txid, "payload": map[string]any{"n": 1}}}})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/push", tenant, body)
	a.finish(call, "stream-push", b, code, err, func(e *Event) {
		var res []struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(raw, &res) != nil || len(res) != 1 || res[0].Status == "" {
			e.Bad = "push answered " + clip(raw)
			return
		}
		e.Status = res[0].Status
	})
}

// streamPop pops a batch of the source for the query's group.
func (a *actor) streamPop(ctx context.Context, c, b int, tenant string, batch int) *streamBatch {
	call := a.hist.Invoke(Event{Op: "stream-pop", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: StreamSource, Group: StreamGroup, LeaseSecs: streamLease})
	v := url.Values{"batch": {strconv.Itoa(batch)}, "consumerGroup": {StreamGroup}}
	code, raw, err := a.cluster.Do(ctx, b, "GET", "/api/v1/pop/queue/"+StreamSource+"?"+v.Encode(), tenant, nil)
	var out *streamBatch
	a.finish(call, "stream-pop", b, code, err, func(e *Event) {
		if code == 204 {
			return
		}
		var r struct {
			Messages []struct {
				TransactionID string `json:"transactionId"`
				PartitionID   string `json:"partitionId"`
				Partition     string `json:"partition"`
				LeaseID       string `json:"leaseId"`
			} `json:"messages"`
		}
		if json.Unmarshal(raw, &r) != nil || len(r.Messages) == 0 {
			e.Bad = "stream pop answered " + clip(raw)
			return
		}
		out = &streamBatch{tenant: tenant, pid: r.Messages[0].PartitionID, partition: r.Messages[0].Partition, lease: r.Messages[0].LeaseID}
		for _, m := range r.Messages {
			out.txids = append(out.txids, m.TransactionID)
			e.Msgs = append(e.Msgs, Msg{Tenant: tenant, Queue: StreamSource, Partition: m.Partition, Txid: m.TransactionID, Lease: m.LeaseID})
		}
	})
	return out
}

// streamCycle commits a held batch: state read, then one cycle with the
// new state, a sink message and the ack. It is recorded as one operation
// whose invoke names the cycle (Txid) and the batch (Msgs); an answer
// success:false is "rejected", a transport error or 5xx indeterminate.
func (a *actor) streamCycle(ctx context.Context, c, b int, query, cycleID string, h *streamBatch) {
	msgs := make([]Msg, len(h.txids))
	for i, t := range h.txids {
		msgs[i] = Msg{Tenant: h.tenant, Queue: StreamSource, Partition: h.partition, Txid: t, Lease: h.lease}
	}
	call := a.hist.Invoke(Event{Op: "stream-cycle", Client: c, Broker: b, VT: a.vt(), Tenant: h.tenant, Queue: StreamSource, Partition: h.partition,
		Txid: cycleID, Lease: h.lease, Msgs: msgs})
	body, _ := json.Marshal(map[string]any{"query_id": query, "partition_id": h.pid, "keys": []string{streamKey}})
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/streams/v1/state/get", h.tenant, body)
	if err != nil || code != 200 {
		a.finish(call, "stream-cycle", b, code, err, nil)
		return
	}
	var st struct {
		Rows []struct {
			Value streamValue `json:"value"`
		} `json:"rows"`
	}
	var v streamValue
	if json.Unmarshal(raw, &st) == nil && len(st.Rows) == 1 {
		v = st.Rows[0].Value
	}
	v.IDs = append(v.IDs, h.txids...)
	v.N += len(h.txids)
	body, _ = json.Marshal(map[string]any{"query_id": query, "partition_id": h.pid, "consumer_group": StreamGroup,
		"state_ops":     []any{map[string]any{"type": "upsert", "key": streamKey, "value": v}},
		"push_items":    []any{map[string]any{"queue": StreamSink, "partition": h.partition, "payload": map[string]any{"cycle": cycleID, "ids": h.txids}}},
		"ack":           map[string]any{"transactionId": h.txids[len(h.txids)-1], "leaseId": h.lease, "status": "completed", "count": len(h.txids)},
		"release_lease": true})
	code, raw, err = a.cluster.Do(ctx, b, "POST", "/streams/v1/cycle", h.tenant, body)
	a.finish(call, "stream-cycle", b, code, err, func(e *Event) {
		var r struct {
			Success *bool  `json:"success"`
			Error   string `json:"error"`
		}
		switch {
		case json.Unmarshal(raw, &r) != nil || r.Success == nil:
			e.Bad = "cycle answered " + clip(raw)
		case *r.Success:
			e.Status = "committed"
		default:
			e.Status, e.Err = "rejected", r.Error
		}
	})
}

// StreamState is the final state row of one source partition.
type StreamState struct {
	Tenant    string   `json:"tenant"`
	Partition string   `json:"p"`
	IDs       []string `json:"ids"`
	N         int      `json:"n"`
}

// StreamOut is one sink message.
type StreamOut struct {
	Tenant string   `json:"tenant"`
	Cycle  string   `json:"cycle"`
	IDs    []string `json:"ids"`
}

// readStreams reads the query's state rows and the sink's messages.
func readStreams(ctx context.Context, conn *pgx.Conn) ([]StreamState, []StreamOut, error) {
	rows, err := conn.Query(ctx, `
		SELECT q.tenant_id::text, coalesce(p.name, s.partition_id::text), s.value
		FROM queen_streams.state s
		JOIN queen_streams.queries q ON q.id = s.query_id
		LEFT JOIN queen.partitions p ON p.id = s.partition_id
		WHERE q.name = $1 AND s.key = $2
		ORDER BY 1, 2`, streamQuery, streamKey)
	if err != nil {
		return nil, nil, fmt.Errorf("final read of stream state: %w", err)
	}
	var state []StreamState
	for rows.Next() {
		var s StreamState
		var v streamValue
		if err := rows.Scan(&s.Tenant, &s.Partition, &v); err != nil {
			return nil, nil, err
		}
		s.IDs, s.N = v.IDs, v.N
		state = append(state, s)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = conn.Query(ctx, `
		SELECT q.tenant_id::text, m.payload
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1
		ORDER BY 1, m.partition_id, m.seq`, StreamSink)
	if err != nil {
		return nil, nil, fmt.Errorf("final read of the stream sink: %w", err)
	}
	var sink []StreamOut
	for rows.Next() {
		var o StreamOut
		var payload struct {
			Cycle string   `json:"cycle"`
			IDs   []string `json:"ids"`
		}
		if err := rows.Scan(&o.Tenant, &payload); err != nil {
			return nil, nil, err
		}
		o.Cycle, o.IDs = payload.Cycle, payload.IDs
		sink = append(sink, o)
	}
	return state, sink, rows.Err()
}

// setupStreams configures the source queue and registers the query under
// every tenant, when the workload streams.
func (r *runner) setupStreams(dsn string) error {
	if r.o.Weights.Stream == 0 {
		return nil
	}
	if err := grantStreams(r.ctx, dsn, r.o.Tenants); err != nil {
		return err
	}
	r.streamQueries = map[string]string{}
	for _, t := range r.o.Tenants {
		body, _ := json.Marshal(map[string]any{"queue": StreamSource, "options": map[string]any{"leaseTime": streamLease}})
		if code, raw, err := r.setupCall("POST", "/api/v1/configure", t, body); err != nil || code != 200 {
			return fmt.Errorf("configure %s: %d %s %v", StreamSource, code, raw, err)
		}
		var id string
		var err error
		for try := 0; try < 20; try++ {
			if id, err = r.act.registerStream(r.ctx, 0, t); err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
		r.streamQueries[t] = id
	}
	return nil
}

// grantStreams writes the tenants' streams grants, as a control plane
// would: with tenancy on, a tenant other than the default one registers a
// query only with one.
func grantStreams(ctx context.Context, dsn string, tenants []string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("grant streams: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO queen_streams.quota (tenant_id) SELECT unnest($1::uuid[]) ON CONFLICT DO NOTHING`, tenants)
	if err != nil {
		return fmt.Errorf("grant streams: %w", err)
	}
	return nil
}

// streamStep is one streaming operation of client c: push a source
// message, pop a batch, or commit a held batch.
func (r *runner) streamStep(pick func(int) int, c *client, b int) {
	tenant := r.o.Tenants[pick(len(r.o.Tenants))]
	r.mu.Lock()
	r.nextTx++
	n := r.nextTx
	r.mu.Unlock()
	switch k := pick(3); {
	case k == 2 && len(c.streams) > 0:
		h := c.streams[0]
		c.streams = c.streams[1:]
		r.cycleEdge(c, b, r.streamQueries[h.tenant], h)
		r.act.streamCycle(r.ctx, c.id, b, r.streamQueries[h.tenant], fmt.Sprintf("s%x-cyc%d", r.o.Seed&0xffff, n), h)
	case k >= 1 && len(c.streams) < 2:
		if h := r.act.streamPop(r.ctx, c.id, b, tenant, 1+pick(4)); h != nil {
			c.streams = append(c.streams, h)
		}
	default:
		r.act.streamPush(r.ctx, c.id, b, tenant, fmt.Sprintf("s%d", pick(streamPartsOf)), fmt.Sprintf("s%x-st%d", r.o.Seed&0xffff, n))
	}
}

// drainStreams commits everything left in the source, waiting out the
// leases of batches clients dropped, until two passes find nothing.
func (r *runner) drainStreams() {
	if r.o.Weights.Stream == 0 {
		return
	}
	deadline := r.vt() + (r.o.Converge + 10*streamLease*time.Second).Milliseconds()
	for empty, n := 0, 0; empty < 2 && r.vt() < deadline; {
		got := false
		for _, t := range r.o.Tenants {
			for i := 0; i < 1000; i++ {
				h := r.act.streamPop(r.ctx, 0, 0, t, 10)
				if h == nil {
					break
				}
				got = true
				n++
				r.act.streamCycle(r.ctx, 0, 0, r.streamQueries[t], fmt.Sprintf("s%x-drain%d", r.o.Seed&0xffff, n), h)
			}
		}
		if got {
			empty = 0
			continue
		}
		empty++
		r.wait((streamLease + 1) * time.Second)
	}
}
