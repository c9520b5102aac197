package sim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// popDirect is a pop driven through broker b's consume.Consumer, the one
// its pop route uses, rather than over HTTP (Weights.DirectPct), as the
// simulator drives RunOnce services: the store request the route builds
// from the same parameters (queen/httpapi parsePop), the try consume.One,
// and for autoAck the completion once the answer was "delivered" (here:
// before it is recorded, as the route's answer ends only after it). The
// answer is recorded as the route would have answered: 200 with the
// claim, 204 for nothing, 503 or 500 for a store error. Admission and the
// maintenance switch are the route's, not the consumer's: a direct pop
// meets neither.
func (a *actor) popDirect(ctx context.Context, c, b int, tenant string, q QueueSpec, g string, batch int, autoAck bool, waitMS int) *held {
	status := ""
	if autoAck {
		status = "autoack"
	}
	grp := wireGroup(g)
	call := a.hist.Invoke(Event{Op: "pop", Client: c, Broker: b, VT: a.vt(), Tenant: tenant, Queue: q.Name, Group: grp, LeaseSecs: q.LeaseSecs,
		Status: status, Direct: true})
	cons, cfg, ok := a.cluster.Consumer(b)
	if !ok {
		return a.finishDirect(call, b, 0, nil, errBrokerDown, tenant, q, grp, autoAck)
	}
	req := directRequest(cfg, strings.ToLower(tenant), q.Name, grp, batch)
	timeout := cfg.DefaultTimeout
	if waitMS > 0 {
		timeout = time.Duration(waitMS) * time.Millisecond
	}
	res, err := cons.Pop(ctx, consume.Request{Tenant: req.Tenant, Queue: req.Queue, Group: req.Group, Wait: waitMS > 0, Timeout: timeout},
		cons.One(req))
	switch {
	case err != nil && store.Unavailable(err):
		return a.finishDirect(call, b, http.StatusServiceUnavailable, nil, nil, tenant, q, grp, autoAck)
	case err != nil:
		return a.finishDirect(call, b, http.StatusInternalServerError, nil, nil, tenant, q, grp, autoAck)
	case res.Outcome == consume.Gone:
		return a.finishDirect(call, b, 0, nil, context.Canceled, tenant, q, grp, autoAck)
	case res.Outcome != consume.Claimed:
		return a.finishDirect(call, b, http.StatusNoContent, nil, nil, tenant, q, grp, autoAck)
	}
	if autoAck {
		// The answer was delivered (to this caller, in process): only now
		// may its messages be completed, as the route's deliver does.
		cons.Complete(req.Tenant, res.Claim)
	}
	return a.finishDirect(call, b, http.StatusOK, &res.Claim, nil, tenant, q, grp, autoAck)
}

// errBrokerDown is a direct pop's transport error: its broker is down.
var errBrokerDown = errors.New("broker is down")

// directRequest is the store request the pop route builds for a pop of
// batch from tenant's queue by group, with the defaults of cfg: the
// claim is leased even for autoAck (the route completes it only once
// delivered), the lease is the queue's, one partition.
func directRequest(cfg config.Config, tenant, queue, group string, batch int) consume.PopRequest {
	return consume.PopRequest{Tenant: tenant, Queue: queue, Group: group, Batch: batch, Partitions: 1,
		MaxBytes: cfg.MaxPopBytes, SubscriptionMode: cfg.DefaultSubscriptionMode}
}

// finishDirect records a direct pop's answer as finishPop records an HTTP
// one, from the claim itself: an autoAck answer carries no lease, as the
// route's does not.
func (a *actor) finishDirect(call, b, code int, claim *consume.PopResult, err error, tenant string, q QueueSpec, grp string, autoAck bool) *held {
	var h *held
	a.finish(call, "pop", b, code, err, func(e *Event) {
		if code != http.StatusOK {
			return
		}
		h = a.delivered(e, answerOf(*claim, autoAck), tenant, q, grp, autoAck)
	})
	return h
}

// answerOf is the answer the pop route writes for claim, as the simulator
// reads it: payloads as written (null for none), leases left out for
// autoAck.
func answerOf(claim consume.PopResult, autoAck bool) popAnswer {
	ans := popAnswer{LeaseID: claim.LeaseID}
	for _, m := range claim.Messages {
		data := m.Data
		if len(data) == 0 {
			data = json.RawMessage("null")
		}
		ans.Messages = append(ans.Messages, popMessage{ID: m.ID, Data: data, TransactionID: m.TransactionID, Partition: m.Partition,
			PartitionID: m.PartitionID, LeaseID: m.LeaseID})
	}
	if autoAck {
		ans.LeaseID = ""
		for i := range ans.Messages {
			ans.Messages[i].LeaseID = ""
		}
	}
	return ans
}
