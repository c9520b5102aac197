package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/waker"
)

// maxLeaseSeconds bounds a lease: an integer number of seconds in
// PostgreSQL. The batch bound (one response must fit in memory) is
// QUEEN_MAX_POP_BATCH.
const maxLeaseSeconds = 366 * 24 * 3600

// popParams are a pop's query parameters.
type popParams struct {
	req     store.PopRequest
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
	p.req = store.PopRequest{
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
	key := waker.Key(p.req.Tenant, p.req.Queue)
	s.longPoll(w, r, p, key, func(ctx context.Context) (store.PopResult, error) {
		release, err := s.admit(r, admission.Pop)
		if err != nil {
			return store.PopResult{}, err
		}
		defer release()
		return s.store.Pop(ctx, p.req)
	})
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
	s.longPoll(w, r, p, waker.Key(p.req.Tenant, ""), func(ctx context.Context) (store.PopResult, error) {
		release, err := s.admit(r, admission.Pop)
		if err != nil {
			return store.PopResult{}, err
		}
		defer release()
		queues, err := s.store.QueuesFor(ctx, p.req.Tenant, ns, task)
		if err != nil {
			return store.PopResult{}, err
		}
		for _, name := range queues {
			req := p.req
			req.Queue = name
			res, err := s.store.Pop(ctx, req)
			if err != nil || len(res.Messages) > 0 {
				return res, err
			}
		}
		return store.PopResult{}, nil
	})
}

// longPoll runs try until it returns messages, or, with wait, until the
// timeout passes. While parked it holds no database connection: it waits on
// the waker (a push on this broker) or its back-off timer, whichever first.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, p popParams, key string, try func(context.Context) (store.PopResult, error)) {
	ctx := r.Context()
	deadline := s.clock.Now().Add(p.timeout)
	interval := s.cfg.PopWaitInitial
	group := p.req.Group
	for empties := 0; ; empties++ {
		// Whether the client had gone before this claim began, read
		// before the check below: a claim it lets through is reported.
		gone := ctx.Err() != nil
		woken, withdraw := s.wake.Wait(key, group)
		if ctx.Err() != nil && !canary.On("claim-after-leave") {
			withdraw(true) // the client is gone: claim nothing
			return
		}
		// Once started, a claim runs to its end even if the client leaves
		// meanwhile (bounded by DB_STATEMENT_TIMEOUT): cancelling it could
		// reach PostgreSQL after its commit and leave a lease nobody
		// knows, hiding the partition for a whole lease. A finished claim
		// whose client has gone is released below.
		res, err := try(context.WithoutCancel(ctx))
		if err != nil {
			withdraw(true)
			s.storeError(w, r, "pop", err)
			return
		}
		if len(res.Messages) > 0 {
			withdraw(true)
			if s.popClaims != nil {
				s.popClaims(PopClaim{Tenant: p.req.Tenant, Queue: res.Queue, LeaseID: res.LeaseID, Messages: len(res.Messages), ClientGone: gone})
			}
			if ctx.Err() != nil {
				// The claim raced the client's disconnect: give it back so
				// the partition is not hidden for a whole lease.
				if !canary.On("cancel-keeps-claim") {
					s.releaseAbandoned(res.LeaseID)
				}
				return
			}
			s.stats.popMessages.Add(int64(len(res.Messages)))
			for _, m := range res.Messages {
				s.queueMessages.add(p.req.Tenant, m.Queue, "pop", 1)
			}
			s.recordPopped(p.req.Tenant, res)
			s.deliver(w, p, res)
			return
		}
		left := deadline.Sub(s.clock.Now())
		if !p.wait || left <= 0 || s.isDraining() {
			withdraw(true)
			s.recordEmptyPop(p.req.Tenant, p.req.Queue)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if empties >= s.cfg.PopWaitThreshold {
			interval = time.Duration(float64(interval) * s.cfg.PopWaitFactor)
			if interval > s.cfg.PopWaitMax {
				interval = s.cfg.PopWaitMax
			}
		}
		sleep := min(interval, left)
		if canary.On("poll-waits-for-wake") {
			sleep = left // no periodic re-check: only a wake ends the wait
		}
		t := s.clock.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			withdraw(true)
			return
		case <-woken:
			t.Stop()
		case <-t.C():
		case <-s.draining:
			// Graceful stop: answer now rather than hold the shutdown.
			t.Stop()
			withdraw(true)
			s.recordEmptyPop(p.req.Tenant, p.req.Queue)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		withdraw(false) // this pop re-checks itself
	}
}

// deliver writes a claim's answer. A normal pop's messages stay leased to
// the client; an autoAck pop's are completed only after the answer was
// written and flushed, and before the handler returns, so the client reads
// the end of the answer only once they are (its next pop finds the
// partition free). An answer that could not be written gives the claim
// back: its messages were delivered to nobody.
func (s *Server) deliver(w http.ResponseWriter, p popParams, res store.PopResult) {
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
		s.releaseAbandoned(res.LeaseID)
		return
	}
	if p.autoAck {
		s.completeAutoAck(p.req.Tenant, res)
	}
}

// completeAutoAck completes an autoAck pop's messages under its lease, as
// the client's own ack would (through the ack combiner). Should it fail,
// the lease expires and the messages are delivered again: at least once,
// as a broker crash between the answer and this ack also gives.
func (s *Server) completeAutoAck(tenant string, res store.PopResult) {
	items := make([]store.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = store.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID, Status: "completed"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.store.Ack(ctx, tenant, res.Group, items)
	if err == nil {
		for _, r := range out {
			if !r.Success {
				err = fmt.Errorf("%s: %s", r.TransactionID, r.Error)
				break
			}
		}
	}
	if err != nil {
		s.log.Warn("autoAck completion failed; the messages are redelivered when the lease ends",
			"queue", res.Queue, "lease", res.LeaseID, "err", err)
		return
	}
	s.recordAutoAcked(tenant, res)
}

func (s *Server) releaseAbandoned(leaseID string) {
	if leaseID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.store.Release(ctx, leaseID); err != nil {
		s.log.Warn("release of abandoned pop failed; its lease will expire instead", "lease", leaseID, "err", err)
	}
}
