package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/shards"
)

// TestActivateMoveYieldsToARollback: the placement's compare-and-set of a
// move's activation holds only while the move is at the step the mover
// read and not being rolled back; rerun after it took, it answers the
// placement; every state write compares the step counter.
func TestActivateMoveYieldsToARollback(t *testing.T) {
	ctx := context.Background()
	c, _ := broker(t, catalogueDSN(t), "queue:*=s0")
	for _, q := range []string{"orders", "invoices"} {
		if _, _, err := c.Place(ctx, shards.Queue{Tenant: tenantA, Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(q string) catalog.Move {
		id, err := c.AddMove(ctx, tenantA, q, "s0", "s1", 2)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Move(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// A rollback began (its reason written) after this mover read the move.
	read := plan("orders")
	failing := read
	failing.Reason = "copy: boom"
	if _, err := c.SetMove(ctx, failing); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ActivateMove(ctx, read); !errors.Is(err, catalog.ErrStaleMove) {
		t.Errorf("activation of a move being rolled back: %v, want ErrStaleMove", err)
	}
	if p, err := c.Lookup(ctx, tenantA, "orders"); err != nil || p.Shard != "s0" || p.Epoch != 1 {
		t.Errorf("placement after the refused activation: %+v %v", p, err)
	}
	if _, err := c.SetMove(ctx, read); !errors.Is(err, catalog.ErrStaleMove) {
		t.Errorf("a state write at an old step: %v, want ErrStaleMove", err)
	}
	m := plan("invoices")
	for run := range 2 {
		if p, err := c.ActivateMove(ctx, m); err != nil || p.Shard != "s1" || p.Epoch != 2 {
			t.Fatalf("activation run %d: %+v %v", run, p, err)
		}
	}
}
