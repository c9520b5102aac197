package consume

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/store"
)

// AckTx is ackTx, for the property test that it agrees with the old one.
func AckTx(ctx context.Context, st *store.Store, tx pgx.Tx, tenant, group string, items []store.AckItem, strict bool) ([]store.AckResult, error) {
	return ackTx(ctx, st, tx, tenant, group, items, strict)
}

// RefAckTx is ackTx as it stood before queen.ack_verdict (ackref_test.go);
// dbNow is st's injected database instant.
func RefAckTx(ctx context.Context, st *store.Store, dbNow *time.Time, tx pgx.Tx, tenant, group string, items []store.AckItem, strict bool) ([]store.AckResult, error) {
	return refAckTx(ctx, st, dbNow, tx, tenant, group, items, strict)
}

// PopsWaiting is how many pops wait for the claimer's pop statement slot.
func (c *Claimer) PopsWaiting() int { return c.pops.Waiting() }
