package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// A transactionId look-up costs an index probe per partition, not the
// table: with 100,000 messages in 20 partitions, finding the 20 copies of
// one transactionId touches some blocks per partition, not the table's (a flattened join
// would scan every message for it).
func TestFindByTransactionProbesEachPartition(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	now := time.Now()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { return &now }})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "find-big"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "find-big", 20, 5000, 0)
	blocks, rows := buffers(t, pool, store.FindByTransactionSQL, pgx.NamedArgs{"tenant": tenant, "queue": "", "txn": "tx777",
		"limit": 50, "now": nil})
	table := pages(t, pool, "queen.messages")
	t.Logf("find by transactionId: %d rows, %d blocks touched, the table has %d", rows, blocks, table)
	// An index probe per partition and the found rows' own reads: about
	// 18 blocks a partition here; a scan for the transactionId reads the
	// table.
	if bound := int64(25 * 20); rows != 20 || blocks > bound || bound > table/2 {
		t.Fatalf("found %d rows touching %d blocks (bound %d) of a %d-block table", rows, blocks, bound, table)
	}
	found, err := s.FindByTransaction(ctx, tenant, "find-big", "tx777", 5)
	if err != nil || len(found) != 5 || found[0].TransactionID != "tx777" {
		t.Fatalf("FindByTransaction: %+v %v", found, err)
	}
}
