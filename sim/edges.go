package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Inputs at and past the limits the broker's edge enforces (queen/limits).
// One key in edgeEvery is one of these, chosen by the key counter: a
// transactionId of exactly 1024 bytes of incompressible text (stored like
// any other), or a push PostgreSQL itself would refuse (a transactionId or a
// queue name far past its index's row limit, a number past numeric's
// range), which the broker must refuse with a 4xx, on a healthy database
// and in an outage alike: buffered, it would be dropped at replay after it
// was answered.
const (
	edgeEvery     = 23
	edgeAtLimit   = "at-limit"
	edgeTxid      = "txid-past-limit"
	edgeQueue     = "queue-past-limit"
	edgeNumber    = "number-past-numeric"
	txidLimit     = 1024
	pastIndexRows = 3000 // bytes: past btree's 2704-byte row, incompressible
)

// edgeOf is the edge key n is, or "".
func edgeOf(n int) string {
	switch n % edgeEvery {
	case 3:
		return edgeAtLimit
	case 11:
		return []string{edgeTxid, edgeQueue, edgeNumber}[(n/edgeEvery)%3]
	}
	return ""
}

// noise is n bytes of printable text pglz cannot compress, fixed by seed
// and counter.
func noise(seed uint64, counter, n int) string {
	rng := rand.New(rand.NewPCG(seed, uint64(counter)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + rng.IntN('z'-'0'+1))
	}
	return string(b)
}

// atLimit pads a transactionId to exactly the limit.
func atLimit(txid string, seed uint64, counter int) string {
	return txid + "-" + noise(seed, counter, txidLimit-len(txid)-1)
}

// pastLimit makes k a push PostgreSQL would refuse, in the way edge says.
func pastLimit(k Key, edge string, seed uint64, counter int) Key {
	switch edge {
	case edgeTxid:
		k.Txid += "-" + noise(seed, counter, pastIndexRows)
	case edgeQueue:
		k.Q += "-" + noise(seed, counter, pastIndexRows)
	case edgeNumber:
		k.Txid += "-numeric"
	}
	return k
}

// pushEdge pushes k; an edge key past a limit is sent as what the edge must
// refuse, and recorded with the edge in What.
func (a *actor) pushEdge(ctx context.Context, c, b int, k Key, edge string) {
	if edge == "" || edge == edgeAtLimit {
		a.push(ctx, c, b, k)
		return
	}
	call := a.hist.Invoke(Event{Op: "push", Client: c, Broker: b, VT: a.vt(), Tenant: k.Tenant, Queue: k.Q, Partition: k.P, Txid: k.Txid, What: edge})
	item := map[string]any{"queue": k.Q, "partition": k.P, "transactionId": k.Txid, "payload": map[string]any{"sum": k.Txid}}
	body, _ := json.Marshal(map[string]any{"items": []any{item}})
	if edge == edgeNumber {
		body = []byte(strings.Replace(string(body), `{"sum":`, `{"n":1e200000,"sum":`, 1))
	}
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/push", k.Tenant, body)
	a.finishEdge(call, "push", b, code, raw, err, edge, func(e *Event) {
		var res []struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(raw, &res) == nil && len(res) == 1 {
			e.Status = res[0].Status
		}
	})
}

// edgeOps are the operations whose invoke's What names the limit their
// input is past (edges.go, edges_routes.go).
var edgeOps = map[string]bool{"push": true, "txn": true, "timer": true, "stream-cycle": true}

// CheckEdges: an input past a limit of the limits table (a push, a
// transaction, a timer schedule, a stream cycle) is refused at the edge
// with a 4xx naming the field, on every route and in an outage alike: a
// 2xx (a buffered push is dropped at replay after it was acknowledged) or
// a 5xx is a violation; a transaction's 5xx is no indeterminate answer
// here, since the broker must never have sent its input to the database.
// And nothing of the refused request is stored: no row of its push, its
// transaction's or its timer's message.
func CheckEdges(h []Event, s Spec) []Violation {
	out := refusedTxnAcks(h, s)
	edge := map[Key]string{}
	for _, c := range calls(h) {
		if !edgeOps[c.in.Op] || c.in.What == "" || c.in.What == edgeAtLimit {
			continue
		}
		k := c.in.Key()
		if c.in.Op == "txn" {
			for _, m := range c.in.Msgs {
				if m.Op == "push" {
					k = m.Key()
				}
			}
		}
		if c.in.Op != "stream-cycle" {
			edge[k] = c.in.What
		}
		switch d := c.done; {
		case d == nil:
		case d.Kind == KOK:
			out = append(out, Violation{"edges", fmt.Sprintf("a %s past a limit (%s) was answered %d %q (event %d), not refused at the edge: %.60s",
				c.in.Op, c.in.What, d.Code, d.Status, d.Index, k)})
		case d.Code >= 500:
			out = append(out, Violation{"edges", fmt.Sprintf("a %s past a limit (%s) was answered %d (event %d), not refused at the edge: %.60s",
				c.in.Op, c.in.What, d.Code, d.Index, k)})
		case d.Kind == KFail && d.Status == edgeUnnamed:
			out = append(out, Violation{"edges", fmt.Sprintf("a %s past a limit (%s) was refused %d without naming the field %s (event %d)",
				c.in.Op, c.in.What, d.Code, edgeField[c.in.What], d.Index)})
		}
	}
	if final := finalEvent(h); final != nil {
		for _, row := range final.Rows {
			k := Key{row.Tenant, row.Queue, row.Partition, row.Txid}
			if why, ok := edge[k]; ok {
				out = append(out, Violation{"edges", fmt.Sprintf("a refused request (%s) left a row: %.60s", why, k)})
			}
		}
	}
	return limit(out, 20)
}
