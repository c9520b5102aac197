package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/writes"
)

const tenant = config.DefaultTenant

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func newStore(t *testing.T) *store.Store {
	t.Helper()
	s, _ := newStoreWithPool(t)
	return s
}

// newStoreWithPool is newStore with its pool, for tests that also write
// rows the broker only reads (grants, SQL-surface calls).
func newStoreWithPool(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool := storetest.Pool(t)
	return store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)}), pool
}

// ack acknowledges as queen/consume's Ack does for one caller, without the
// combiner: distinct completions through s.Ack (the completions
// statement), any other batch through consume's general ack, whose state
// machine left the store.
func ack(ctx context.Context, s *store.Store, tenant, group string, items []store.AckItem) ([]store.AckResult, error) {
	if store.AllCompletedAndDistinct(items) {
		return s.Ack(ctx, tenant, group, items)
	}
	ctx, cancel := s.Bound(ctx)
	defer cancel()
	return consume.AckInTx(ctx, s, tenant, store.AckGroup(group), items)
}

// claimers holds the queen/consume Claimer each store's pops go through,
// one per store as a broker keeps one beside its store: the pop marks' and
// watermarks' throttles live in it.
var claimers sync.Map // *store.Store -> *consume.Claimer

// claimerFor gives s a Claimer of its own options (a simulated clock, no
// mark throttle); claim builds one with the defaults otherwise.
func claimerFor(s *store.Store, o consume.ClaimerOptions) {
	o.Names = namesOf(s)
	claimers.Store(s, consume.NewClaimer(s, o))
}

// caches holds the queen/names cache of each store, one per store as a
// broker keeps one beside its store: its pops and deletes share it.
var caches sync.Map // *store.Store -> *names.Names

// namesOf is s's name cache, forgetting writesOf(s)'s encryption hints.
func namesOf(s *store.Store) *names.Names {
	n, _ := caches.LoadOrStore(s, names.New(s, names.Options{SealHints: writesOf(s)}))
	return n.(*names.Names)
}

// policies holds the write policy of each store (queen/writes: sealing,
// in-batch dedup), one per store as a broker keeps one beside its store:
// its pushes and its name cache share it.
var policies sync.Map // *store.Store -> *writes.Policy

// writesOf is s's write policy, without a key.
func writesOf(s *store.Store) *writes.Policy {
	w, _ := policies.LoadOrStore(s, storetest.Writes(s, nil))
	return w.(*writes.Policy)
}

// pushItems puts items in as pushpath does for one caller (store.Push), through
// s's write policy.
func pushItems(ctx context.Context, s *store.Store, tenant string, items []store.PushItem, producerSub string) ([]store.PushResult, error) {
	return s.Push(ctx, writesOf(s), tenant, items, producerSub)
}

// claim is a pop as the broker runs it (consume.Claimer.Claim) over s.
func claim(ctx context.Context, s *store.Store, req consume.PopRequest) (consume.PopResult, error) {
	c, ok := claimers.Load(s)
	if !ok {
		c, _ = claimers.LoadOrStore(s, consume.NewClaimer(s, consume.ClaimerOptions{Names: namesOf(s)}))
	}
	return c.(*consume.Claimer).Claim(ctx, req)
}
