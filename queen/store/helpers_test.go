package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
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
