package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
	"github.com/queen-go/queen/queen/writes"
)

// plane is what serves the queues of one database: its store, its cached
// names, its write policy, its push path (combiner) and its consumer (pops,
// the ack combiner, watermarks). A broker without shards has one, the
// Server's own (embedded, so its fields read as s.store, s.names and so
// on); with shards it has one per shard and the router picks the plane of
// a request's queue.
type plane struct {
	shard    string // the shard's name; "" without shards
	store    *store.Store
	names    *names.Names
	writes   *writes.Policy
	pushes   *pushpath.Path
	consumer *consume.Consumer
}

// Shard is one shard's dependencies (Options.Shards): its own store and
// what is built over it. Nil Writes, Names and Push are made here as for
// Options.
type Shard struct {
	Name   string
	Store  *store.Store
	Writes *writes.Policy
	Names  *names.Names
	Push   *pushpath.Path
	Retry  combine.Retry
}

// Placement answers where a queue lives (the broker's catalogue and its
// placement cache). Place places a queue that has none (a configure, or a
// push that creates it); Lookup only reads, and answers found false for a
// queue with no placement. Invalidate forgets a queue's cached placement:
// a shard's fence answered "moved" for it.
type Placement interface {
	Place(ctx context.Context, tenant, namespace, queue string) (Placed, error)
	Lookup(ctx context.Context, tenant, queue string) (p Placed, found bool, err error)
	Invalidate(tenant, queue string)
}

// Placed is a queue's placement: its shard, and the epoch every statement
// routed there for it carries (the shard's fence refuses another).
type Placed struct {
	Shard string
	Epoch int64
}

// router holds the planes of a broker with shards and asks the placement
// which one serves a queue. A broker without shards has none (Server.router
// is nil) and never looks anything up.
type router struct {
	place  Placement
	planes map[string]*plane // by shard name
	order  []*plane          // as configured; the first is the default
	seen   seenPartitions    // where acks found partitions (seen.go)
}

// planeFor is the plane serving tenant's queue: the Server's own without
// shards (no lookup, no allocation, no lock: the hot path of every
// deployment without shards), else the queue's shard's. create places a
// queue that has none (namespace is the configure's); without create a
// queue with no placement is served by the default shard, where it does
// not exist either, so the answer is today's for a missing queue.
func (s *Server) planeFor(ctx context.Context, tenant, namespace, queue string, create bool) (*plane, error) {
	pl, _, err := s.queuePlane(ctx, tenant, namespace, queue, create)
	return pl, err
}

// queuePlane is planeFor with the epoch the queue was found at, which the
// statements for it carry: 0 without shards (no check), unplacedEpoch for
// a queue with no placement.
func (s *Server) queuePlane(ctx context.Context, tenant, namespace, queue string, create bool) (*plane, int64, error) {
	if s.router == nil {
		return &s.plane, 0, nil
	}
	return s.router.find(ctx, tenant, namespace, queue, create)
}

// find is queuePlane with shards.
func (rt *router) find(ctx context.Context, tenant, namespace, queue string, create bool) (*plane, int64, error) {
	var p Placed
	var err error
	if create {
		p, err = rt.place.Place(ctx, tenant, namespace, queue)
	} else {
		var found bool
		p, found, err = rt.place.Lookup(ctx, tenant, queue)
		if err == nil && !found {
			return rt.order[0], unplacedEpoch, nil
		}
	}
	if err != nil {
		return nil, 0, &placementError{queue: queue, err: err}
	}
	pl := rt.planes[p.Shard]
	if pl == nil {
		return nil, 0, &placementError{queue: queue, err: &unknownShardError{shard: p.Shard}}
	}
	return pl, p.Epoch, nil
}

// unplacedEpoch is the epoch a statement for a queue with no placement
// carries with shards: the epoch its rows were born at (migration 020's
// default; a queue created before shards were configured), not 0, which
// the statements take as "no check". So a request that looked the queue up
// before a push placed it and a move froze it still meets the fence on
// the frozen rows (-1), fails as moved and is routed again.
const unplacedEpoch = 1

// placementError is a queue whose shard could not be told: the catalogue
// unreachable, or a shard this broker does not configure.
type placementError struct {
	queue string
	err   error
}

func (e *placementError) Error() string {
	return "placement of queue " + e.queue + ": " + e.err.Error()
}
func (e *placementError) Unwrap() error { return e.err }

// unknownShardError is a placement naming a shard this broker's
// QUEEN_SHARDS does not configure.
type unknownShardError struct{ shard string }

func (e *unknownShardError) Error() string {
	return "the catalogue places it on shard " + e.shard + ", which QUEEN_SHARDS does not configure here"
}

// placementFailed answers a request whose queue's shard could not be told:
// 503, as for an unreachable database (the catalogue is one), naming the
// queue; nothing was written.
func (s *Server) placementFailed(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	s.stats.dbErrors.Add(1)
	s.log.Warn("placement unavailable", "err", err)
	writeError(w, http.StatusServiceUnavailable, "placement unavailable: "+err.Error())
}

// newPlane builds one database's plane from sh, making what sh leaves nil
// as New always did: a write policy sealing with o.Cipher, a name cache
// forgetting its hints, a push path, and the consumer.
func (s *Server) newPlane(o Options, sh Shard) plane {
	if sh.Writes == nil {
		sh.Writes = writes.New(sh.Store, writes.Options{Cipher: o.Cipher, Clock: o.Clock, TTL: o.Config.CacheRefreshInterval})
	}
	if sh.Names == nil {
		sh.Names = names.New(sh.Store, names.Options{Clock: o.Clock, TTL: o.Config.CacheRefreshInterval, SealHints: sh.Writes})
	}
	pl := plane{shard: sh.Name, store: sh.Store, names: sh.Names, writes: sh.Writes, pushes: sh.Push}
	pl.consumer = consume.New(consume.Options{Store: sh.Store, Retry: sh.Retry, Names: sh.Names, Cipher: o.Cipher, Waker: o.Waker, Clock: o.Clock, Draining: s.draining, OnClaim: o.PopClaims, Log: o.Logger,
		AckStatements: o.Config.AckStatements, AckBatchRows: o.Config.PushBatchRows, PopStatements: o.Config.PopStatements,
		Wait: consume.Wait{Initial: o.Config.PopWaitInitial, Threshold: o.Config.PopWaitThreshold, Factor: o.Config.PopWaitFactor, Max: o.Config.PopWaitMax}})
	if pl.pushes == nil {
		pl.pushes = pushpath.New(pushpath.Options{Store: sh.Store, Retry: sh.Retry, Writes: sh.Writes, Names: sh.Names, Spool: o.Spool, Diverted: s.maint.Push, Ping: s.drainPing(),
			Cipher: o.Cipher, Arbiter: o.Arbiter, IDs: o.IDs, Log: o.Logger})
	}
	return pl
}

// newRouter builds a plane per shard: the first is the Server's own
// (built from Options' Store and the rest, which the broker sets to the
// first shard's), the others from their Shard.
func (s *Server) newRouter(o Options) *router {
	rt := &router{place: o.Placement, planes: make(map[string]*plane, len(o.Shards))}
	for i, sh := range o.Shards {
		pl := &s.plane
		if i > 0 {
			p := s.newPlane(o, sh)
			pl = &p
		}
		pl.shard = sh.Name
		rt.planes[sh.Name] = pl
		rt.order = append(rt.order, pl)
	}
	return rt
}

// deref is *p, "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// crossShardError refuses a request whose queues live on several shards:
// this build runs each request on one shard's database, all or nothing
// there (two-phase commit is a later step).
type crossShardError struct{ shards []string }

func (e *crossShardError) Error() string {
	return "the request's queues live on several shards: " + strings.Join(e.shards, ", ")
}

// pushPlane is the plane of every item's queue, placing the queues that
// have none (a push creates its queue), and sets each item's Epoch to its
// queue's. Items on several shards are a *crossShardError: a push is one
// statement on one database.
func (s *Server) pushPlane(ctx context.Context, tenant string, items []store.PushItem) (*plane, error) {
	if s.router == nil {
		return &s.plane, nil
	}
	var pl *plane
	var shards []string
	seen := map[string]int64{}
	for i, it := range items {
		if epoch, ok := seen[it.Queue]; ok {
			items[i].Epoch = epoch
			continue
		}
		p, epoch, err := s.router.find(ctx, tenant, "", it.Queue, true)
		if err != nil {
			return nil, err
		}
		seen[it.Queue], items[i].Epoch = epoch, epoch
		if pl == nil {
			pl = p
		}
		if !slices.Contains(shards, p.shard) {
			shards = append(shards, p.shard)
		}
	}
	if len(shards) > 1 {
		return nil, &crossShardError{shards: shards}
	}
	return pl, nil
}

// crossShard answers a *crossShardError: 409 naming the shards, nothing
// written.
func writeCrossShard(w http.ResponseWriter, code string, e *crossShardError) {
	writeJSON(w, http.StatusConflict, crossShardAnswer{Error: code, Shards: e.shards})
}

// crossShardAnswer is the body of a request refused for spanning shards.
type crossShardAnswer struct {
	Error  string   `json:"error"`
	Shards []string `json:"shards"`
}

// routeError answers a failure to pick a request's plane: a request
// spanning shards (409, code naming what it was) or an unknown placement
// (503).
func (s *Server) routeError(w http.ResponseWriter, r *http.Request, code string, err error) {
	var cross *crossShardError
	if errors.As(err, &cross) {
		writeCrossShard(w, code, cross)
		return
	}
	s.placementFailed(w, r, err)
}

// ackPlane is the plane holding the partitions the acknowledgements name
// (an ack names its partition, not its queue), and sets each item's Epoch
// to its queue's. Without shards it is the Server's own, with no lookup.
// With shards, ackRoute.
func (s *Server) ackPlane(ctx context.Context, tenant string, items []store.AckItem) (*plane, error) {
	pl, _, err := s.ackRoute(ctx, tenant, items)
	return pl, err
}

// ackRoute is ackPlane with shards, and the names of the queues the items'
// partitions belong to (what a "moved" answer invalidates).
func (rt *router) ackRoute(ctx context.Context, tenant string, items []store.AckItem) (*plane, []string, error) {
	pids := make([]string, 0, len(items))
	for _, it := range items {
		if !slices.Contains(pids, it.PartitionID) {
			pids = append(pids, it.PartitionID)
		}
	}
	pl, at, err := rt.locate(ctx, tenant, pids)
	if err != nil {
		return nil, nil, err
	}
	var queues []string
	for i, it := range items {
		items[i].Epoch = at[it.PartitionID].Epoch
		if q := at[it.PartitionID].queue; q != "" && !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	return pl, queues, nil
}

// partitionAt is where locate found a partition: its queue and the
// queue's placement epoch (0: the queue has none).
type partitionAt struct {
	queue string
	Epoch int64
}

// locate is the one plane holding the partitions pids (the default one
// when none holds any), and per partition its queue and epoch. Partitions
// seen before on the shard their queue's placement still names are routed
// there at once (seen.go); otherwise every shard is asked which it holds:
// a shard that cannot answer fails it unless the others held every
// partition. A partition lives on one shard, but during and after a move
// on two: its queue's placement says which serves it (pick). Partitions
// served by several shards are a *crossShardError.
func (rt *router) locate(ctx context.Context, tenant string, pids []string) (*plane, map[string]partitionAt, error) {
	if pl, at, ok := rt.locateSeen(ctx, tenant, pids); ok {
		return pl, at, nil
	}
	pl, at, err := rt.locateAll(ctx, tenant, pids)
	if err == nil && at != nil {
		rt.remember(ctx, tenant, pl, at)
	}
	return pl, at, err
}

// locateAll is locate asking every shard.
func (rt *router) locateAll(ctx context.Context, tenant string, pids []string) (*plane, map[string]partitionAt, error) {
	holders := map[*plane][]store.PartitionRow{}
	down := map[*plane]error{}
	var failed error
	held := 0
	for _, pl := range rt.order {
		here, err := pl.store.PartitionsHere(ctx, tenant, pids)
		if err != nil {
			down[pl] = fmt.Errorf("shard %s: %w", pl.shard, err)
			failed = errors.Join(failed, down[pl])
			continue
		}
		if len(here) > 0 {
			holders[pl], held = here, held+len(here)
		}
	}
	switch {
	case failed != nil && held < len(pids):
		return nil, nil, &placementError{queue: "of partition " + strings.Join(pids, ", "), err: failed}
	case len(holders) == 0:
		return rt.order[0], nil, nil
	}
	return rt.pick(ctx, tenant, holders, down)
}

// pick is locate's choice among the shards holding the partitions: each
// partition's is the shard its queue's placement names when that one holds
// it, else the one holding it (a queue with no placement, or a placement
// naming a shard the rows are not on yet); the epoch is the placement's in
// both cases, so a frozen copy refuses it. A partition whose placement
// names a shard that did not answer (down) is a *placementError: another
// holder's rows are then a move's leftovers, and the source's cleanup
// deletes the cursor rows (the fence) before the messages, so an ack
// there would be refused for good ("Invalid or expired lease") while its
// lease lives on the destination.
func (rt *router) pick(ctx context.Context, tenant string, holders map[*plane][]store.PartitionRow,
	down map[*plane]error) (*plane, map[string]partitionAt, error) {
	where := map[string][]*plane{} // partition id -> the shards holding it
	queueOf := map[string]string{}
	for _, holder := range rt.order {
		for _, row := range holders[holder] {
			where[row.ID], queueOf[row.ID] = append(where[row.ID], holder), row.Queue
		}
	}
	at := make(map[string]partitionAt, len(where))
	var chosen []*plane
	for pid, held := range where {
		p, found, err := rt.place.Lookup(ctx, tenant, queueOf[pid])
		if err != nil {
			return nil, nil, &placementError{queue: queueOf[pid], err: err}
		}
		pl, placed := held[0], rt.planes[p.Shard]
		if err := down[placed]; found && err != nil {
			return nil, nil, &placementError{queue: queueOf[pid], err: err}
		}
		if found && slices.Contains(held, placed) {
			pl = held[slices.Index(held, placed)]
		} else if len(held) > 1 {
			return nil, nil, &crossShardError{shards: shardNames(held)}
		}
		if !found {
			p.Epoch = unplacedEpoch
		}
		at[pid] = partitionAt{queue: queueOf[pid], Epoch: p.Epoch}
		if !slices.Contains(chosen, pl) {
			chosen = append(chosen, pl)
		}
	}
	if len(chosen) > 1 {
		var names []string
		for _, pl := range rt.order {
			if slices.Contains(chosen, pl) {
				names = append(names, pl.shard)
			}
		}
		return nil, nil, &crossShardError{shards: names}
	}
	return chosen[0], at, nil
}

// shardNames are the planes' shards.
func shardNames(pls []*plane) []string {
	out := make([]string, len(pls))
	for i, pl := range pls {
		out[i] = pl.shard
	}
	return out
}

// extendOn extends a lease where it is: without shards on the one store;
// with shards on each shard that holds it live for a queue the placement
// puts there, at the placement's epoch (a lease id names no queue, so each
// shard first says which queues it holds the lease in). A shard holding
// the lease for a queue placed elsewhere is passed over: a move's
// destination holds the copied lease before its activation, and an
// extension written there would be overwritten by the copy, a lease lost
// while answered renewed. A lease held only where the queue is frozen, or
// at a stale epoch, is a *movingError (its placement forgotten, so the
// client's retry reads the new one).
func (s *Server) extendOn(ctx context.Context, tenant, leaseID string, seconds int) (int64, *time.Time, error) {
	if s.router == nil {
		return s.store.ExtendLease(ctx, tenant, leaseID, seconds)
	}
	var moved error
	for _, pl := range s.router.order {
		placed, err := s.placedHere(ctx, pl, tenant, leaseID)
		if err != nil || len(placed) == 0 {
			if err != nil {
				return 0, nil, err
			}
			continue
		}
		n, exp, err := pl.store.ExtendPlacedLease(ctx, tenant, leaseID, seconds, placed)
		switch {
		case store.Moved(err):
			moved = err
			for _, q := range placed {
				s.router.place.Invalidate(tenant, q.Name)
			}
		case err != nil || n > 0:
			return n, exp, err
		}
	}
	if moved != nil {
		return 0, nil, &movingError{queue: movedQueue(moved)}
	}
	return 0, nil, nil
}

// placedHere are the queues in which pl's shard holds leaseID live and
// which the placement puts on that shard, with their epochs.
func (s *Server) placedHere(ctx context.Context, pl *plane, tenant, leaseID string) ([]store.PlacedQueue, error) {
	names, err := pl.store.LeaseQueues(ctx, tenant, leaseID)
	if err != nil {
		return nil, err
	}
	var placed []store.PlacedQueue
	for _, name := range names {
		p, found, err := s.router.place.Lookup(ctx, tenant, name)
		if err != nil {
			return nil, err
		}
		if found && p.Shard == pl.shard {
			placed = append(placed, store.PlacedQueue{Name: name, Epoch: p.Epoch})
		}
	}
	return placed, nil
}

// shardReady are the routes a broker with shards serves: those routed to
// their queue's shard (configure, push, pops of a named queue, acks,
// lease extension, transactions, a queue's delete, detail, depth and
// status), those reading every shard and merging (fanout.go: the queue,
// namespace and task lists, the overview, status, consumer groups and
// metrics), /health (every shard pinged), and those that read no database. Handler
// answers every other route 501 with shards, rather than an answer from
// one shard only.
var shardReady = map[string]bool{
	"POST /api/v1/configure":                              true,
	"POST /api/v1/push":                                   true,
	"GET /api/v1/pop/queue/{queue}":                       true,
	"GET /api/v1/pop/queue/{queue}/partition/{partition}": true,
	"GET /api/v1/pop":                                     true, // pop_shards.go: every shard's queues, each popped on its own
	"POST /api/v1/ack":                                    true,
	"POST /api/v1/ack/batch":                              true,
	"POST /api/v1/lease/{leaseId}/extend":                 true,
	"POST /api/v1/transaction":                            true,
	"DELETE /api/v1/resources/queues/{queue}":             true,
	"GET /api/v1/resources/queues/{queue}":                true,
	"GET /api/v1/resources/queues/{queue}/depth":          true,
	"GET /api/v1/resources/queues":                        true, // fanout.go: every shard read, merged
	"GET /api/v1/resources/namespaces":                    true,
	"GET /api/v1/resources/tasks":                         true,
	"GET /api/v1/resources/overview":                      true,
	"GET /api/v1/status":                                  true,
	"GET /api/v1/status/queues":                           true,
	"GET /api/v1/status/queues/{queue}":                   true,
	"GET /api/v1/status/queues/{queue}/messages":          true,
	"GET /api/v1/consumer-groups":                         true,
	"GET /api/v1/consumer-groups/lagging":                 true,
	"GET /api/v1/consumer-groups/{group}":                 true,
	// The groups' writes (groups_shards.go): on the named queue's shard,
	// or on every shard for the group's.
	"DELETE /api/v1/consumer-groups/{group}":                                          true,
	"DELETE /api/v1/consumer-groups/{group}/queues/{queue}":                           true,
	"POST /api/v1/consumer-groups/{group}/queues/{queue}/seek":                        true,
	"POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek": true,
	"POST /api/v1/consumer-groups/{group}/subscription":                               true,
	"GET /metrics":                           true,
	"GET /metrics/prometheus":                true,
	"GET /health":                            true,
	"POST /api/v1/admin/queues/{queue}/move": true,
	"GET /api/v1/admin/moves/{moveId}":       true,
	"GET /api/v1/admin/placements":           true,
	"GET /api/v1/session":                    true,
	"GET /api/v1/system/shared-state":        true,
	"GET /api/v1/migration/status":           true,
	"POST /api/v1/migration/test-connection": true,
	"POST /api/v1/migration/start":           true,
	"POST /api/v1/migration/validate":        true,
	"POST /api/v1/migration/reset":           true,
	"GET /dashboard":                         true,
	"GET /dashboard/":                        true,
	"GET /favicon.ico":                       true,
	"GET /":                                  true, // QUEEN_DASHBOARD_DIR's files

	// The DLQ, message and trace routes: lists merged across the shards
	// (or read on a named queue's), a message's on its partition's shard
	// (fanout_reads.go).
	"GET /api/v1/dlq":                                           true,
	"GET /api/v1/messages":                                      true,
	"GET /api/v1/messages/by-transaction":                       true,
	"GET /api/v1/messages/{partitionId}/{transactionId}":        true,
	"DELETE /api/v1/messages/{partitionId}/{transactionId}":     true,
	"POST /api/v1/messages/{partitionId}/{transactionId}/retry": true,
	"POST /api/v1/traces":                                       true,
	"GET /api/v1/traces/names":                                  true,
	"GET /api/v1/traces/by-name/{traceName}":                    true,
	"GET /api/v1/traces/{partitionId}/{transactionId}":          true,
}

// shardGate is rt's handler on this broker: its own, or with shards a 501
// for a route not in shardReady.
func (s *Server) shardGate(rt route) http.HandlerFunc {
	if s.router == nil || shardReady[rt.pattern] {
		return rt.handle
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotImplemented, notSharded{Error: "not supported with shards yet", Route: rt.pattern})
	}
}

// notSharded is the body of a route a broker with shards does not serve
// yet.
type notSharded struct {
	Error string `json:"error"`
	Route string `json:"route"`
}

// ping pings the database, with shards every shard's, and answers the
// first failure naming its shard.
func (s *Server) ping(ctx context.Context) error {
	if s.router == nil {
		return s.store.Ping(ctx)
	}
	for _, pl := range s.router.order {
		if err := pl.store.Ping(ctx); err != nil {
			return fmt.Errorf("shard %s: %w", pl.shard, err)
		}
	}
	return nil
}

// txnPlane is the one plane a transaction runs on: its pushes' queues
// (placed when new) and its acks' partitions. Without shards it is the
// Server's own. With shards, operations on several shards are a
// *crossShardError (all-or-nothing needs one database: two-phase commit
// is a later step), and timers or KV operations are errNotShardedYet (where
// they live with shards is not decided yet).
func (s *Server) txnPlane(ctx context.Context, tenant string, ops []txn.Op, extras txn.Extras) (*plane, error) {
	if s.router == nil {
		return &s.plane, nil
	}
	if len(extras.Timers)+len(extras.KV) > 0 {
		return nil, errNotShardedYet
	}
	var items []store.PushItem
	var pids []string
	for _, op := range ops {
		items = append(items, op.Items...)
		if op.Type == "ack" && !slices.Contains(pids, op.Ack.PartitionID) {
			pids = append(pids, op.Ack.PartitionID)
		}
	}
	var found []*plane
	if len(items) > 0 {
		pl, err := s.pushPlane(ctx, tenant, items)
		if err != nil {
			return nil, err
		}
		found = append(found, pl)
		setTxnEpochs(ops, items)
	}
	if len(pids) > 0 {
		pl, at, err := s.router.locate(ctx, tenant, pids)
		if err != nil {
			return nil, err
		}
		found = append(found, pl)
		setTxnAckEpochs(ops, at)
	}
	if len(found) == 2 && found[0] != found[1] {
		return nil, &crossShardError{shards: []string{found[0].shard, found[1].shard}}
	}
	if len(found) == 0 {
		return s.router.order[0], nil
	}
	return found[0], nil
}

// setTxnAckEpochs gives the acks of ops their partitions' queue epochs and
// queues, as locate found them (an ack names its partition, not its queue).
func setTxnAckEpochs(ops []txn.Op, at map[string]partitionAt) {
	for i := range ops {
		if ops[i].Type == "ack" {
			where := at[ops[i].Ack.PartitionID]
			ops[i].Ack.Epoch, ops[i].Queue = where.Epoch, where.queue
		}
	}
}

// setTxnEpochs gives the push items of ops, in order, the epochs pushPlane
// set on items, their copies.
func setTxnEpochs(ops []txn.Op, items []store.PushItem) {
	k := 0
	for i := range ops {
		for j := range ops[i].Items {
			ops[i].Items[j].Epoch = items[k].Epoch
			k++
		}
	}
}

// errNotShardedYet refuses, with shards, a request part this build
// cannot route yet.
var errNotShardedYet = errors.New("not supported with shards yet")

// txnUnrouted answers a transaction txnPlane refused: 409
// cross_shard_transaction naming the shards, 501 for timers or KV with
// shards, else the placement's 503.
func (s *Server) txnUnrouted(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errNotShardedYet) {
		writeJSON(w, http.StatusNotImplemented, notSharded{Error: errNotShardedYet.Error(), Route: "POST /api/v1/transaction (timers, kv)"})
		return
	}
	s.routeError(w, r, "cross_shard_transaction", err)
}
