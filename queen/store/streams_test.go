package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/queen-go/queen/queen/store"
)

// A tenant's query cap holds under concurrent fresh registrations: each
// one counts the tenant's queries only once it holds the grant's lock, so
// no two pass the same count.
func TestStreamsQuotaCapHoldsUnderConcurrentRegistrations(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	const who, cap, tries = "33333333-3333-4333-8333-333333333333", 3, 12
	if _, err := pool.Exec(ctx, `INSERT INTO queen_streams.quota (tenant_id, max_queries) VALUES ($1, $2)`, who, cap); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, denied := 0, 0
	for i := 0; i < tries; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.RegisterQuery(ctx, store.RegisterParams{Tenant: who, Name: fmt.Sprintf("q%d", i), SourceQueue: "src", ConfigHash: "h"})
			var d *store.ErrStreamsDenied
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted++
			case errors.As(err, &d):
				denied++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if granted != cap || denied != tries-cap {
		t.Fatalf("%d registrations granted and %d denied under a cap of %d", granted, denied, cap)
	}
}

// Concurrent hits on a limiter admit exactly as many as its ceiling allows,
// from a counter that does not exist yet: the bounds are checked against
// the value actually updated, whoever created the row.
func TestKVIncrBoundsHoldUnderConcurrentHits(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const ceiling, hits = 5, 16
	maxv := float64(ceiling)
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	for i := 0; i < hits; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.ApplyKV(ctx, tenant, []store.KVOp{{Op: "incr", NS: "rl", Key: "burst", Delta: 1, Max: &maxv, TTLSeconds: 60}}, 0)
			if err != nil {
				t.Error(err)
				return
			}
			if r[0].Applied {
				mu.Lock()
				applied++
				mu.Unlock()
			} else if r[0].Reason != "limit" {
				t.Errorf("a refused hit: %+v", r[0])
			}
		}()
	}
	wg.Wait()
	r, err := s.ApplyKV(ctx, tenant, []store.KVOp{{Op: "get", NS: "rl", Key: "burst"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if applied != ceiling || string(r[0].Value) != fmt.Sprint(ceiling) {
		t.Fatalf("%d hits admitted, counter %s; want %d", applied, r[0].Value, ceiling)
	}
}
