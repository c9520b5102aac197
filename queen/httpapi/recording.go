package httpapi

import (
	"strings"

	"github.com/queen-go/queen/queen/analytics"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// What the handlers tell the analytics recorder (s.rec; nil records
// nothing): per queue, what each push, pop and ack did.

// routeKind classifies a route pattern for the per-broker request counts.
func routeKind(pattern string) int {
	_, path, _ := strings.Cut(pattern, " ")
	switch {
	case path == "/api/v1/push":
		return analytics.RoutePush
	case strings.HasPrefix(path, "/api/v1/pop"):
		return analytics.RoutePop
	case strings.HasPrefix(path, "/api/v1/ack"):
		return analytics.RouteAck
	}
	return analytics.RouteOther
}

// recordPushed counts a push's queued messages per queue.
func (s *Server) recordPushed(tenant string, results []store.PushResult) {
	if s.rec == nil {
		return
	}
	now := s.clock.Now()
	per := map[string]int{}
	for _, res := range results {
		if res.Status == "queued" {
			per[res.QueueName]++
		}
	}
	for q, n := range per {
		s.rec.Pushed(now, tenant, q, n)
	}
}

// recordPopped counts a pop's messages per queue and how old each was;
// an autoAck pop completes them too.
func (s *Server) recordPopped(tenant string, res consume.PopResult) {
	if s.rec == nil {
		return
	}
	now := s.clock.Now()
	type agg struct {
		n            int
		sumMs, maxMs int64
	}
	per := map[string]*agg{}
	for _, m := range res.Messages {
		a := per[m.Queue]
		if a == nil {
			a = &agg{}
			per[m.Queue] = a
		}
		age := max(now.Sub(m.CreatedAt).Milliseconds(), 0)
		a.n, a.sumMs, a.maxMs = a.n+1, a.sumMs+age, max(a.maxMs, age)
	}
	for q, a := range per {
		s.rec.Popped(now, tenant, q, a.n, a.sumMs, a.maxMs)
	}
}

// recordAutoAcked counts an autoAck pop's messages once they are completed:
// an answer that could not be written gave its claim back, and nothing of
// it was consumed.
func (s *Server) recordAutoAcked(tenant string, res consume.PopResult) {
	if s.rec == nil {
		return
	}
	now := s.clock.Now()
	per := map[string]int{}
	for _, m := range res.Messages {
		per[m.Queue]++
	}
	for q, n := range per {
		s.rec.AutoAcked(now, tenant, q, n)
	}
}

// recordEmptyPop counts a pop that answered nothing (a queue's; pops by
// namespace or task name no queue).
func (s *Server) recordEmptyPop(tenant, queue string) {
	if s.rec != nil && queue != "" {
		s.rec.Popped(s.clock.Now(), tenant, queue, 0, 0, 0)
	}
}

// recordAcked counts an ack request's applied items per queue: completed,
// failed, and dead-lettered.
func (s *Server) recordAcked(tenant string, items []store.AckItem, results []store.AckResult) {
	if s.rec == nil {
		return
	}
	type agg struct{ ok, failed, dlq int }
	per := map[string]*agg{}
	for _, res := range results {
		if !res.Success || res.QueueName == "" {
			continue
		}
		a := per[res.QueueName]
		if a == nil {
			a = &agg{}
			per[res.QueueName] = a
		}
		switch {
		case res.DLQ:
			a.failed, a.dlq = a.failed+1, a.dlq+1
		case res.Index >= 0 && res.Index < len(items) && items[res.Index].Status != "" && items[res.Index].Status != "completed":
			a.failed++
		default:
			a.ok++
		}
	}
	now := s.clock.Now()
	for q, a := range per {
		s.rec.Acked(now, tenant, q, a.ok, a.failed, a.dlq)
	}
}
