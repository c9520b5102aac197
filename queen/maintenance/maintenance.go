// Package maintenance holds the broker's two maintenance switches.
//
// Push maintenance diverts every push to the spool and pauses the drain, for
// a planned failover; pop maintenance makes every pop answer empty. The
// in-process flags are authoritative on the hot path; the system_state rows
// are the shared copy. A flip is announced to the other brokers over the mesh
// once its row commits; Reconcile re-reads the rows every
// QUEEN_CACHE_REFRESH_INTERVAL_MS, the floor that makes every replica
// converge when a frame is lost or there is no mesh.
package maintenance

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
)

// State is one broker's view of the switches.
type State struct {
	store *store.Store
	spool *spool.Spool // nil when no spool is configured
	log   *slog.Logger
	push  atomic.Bool
	pop   atomic.Bool
	// gen counts local flip events (start and commit of each), and
	// inflight the flips whose row is not committed yet, so a reconcile
	// read that overlapped a flip cannot undo it with the older row it read.
	gen      atomic.Int64
	inflight int
	mu       sync.Mutex // orders local flips against reconcile applies
	// announce tells the other brokers of a local flip once its row has
	// committed (the mesh); nil when there are none.
	announce func(pop, on bool)
}

// Announce sets the function that tells other brokers of a local flip.
// Call it before serving.
func (s *State) Announce(f func(pop, on bool)) { s.announce = f }

// Apply takes a flip another broker announced: here only, since that broker
// wrote the row. It counts as a local event, so a reconcile read that
// overlapped it cannot undo it with the older row.
func (s *State) Apply(pop, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen.Add(1)
	if pop {
		s.pop.Store(on)
	} else {
		s.applyPush(on)
	}
}

// New returns the switches, both off until Load or Set says otherwise.
func New(st *store.Store, sp *spool.Spool, log *slog.Logger) *State {
	return &State{store: st, spool: sp, log: log}
}

// Push reports push maintenance.
func (s *State) Push() bool { return s.push.Load() }

// Pop reports pop maintenance.
func (s *State) Pop() bool { return s.pop.Load() }

// SetPush flips push maintenance: the flag first (so pushes divert at once),
// then the row, then the drain (paused while on; on resume the active file
// is finalized so everything buffered replays).
func (s *State) SetPush(ctx context.Context, on bool) error {
	return s.flip(ctx, store.FlagMaintenance, false, on, s.applyPush)
}

// SetPop flips pop maintenance.
func (s *State) SetPop(ctx context.Context, on bool) error {
	return s.flip(ctx, store.FlagPopMaintenance, true, on, s.pop.Store)
}

// flip applies a switch here at once, then persists it, then announces it.
// Until the row has committed, no reconcile pass applies what it read.
func (s *State) flip(ctx context.Context, key string, pop, on bool, apply func(bool)) error {
	s.mu.Lock()
	s.gen.Add(1)
	s.inflight++
	apply(on)
	s.mu.Unlock()
	err := s.store.SetFlag(ctx, key, on)
	s.mu.Lock()
	s.inflight--
	s.gen.Add(1)
	s.mu.Unlock()
	if err == nil && s.announce != nil {
		s.announce(pop, on)
	}
	return err
}

func (s *State) applyPush(on bool) {
	if s.push.Swap(on) == on {
		return
	}
	s.log.Warn("push maintenance changed", "enabled", on)
	if s.spool != nil {
		if err := s.spool.SetPaused(on); err != nil {
			s.log.Error("spool: finalize on resume failed", "err", err)
		}
	}
}

// Load reads both rows and applies them.
func (s *State) Load(ctx context.Context) error {
	gen := s.gen.Load()
	push, err := s.store.Flag(ctx, store.FlagMaintenance)
	if err != nil {
		return err
	}
	pop, err := s.store.Flag(ctx, store.FlagPopMaintenance)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight > 0 || s.gen.Load() != gen {
		return nil // flipped here meanwhile; the next pass reads the new row
	}
	s.applyPush(push)
	s.pop.Store(pop)
	return nil
}

// Reconcile is the periodic floor that re-reads the rows, so a switch
// flipped on another replica reaches this one.
type Reconcile struct {
	State *State
	Clock clock.Clock
	Every background.Every
}

// Name implements background.Service.
func (r *Reconcile) Name() string { return "maintenance-reconcile" }

// NextDue implements background.Service.
func (r *Reconcile) NextDue(now time.Time) time.Time { return r.Every.Next(now) }

// RunOnce implements background.Service.
func (r *Reconcile) RunOnce(ctx context.Context) error {
	r.Every.Mark(r.Clock.Now())
	return r.State.Load(ctx)
}
