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
	call := a.hist.Invoke(Event{Op: "push", C: c, B: b, VT: a.vt(), Tenant: k.Tenant, Q: k.Q, P: k.P, Txid: k.Txid, What: edge})
	item := map[string]any{"queue": k.Q, "partition": k.P, "transactionId": k.Txid, "payload": map[string]any{"sum": k.Txid}}
	body, _ := json.Marshal(map[string]any{"items": []any{item}})
	if edge == edgeNumber {
		body = []byte(strings.Replace(string(body), `{"sum":`, `{"n":1e200000,"sum":`, 1))
	}
	code, raw, err := a.cluster.Do(ctx, b, "POST", "/api/v1/push", k.Tenant, body)
	a.finish(call, "push", b, code, err, func(e *Event) {
		var res []struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(raw, &res) == nil && len(res) == 1 {
			e.Status = res[0].Status
		}
	})
}

// CheckEdges: a push PostgreSQL would refuse is refused at the edge (4xx),
// never answered queued, duplicate or buffered (a buffered one is dropped
// at replay after it was acknowledged), and leaves no row.
func CheckEdges(h []Event, _ Spec) []Violation {
	var out []Violation
	edge := map[Key]string{}
	for _, c := range calls(h) {
		if c.in.Op != "push" || c.in.What == "" {
			continue
		}
		k := c.in.Key()
		edge[k] = c.in.What
		if c.done != nil && c.done.K == KOK {
			out = append(out, Violation{"edges", fmt.Sprintf("a push PostgreSQL refuses (%s) was answered %d %q (event %d), not refused at the edge: %.60s",
				c.in.What, c.done.Code, c.done.Status, c.done.I, k)})
		}
	}
	if final := finalEvent(h); final != nil {
		for _, row := range final.Rows {
			k := Key{row.Tenant, row.Q, row.P, row.Txid}
			if why, ok := edge[k]; ok {
				out = append(out, Violation{"edges", fmt.Sprintf("a refused push (%s) left a row: %.60s", why, k)})
			}
		}
	}
	return limit(out, 20)
}
