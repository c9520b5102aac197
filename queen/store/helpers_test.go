package store_test

import (
	"testing"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

const tenant = config.DefaultTenant

func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
}
