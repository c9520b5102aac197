package httpapi

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/queen-go/queen/queen/auth"
	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/mover"
)

// Moves is the shard mover and the catalogue as the admin routes of a
// broker with shards reach them (Options.Moves); nil without shards, when
// those routes answer 501.
type Moves interface {
	// Plan records a move of the tenant's queue to shard to and has it
	// run in the background; its errors are mover's.
	Plan(ctx context.Context, tenant, queue, to string) (string, error)
	// Move reads a move (mover.ErrNoMove when there is none).
	Move(ctx context.Context, id string) (mover.Status, error)
	// Placements pages through the tenant's placements by queue name.
	Placements(ctx context.Context, tenant, after string, limit int) ([]catalog.QueuePlacement, error)
	// Loads are the shards with their queue counts.
	Loads(ctx context.Context) ([]catalog.ShardLoad, error)
}

// Bounds of a placements page.
const (
	placementsPage    = 1000
	placementsPageMax = 10000
)

// moveRoutes lists the routes of queues placed on shards: a move, its
// state, and the placements.
func (s *Server) moveRoutes() []route {
	return []route{
		{"POST /api/v1/admin/queues/{queue}/move", auth.Admin, s.startMove},
		{"GET /api/v1/admin/moves/{moveId}", auth.Admin, s.getMove},
		{"GET /api/v1/admin/placements", auth.Admin, s.listPlacements},
	}
}

// noShards answers the move routes of a broker without shards.
func (s *Server) noShards(w http.ResponseWriter) bool {
	if s.moves != nil {
		return false
	}
	writeError(w, http.StatusNotImplemented, "queues are moved between shards: this broker has none (QUEEN_SHARDS)")
	return true
}

// moveStarted is the 202 of a planned move.
type moveStarted struct {
	MoveID string `json:"moveId"`
	Queue  string `json:"queue"`
	To     string `json:"to"`
	State  string `json:"state"`
}

// startMove is POST /api/v1/admin/queues/{queue}/move with {"to":shard}:
// it plans the move and answers 202 with its id; the move runs in the
// background (GET /api/v1/admin/moves/{moveId} follows it).
func (s *Server) startMove(w http.ResponseWriter, r *http.Request) {
	if s.noShards(w) {
		return
	}
	body, err := readObject(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	to, ok, err := body.str("to", "")
	if err == nil && (!ok || to == "") {
		err = bad("to (the destination shard's name) is required")
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	queue := r.PathValue("queue")
	id, err := s.moves.Plan(r.Context(), tenantOf(r), queue, to)
	if err != nil {
		s.moveError(w, r, "plan move", err)
		return
	}
	s.log.Info("queue move planned", "move", id, "queue", queue, "to", to)
	writeJSON(w, http.StatusAccepted, moveStarted{MoveID: id, Queue: queue, To: to, State: mover.StatePlan})
}

// moveError answers a mover's or the catalogue's error: a refusal by its
// kind, anything else as a store error (503 when unreachable).
func (s *Server) moveError(w http.ResponseWriter, r *http.Request, op string, err error) {
	switch {
	case errors.Is(err, mover.ErrUnknownQueue), errors.Is(err, mover.ErrNoMove):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, mover.ErrBadQueue), errors.Is(err, mover.ErrUnknownShard), errors.Is(err, mover.ErrSameShard):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, mover.ErrMoveUnfinished), errors.Is(err, mover.ErrBusy):
		writeError(w, http.StatusConflict, err.Error())
	default:
		s.storeError(w, r, op, err)
	}
}

// moveAnswer is GET /api/v1/admin/moves/{moveId}'s answer.
type moveAnswer struct {
	MoveID        string `json:"moveId"`
	Queue         string `json:"queue"`
	From          string `json:"from"`
	To            string `json:"to"`
	State         string `json:"state"`
	Reason        string `json:"reason,omitempty"`
	Epoch         int64  `json:"epoch"`
	RowsCopied    int64  `json:"rowsCopied"`
	CopyMs        int64  `json:"copyMs"`
	FreezePauseMs int64  `json:"freezePauseMs"`
}

// uuidPath is a move id's form.
var uuidPath = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// getMove is GET /api/v1/admin/moves/{moveId}: a move of the caller's
// tenant (another tenant's is not found).
func (s *Server) getMove(w http.ResponseWriter, r *http.Request) {
	if s.noShards(w) {
		return
	}
	id := r.PathValue("moveId")
	if !uuidPath.MatchString(id) {
		writeError(w, http.StatusBadRequest, "moveId must be a UUID")
		return
	}
	st, err := s.moves.Move(r.Context(), id)
	if err == nil && st.Tenant != tenantOf(r) {
		err = mover.ErrNoMove
	}
	if err != nil {
		s.moveError(w, r, "read move", err)
		return
	}
	writeJSON(w, http.StatusOK, moveAnswer{MoveID: st.ID, Queue: st.Queue, From: st.From, To: st.To, State: st.State,
		Reason: st.Reason, Epoch: st.Epoch, RowsCopied: st.RowsCopied,
		CopyMs: st.CopyDuration.Milliseconds(), FreezePauseMs: st.FreezePause.Milliseconds()})
}

// placementsAnswer is GET /api/v1/admin/placements' answer: the shards,
// and one page of the tenant's queues with their shards; Next is the
// after of the next page, empty on the last.
type placementsAnswer struct {
	Shards     []shardAnswer     `json:"shards"`
	Placements []placementAnswer `json:"placements"`
	Next       string            `json:"next,omitempty"`
}

type shardAnswer struct {
	Name     string `json:"name"`
	Queues   int64  `json:"queues"`
	Draining bool   `json:"draining"`
}

type placementAnswer struct {
	Queue     string    `json:"queue"`
	Shard     string    `json:"shard"`
	Epoch     int64     `json:"epoch"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// listPlacements is GET /api/v1/admin/placements?after=&limit=.
func (s *Server) listPlacements(w http.ResponseWriter, r *http.Request) {
	if s.noShards(w) {
		return
	}
	limit, err := pageLimit(r.URL.Query().Get("limit"))
	if err != nil {
		writeBad(w, err)
		return
	}
	loads, err := s.moves.Loads(r.Context())
	if err != nil {
		s.moveError(w, r, "shard loads", err)
		return
	}
	ps, err := s.moves.Placements(r.Context(), tenantOf(r), r.URL.Query().Get("after"), limit)
	if err != nil {
		s.moveError(w, r, "placements", err)
		return
	}
	out := placementsAnswer{Shards: make([]shardAnswer, len(loads)), Placements: make([]placementAnswer, len(ps))}
	for i, l := range loads {
		out.Shards[i] = shardAnswer{Name: l.Name, Queues: l.Queues, Draining: l.Draining}
	}
	for i, p := range ps {
		out.Placements[i] = placementAnswer{Queue: p.Queue, Shard: p.Shard, Epoch: p.Epoch, UpdatedAt: p.UpdatedAt}
	}
	if len(ps) == limit {
		out.Next = ps[len(ps)-1].Queue
	}
	writeJSON(w, http.StatusOK, out)
}

// pageLimit reads a placements page's limit: placementsPage when absent.
func pageLimit(v string) (int, error) {
	if v == "" {
		return placementsPage, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > placementsPageMax {
		return 0, bad("limit must be an integer from 1 to %d", placementsPageMax)
	}
	return n, nil
}
