package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
)

// Lead is what every leader here shares: the store whose advisory lock it
// takes for each pass, the clock and schedule of its passes, and its log.
type Lead struct {
	Store *store.Store
	Clock clock.Clock
	Log   *slog.Logger
	Every background.Every
	// Passes, when set, is told of every pass this broker leads: its role
	// (the service's name) and the backend pid of the session holding the
	// lock, after the lock is taken and before any statement of the pass;
	// the function it returns is told how the pass ended, before the lock
	// is released. The simulator records passes with it.
	Passes func(role string, session uint32) (end func(error))

	leading bool // whether the last pass held the lock, to log changes
}

// NextDue implements background.Service.
func (l *Lead) NextDue(now time.Time) time.Time { return l.Every.Next(now) }

// pass runs fn on the session that holds advisory lock id, if this broker
// takes it (nil, and nothing run, when another broker holds it), and marks
// the pass run either way. A change of leadership is logged at debug: the
// lock is released after every pass, so brokers take turns, and a
// three-broker cluster would log one every few seconds.
func (l *Lead) pass(ctx context.Context, id int64, name string, fn func(*store.Leader) error) error {
	defer func() { l.Every.Mark(l.Clock.Now()) }()
	lead, ok, err := l.Store.TryLeader(ctx, id)
	if err == nil && ok != l.leading {
		l.leading = ok
		l.Log.Debug(name+" leadership changed", "leader", ok, "lock", id)
	}
	if err != nil || !ok {
		return err
	}
	defer lead.Release()
	if l.Passes != nil {
		end := l.Passes(name, lead.Session())
		err = fn(lead)
		end(err)
		return err
	}
	return fn(lead)
}
