package leader_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// Every pass is told to Passes with its role and the session holding the
// lock, before any statement, and its end; a pass whose lock session was
// terminated at its start fails (the retention-on-pool canary would not).
func TestPassesToldOfEveryLeaderPass(t *testing.T) {
	pool := storetest.Pool(t)
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	ctx := context.Background()
	var cut bool
	var ends []error
	r := &leader.Retention{Batch: 100, Lead: leader.Lead{Store: s, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Every: background.Every{Interval: time.Millisecond},
		Passes: func(role string, session uint32) func(error) {
			if role != "retention" || session == 0 {
				t.Errorf("told role %q, session %d", role, session)
			}
			var held bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND objid = $1 AND pid = $2)`, store.RetentionLock, int32(session)).Scan(&held); err != nil || !held {
				t.Errorf("session %d does not hold the lock: %v %v", session, held, err)
			}
			if cut {
				var gone bool
				if err := pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(session)).Scan(&gone); err != nil || !gone {
					t.Fatalf("terminate %d: %v %v", session, gone, err)
				}
			}
			return func(err error) { ends = append(ends, err) }
		}}}
	if err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	cut = true
	if err := r.RunOnce(ctx); err == nil {
		t.Fatal("a pass on a terminated lock session succeeded")
	}
	if len(ends) != 2 || ends[0] != nil || ends[1] == nil {
		t.Fatalf("ends told: %v", ends)
	}
}
