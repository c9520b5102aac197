package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

// maxLeaseSeconds bounds a lease: an integer number of seconds in
// PostgreSQL. The batch bound (one response must fit in memory) is
// QUEEN_MAX_POP_BATCH.
const maxLeaseSeconds = 366 * 24 * 3600

// popParams are a pop's query parameters.
type popParams struct {
	req     consume.PopRequest
	wait    bool
	timeout time.Duration
	// autoAck is the client's autoAck. The claim itself is always leased
	// (req.AutoAck stays false): an autoAck pop completes its messages
	// only once its answer is written (deliver), so an answer nobody
	// received leaves them where they were.
	autoAck bool
	// autopilot is set when the client left batch or partitions to the
	// broker (autopilot=true): the sizes chosen are echoed back.
	autopilot *autopilotWire
}

// autopilotBatch is the batch a pop gets when its client leaves the batch
// to the broker (autopilot=true without batch): the server-side default of
// Queen's Rust broker, which Queen's clients expect when they omit it.
// There is no adaptive controller here; the choice is fixed.
const autopilotBatch = 200

func queryBool(q url.Values, name string) bool {
	v := strings.ToLower(q.Get(name))
	return v == "true" || v == "1"
}

// queryInt falls back to def when the value is absent or unparseable, as
// Queen does.
func queryInt(q url.Values, name string, def int) int {
	if n, err := strconv.Atoi(q.Get(name)); err == nil {
		return n
	}
	return def
}

func (s *Server) parsePop(r *http.Request) (popParams, error) {
	q := r.URL.Query()
	p := popParams{
		wait:    queryBool(q, "wait"),
		autoAck: queryBool(q, "autoAck"),
		timeout: time.Duration(queryInt(q, "timeout", int(s.cfg.DefaultTimeout/time.Millisecond))) * time.Millisecond,
	}
	p.req = consume.PopRequest{
		Tenant:       tenantOf(r),
		Queue:        r.PathValue("queue"),
		Partition:    r.PathValue("partition"),
		Group:        q.Get("consumerGroup"),
		Batch:        queryInt(q, "batch", s.cfg.DefaultBatchSize),
		Partitions:   queryInt(q, "partitions", 1),
		LeaseSeconds: queryInt(q, "leaseSeconds", 0),
		MaxBytes:     s.cfg.MaxPopBytes,
	}
	if canary.On("autoack-consumes-undelivered") {
		// As before issue 28 item 3: the claim itself completes, so an
		// answer nobody receives loses what it claimed.
		p.req.AutoAck, p.autoAck = p.autoAck, false
	}
	if queryBool(q, "autopilot") {
		if !q.Has("batch") {
			p.req.Batch = min(autopilotBatch, s.cfg.MaxPopBatch)
		}
		p.autopilot = &autopilotWire{Batch: p.req.Batch, Partitions: p.req.Partitions}
	}
	if err := limits.CheckAll("", limits.Value{Field: limits.Queue, V: p.req.Queue}, limits.Value{Field: limits.Partition, V: p.req.Partition},
		limits.Value{Field: limits.ConsumerGroup, V: p.req.Group}); err != nil {
		return p, err
	}
	if p.req.Batch < 1 {
		return p, bad("batch must be a positive integer")
	}
	if p.req.Partitions < 1 {
		return p, bad("partitions must be a positive integer")
	}
	if p.timeout < 0 {
		return p, bad("timeout must not be negative")
	}
	if p.req.LeaseSeconds < 0 || p.req.LeaseSeconds > maxLeaseSeconds {
		return p, bad("leaseSeconds must be between 1 and %d", maxLeaseSeconds)
	}
	if p.req.Batch > s.cfg.MaxPopBatch {
		return p, bad("batch must be at most %d (QUEEN_MAX_POP_BATCH)", s.cfg.MaxPopBatch)
	}
	if p.req.Partitions > s.cfg.MaxPopBatch {
		return p, bad("partitions must be at most %d (QUEEN_MAX_POP_BATCH)", s.cfg.MaxPopBatch)
	}
	// Any other mode means all, never a 400: Queen's JS and Python
	// clients send from_beginning (contract-admin.md section 6).
	mode, ok := config.NormalizeSubscriptionMode(q.Get("subscriptionMode"))
	if !ok {
		mode = "all"
	}
	if strings.TrimSpace(q.Get("subscriptionMode")) == "" {
		mode = s.cfg.DefaultSubscriptionMode
	}
	p.req.SubscriptionMode = mode
	// subscriptionFrom: "now" means new; an unparseable timestamp means
	// all, as in Queen.
	if from := q.Get("subscriptionFrom"); from != "" {
		if strings.EqualFold(from, "now") {
			p.req.SubscriptionMode = "new"
		} else if t, err := parseInstant(from); err == nil {
			p.req.SubscriptionFrom = &t
		} else {
			p.req.SubscriptionMode = "all"
		}
	}
	return p, nil
}

func (s *Server) pop(w http.ResponseWriter, r *http.Request) {
	s.stats.popRequests.Add(1)
	p, err := s.parsePop(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	if s.maint.Pop() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	pl, epoch, err := s.queuePlane(r.Context(), p.req.Tenant, "", p.req.Queue, false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	p.req.Epoch = epoch
	err = s.longPoll(w, r, pl, p, s.admitted(r, pl.consumer.One(p.req)))
	if s.movedOnce(err, p.req.Tenant, func() []string { return []string{p.req.Queue} }) {
		s.popAgain(w, r, p, pl)
	}
}

// popAgain runs a pop whose queue moved once more, routed again (moved.go):
// the queue frozen where it was, or moved again, is answered moving.
func (s *Server) popAgain(w http.ResponseWriter, r *http.Request, p popParams, was *plane) {
	pl, epoch, err := s.queuePlane(r.Context(), p.req.Tenant, "", p.req.Queue, false)
	switch {
	case err != nil:
		s.placementFailed(w, r, err)
		return
	case pl == was && epoch == p.req.Epoch:
		writeMoving(w, &movingError{queue: p.req.Queue})
		return
	}
	p.req.Epoch = epoch
	if err := s.longPoll(w, r, pl, p, s.admitted(r, pl.consumer.One(p.req))); err != nil {
		writeMoving(w, &movingError{queue: p.req.Queue})
	}
}

// popDiscover pops from the tenant's queues matching namespace and/or task,
// highest priority first.
func (s *Server) popDiscover(w http.ResponseWriter, r *http.Request) {
	s.stats.popRequests.Add(1)
	p, err := s.parsePop(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	q := r.URL.Query()
	ns, task := q.Get("namespace"), q.Get("task")
	if ns == "" && task == "" {
		writeError(w, http.StatusBadRequest, "namespace or task is required")
		return
	}
	if s.maint.Pop() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.router != nil {
		s.discoverSharded(w, r, p, ns, task) // pop_shards.go
		return
	}
	_ = s.longPoll(w, r, &s.plane, p, s.admitted(r, s.consumer.Discover(p.req, ns, task)))
}

// admitted runs each try of a pop under the arbiter's pop lane, so a
// parked pop holds no slot while it waits.
func (s *Server) admitted(r *http.Request, try consume.Try) consume.Try {
	return func(ctx context.Context) (consume.PopResult, error) {
		release, err := s.admit(r, admission.Pop)
		if err != nil {
			return consume.PopResult{}, err
		}
		defer release()
		return try(ctx)
	}
}

// longPoll runs a pop through the consumer (queen/consume holds the wait
// and claim rules) and answers how it ended: the claim (200), nothing
// (204), or nothing at all when the client left.
//
// A pop the fence answered moved (shards only: the queue moved or froze,
// perhaps while the pop waited) is answered nothing: its error is returned
// for the caller to route it again; nil otherwise.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, pl *plane, p popParams, try consume.Try) error {
	return s.longPollAt(w, r, pl, p, try, nil)
}

// longPollAt is longPoll for a try that may claim on another plane than
// pl (a pop by namespace or task across shards): at, when not nil, is
// where it claimed, and the claim is delivered there, or given back there
// when its client left (pl's consumer gave it back on pl, where it is
// not). A shard that failed the try answers 503 naming it (fanError).
func (s *Server) longPollAt(w http.ResponseWriter, r *http.Request, pl *plane, p popParams, try consume.Try, at *shardClaim) error {
	res, err := pl.consumer.Pop(r.Context(), consume.Request{Tenant: p.req.Tenant, Queue: p.req.Queue, Group: p.req.Group,
		Wait: p.wait, Timeout: p.timeout}, try)
	if err != nil && s.router != nil && store.Moved(err) {
		return err
	}
	if err != nil {
		s.fanError(w, r, "pop", err)
		return nil
	}
	if at != nil && at.pl != nil && at.pl != pl {
		if res.Outcome == consume.Gone {
			at.pl.consumer.Release(at.lease)
		}
		pl = at.pl
	}
	switch res.Outcome {
	case consume.Claimed:
		s.stats.popMessages.Add(int64(len(res.Claim.Messages)))
		for _, m := range res.Claim.Messages {
			s.queueMessages.add(p.req.Tenant, m.Queue, "pop", 1)
		}
		s.recordPopped(p.req.Tenant, res.Claim)
		s.deliver(w, pl, p, res.Claim)
	case consume.Empty, consume.Draining:
		s.recordEmptyPop(p.req.Tenant, p.req.Queue)
		w.WriteHeader(http.StatusNoContent)
	case consume.Gone:
	}
	return nil
}

// deliver writes a claim's answer. A normal pop's messages stay leased to
// the client; an autoAck pop's are completed only after the answer was
// written and flushed, and before the handler returns, so the client reads
// the end of the answer only once they are (its next pop finds the
// partition free). An answer that could not be written gives the claim
// back: its messages were delivered to nobody.
func (s *Server) deliver(w http.ResponseWriter, pl *plane, p popParams, res consume.PopResult) {
	body := popBody(res)
	body.Autopilot = p.autopilot
	if p.autoAck {
		// The lease is the broker's own: the client has nothing to ack.
		body.LeaseID = ""
		for i := range body.Messages {
			body.Messages[i].LeaseID = ""
		}
	}
	err := writePop(w, body)
	if err == nil && p.autoAck {
		err = http.NewResponseController(w).Flush()
	}
	if err != nil {
		s.log.Debug("pop answer not delivered; claim released", "queue", res.Queue, "err", err)
		pl.consumer.Release(res.LeaseID)
		return
	}
	if p.autoAck && pl.consumer.CompleteWith(p.req.Tenant, res, s.autoAckOn(pl, res.Queue)) {
		s.recordAutoAcked(p.req.Tenant, res)
	}
}

// autoAckOn is how an autoAck pop's completion of queue's messages acks on
// pl, the plane that claimed: its consumer's Ack; with shards, when the
// fence answers moved (the queue froze or moved since the claim), the ack
// is routed again (ackRouted), which finds the lease where the move took
// it, or answers moving (the lease then expires and the messages are
// delivered again: at least once).
func (s *Server) autoAckOn(pl *plane, queue string) consume.AckFunc {
	if s.router == nil {
		return pl.consumer.Ack
	}
	return func(ctx context.Context, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
		out, err := pl.consumer.Ack(ctx, tenant, group, items)
		if !s.movedOnce(err, tenant, func() []string { return []string{queue} }) {
			return out, err
		}
		return s.ackRouted(ctx, tenant, group, items)
	}
}
