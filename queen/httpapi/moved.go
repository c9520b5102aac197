package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
)

// A shard's fence answers "moved" (store.ErrMoved) to a statement routed
// with an epoch its queue is no longer at: the queue moved to another
// shard, or is frozen for a move. The broker, never the client, handles
// it: it forgets the queue's cached placement and routes the request
// again, once. When the fresh placement is the one it had (the queue is
// frozen mid-move) or the second try is moved too, the request is answered
// 503 "queue is moving" with Retry-After, nothing written: a retriable
// answer Queen's clients retry. Without shards no statement carries an
// epoch and none of this runs.

// movingError is a request whose queue stayed moved after it was routed
// again.
type movingError struct{ queue string }

func (e *movingError) Error() string { return "queue " + e.queue + " is moving" }

// movingAnswer is the body of a request answered "queue is moving".
type movingAnswer struct {
	Error string `json:"error"`
	Queue string `json:"queue"`
}

// writeMoving answers a *movingError: 503, Retry-After 1 second.
func writeMoving(w http.ResponseWriter, e *movingError) {
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, movingAnswer{Error: "queue is moving", Queue: e.queue})
}

// movedOnce reports whether a request that failed with err is to be routed
// again: shards configured and the fence answered moved. It forgets the
// cached placements of the request's queues (queues, called only then:
// without shards nothing is computed) first.
func (s *Server) movedOnce(err error, tenant string, queues func() []string) bool {
	if s.router == nil || err == nil || !store.Moved(err) {
		return false
	}
	names := queues()
	for _, q := range names {
		s.router.place.Invalidate(tenant, q)
	}
	s.log.Info("queue moved; routing the request again", "tenant", tenant, "queues", names, "err", err)
	return true
}

// stillMoving is err as a *movingError naming queue when it is the fence's
// moved (the second try's), else err.
func stillMoving(err error, queue string) error {
	if store.Moved(err) {
		return &movingError{queue: queue}
	}
	return err
}

// movedQueue names the queue of a moved answer that names no queue of
// the request (a lease extension's): the shard's id of it.
func movedQueue(err error) string {
	var moved *store.MovedError
	if errors.As(err, &moved) {
		return moved.QueueID
	}
	return ""
}

// pushQueues are the distinct queues of items.
func pushQueues(items []store.PushItem) []string {
	var out []string
	for _, it := range items {
		if !slices.Contains(out, it.Queue) {
			out = append(out, it.Queue)
		}
	}
	return out
}

// pushEpochs are items' routed epochs.
func pushEpochs(items []store.PushItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Epoch
	}
	return out
}

// pushRouted pushes items on their queues' plane and, when a queue moved,
// routes them again once (movedOnce). A route that could not be told is
// its error (routeError answers it), as is a *movingError.
func (s *Server) pushRouted(ctx context.Context, tenant, sub string, items []store.PushItem) (pushpath.Outcome, error) {
	pl, err := s.pushPlane(ctx, tenant, items)
	if err != nil {
		return pushpath.Outcome{}, &routeFailure{err}
	}
	out, err := pl.pushes.Push(ctx, tenant, sub, items)
	if !s.movedOnce(err, tenant, func() []string { return pushQueues(items) }) {
		return out, err
	}
	before := pushEpochs(items)
	again, err := s.pushPlane(ctx, tenant, items)
	if err != nil {
		return pushpath.Outcome{}, &routeFailure{err}
	}
	if again == pl && slices.Equal(before, pushEpochs(items)) {
		return pushpath.Outcome{}, &movingError{queue: items[0].Queue}
	}
	out, err = again.pushes.Push(ctx, tenant, sub, items)
	return out, stillMoving(err, items[0].Queue)
}

// routeFailure is a request whose plane could not be picked (routeError
// answers it), told apart from the store's errors.
type routeFailure struct{ err error }

func (e *routeFailure) Error() string { return e.err.Error() }
func (e *routeFailure) Unwrap() error { return e.err }

// routedFailed answers err when it is a routing failure or a
// *movingError, and reports whether it did.
func (s *Server) routedFailed(w http.ResponseWriter, r *http.Request, code string, err error) bool {
	var route *routeFailure
	var moving *movingError
	switch {
	case errors.As(err, &moving):
		writeMoving(w, moving)
	case errors.As(err, &route):
		s.routeError(w, r, code, route.err)
	default:
		return false
	}
	return true
}

// ackRoute is ackPlane with the names of the items' queues (nil without
// shards).
func (s *Server) ackRoute(ctx context.Context, tenant string, items []store.AckItem) (*plane, []string, error) {
	if s.router == nil {
		return &s.plane, nil, nil
	}
	return s.router.ackRoute(ctx, tenant, items)
}

// ackEpochs are items' routed epochs.
func ackEpochs(items []store.AckItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Epoch
	}
	return out
}

// ackRouted acknowledges items on the plane holding their partitions and,
// when a queue moved, routes them again once, as pushRouted does.
func (s *Server) ackRouted(ctx context.Context, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
	pl, queues, err := s.ackRoute(ctx, tenant, items)
	if err != nil {
		return nil, &routeFailure{err}
	}
	results, err := pl.consumer.Ack(ctx, tenant, group, items)
	if !s.movedOnce(err, tenant, func() []string { return queues }) {
		return results, err
	}
	before := ackEpochs(items)
	again, queues, err := s.ackRoute(ctx, tenant, items)
	if err != nil {
		return nil, &routeFailure{err}
	}
	if again == pl && slices.Equal(before, ackEpochs(items)) {
		return nil, &movingError{queue: firstOf(queues)}
	}
	results, err = again.consumer.Ack(ctx, tenant, group, items)
	return results, stillMoving(err, firstOf(queues))
}

// firstOf is the first of names, "" for none.
func firstOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// txnQueues are the queues a transaction pushes to, then those it acks
// (as txnPlane found them).
func txnQueues(ops []txn.Op) []string {
	var out []string
	for _, op := range ops {
		for _, q := range pushQueues(op.Items) {
			if !slices.Contains(out, q) {
				out = append(out, q)
			}
		}
	}
	for _, op := range ops {
		if q := op.Queue; op.Type == "ack" && q != "" && !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// txnEpochs are the routed epochs of a transaction's push items, then of
// its acks.
func txnEpochs(ops []txn.Op) []int64 {
	var out []int64
	for _, op := range ops {
		out = append(out, pushEpochs(op.Items)...)
	}
	for _, op := range ops {
		if op.Type == "ack" {
			out = append(out, op.Ack.Epoch)
		}
	}
	return out
}

// txnAgain runs a transaction whose queue moved once more, routed again,
// as pushRouted does (the first run rolled back whole).
func (s *Server) txnAgain(ctx context.Context, req txn.Request, was *plane) ([]txn.Result, txn.ExtrasResult, error) {
	before := txnEpochs(req.Ops)
	pl, err := s.txnPlane(ctx, req.Tenant, req.Ops, req.Extras)
	if err != nil {
		return nil, txn.ExtrasResult{}, &routeFailure{err}
	}
	queue := firstOf(txnQueues(req.Ops))
	if pl == was && slices.Equal(before, txnEpochs(req.Ops)) {
		return nil, txn.ExtrasResult{}, &movingError{queue: queue}
	}
	results, more, err := txn.Run(ctx, pl.names, pl.writes, req)
	return results, more, stillMoving(err, queue)
}
