// Package maintenance holds the broker's two maintenance switches.
//
// Push maintenance diverts every push to the spool and pauses the drain, for
// a planned failover; pop maintenance makes every pop answer empty. The
// in-process flags are authoritative on the hot path; the system_state rows
// are the shared copy, re-read by Reconcile at QUEEN_CACHE_REFRESH_INTERVAL_MS
// so every replica converges without any message between them.
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
	return s.flip(ctx, store.FlagMaintenance, on, s.applyPush)
}

// SetPop flips pop maintenance.
func (s *State) SetPop(ctx context.Context, on bool) error {
	return s.flip(ctx, store.FlagPopMaintenance, on, s.pop.Store)
}

// flip applies a switch here at once, then persists it. Until the row has
// committed, no reconcile pass applies what it read.
func (s *State) flip(ctx context.Context, key string, on bool, apply func(bool)) error {
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
