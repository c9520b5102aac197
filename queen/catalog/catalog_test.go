package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestMigrateIsIdempotentUnderConcurrency: brokers starting together
// migrate the catalogue once between them (the advisory lock), a rerun
// changes nothing, and a database holding a shard's schema takes the
// catalogue beside it (one database, no shards configured).
func TestMigrateIsIdempotentUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{storetest.EmptyDSN(t), storetest.DSN(t)} {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			pool := open(t, dsn)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = catalog.Migrate(ctx, pool)
			}()
		}
		wg.Wait()
		pool := open(t, dsn)
		if err := errors.Join(append(errs, catalog.Migrate(ctx, pool))...); err != nil {
			t.Fatal(err)
		}
		var versions, tables int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen_catalog.schema_migrations),
			(SELECT count(*) FROM pg_tables WHERE schemaname = 'queen_catalog')`).Scan(&versions, &tables)
		if err != nil || versions != 2 || tables != 4 {
			t.Fatalf("ledger rows %d, tables %d (%v): want 2 and 4", versions, tables, err)
		}
	}
}

// TestMovesTableKeepsItsRules: the states are the state machine's, a
// failed move says why, and a queue has at most one unfinished move.
func TestMovesTableKeepsItsRules(t *testing.T) {
	ctx := context.Background()
	_, pool := broker(t, catalogueDSN(t), "")
	insert := func(state, reason string) error {
		_, err := pool.Exec(ctx, `INSERT INTO queen_catalog.moves (tenant_id, queue, from_shard, to_shard, state, reason, epoch)
			VALUES ($1, 'orders', 's0', 's1', $2, $3, 2)`, tenantA, state, reason)
		return err
	}
	code := func(err error) string {
		var pg *pgconn.PgError
		if errors.As(err, &pg) {
			return pg.Code + " " + pg.ConstraintName
		}
		return fmt.Sprint(err)
	}
	if c := code(insert("paused", "")); !strings.HasPrefix(c, pgerrcode.CheckViolation) {
		t.Errorf("state paused: %s, want a check violation", c)
	}
	if c := code(insert("failed", "")); !strings.HasPrefix(c, pgerrcode.CheckViolation) {
		t.Errorf("failed without a reason: %s, want a check violation", c)
	}
	for _, ok := range []struct{ state, reason string }{{"failed", "slot timed out"}, {"done", ""}, {"copy", ""}} {
		if err := insert(ok.state, ok.reason); err != nil {
			t.Fatalf("%s: %v", ok.state, err)
		}
	}
	if c := code(insert("plan", "")); c != pgerrcode.UniqueViolation+" moves_one_unfinished" {
		t.Errorf("a second unfinished move: %s, want moves_one_unfinished", c)
	}
	if _, err := pool.Exec(ctx, `UPDATE queen_catalog.moves SET state = 'done' WHERE state = 'copy'`); err != nil {
		t.Fatal(err)
	}
	if err := insert("plan", ""); err != nil {
		t.Errorf("a move after the last one finished: %v", err)
	}
}

// TestPlaceAgreesAcrossBrokers: brokers placing the same new queues at
// once, by rules that disagree, all return one placement per queue, the
// one a single call created.
func TestPlaceAgreesAcrossBrokers(t *testing.T) {
	ctx := context.Background()
	dsn := catalogueDSN(t)
	brokers := []*catalog.Catalog{}
	for _, rules := range []string{"queue:*=s0", "queue:*=s1"} {
		c, _ := broker(t, dsn, rules)
		brokers = append(brokers, c)
	}
	const queues, callers = 20, 4
	type answer struct {
		p       catalog.Placement
		created bool
	}
	got := make([][]answer, queues)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for q := range queues {
		for i := range callers * len(brokers) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p, created, err := brokers[i%len(brokers)].Place(ctx, shards.Queue{Tenant: tenantA, Name: fmt.Sprint("q", q)})
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				got[q] = append(got[q], answer{p, created})
				mu.Unlock()
			}()
		}
	}
	close(start)
	wg.Wait()
	for q, answers := range got {
		created := 0
		for _, a := range answers {
			if a.created {
				created++
			}
			if a.p != answers[0].p || a.p.Epoch != 1 {
				t.Errorf("q%d: placements %v: brokers disagree", q, answers)
				break
			}
		}
		if created != 1 {
			t.Errorf("q%d: %d calls created it, want 1", q, created)
		}
	}
}

// TestPlaceFollowsRulesAndLoads: a rule places on its shard, a
// least-loaded rule on the shard with fewer queues and never on a
// draining one while another is listed, and a queue already placed stays.
func TestPlaceFollowsRulesAndLoads(t *testing.T) {
	ctx := context.Background()
	c, pool := broker(t, catalogueDSN(t), "tenant:"+tenantB+"=s1;queue:spread-*=s0,s1")
	place := func(tenant, queue string) string {
		p, _, err := c.Place(ctx, shards.Queue{Tenant: tenant, Name: queue})
		if err != nil {
			t.Fatal(err)
		}
		return p.Shard
	}
	if s := place(tenantA, "plain"); s != "s0" {
		t.Errorf("no rule: %s, want the first shard s0", s)
	}
	if s := place(tenantB, "plain"); s != "s1" {
		t.Errorf("tenant rule: %s, want s1", s)
	}
	// s0 holds one queue, s1 one: spreading alternates from the first listed.
	var spread []string
	for i := range 4 {
		spread = append(spread, place(tenantA, fmt.Sprint("spread-", i)))
	}
	if strings.Join(spread, ",") != "s0,s1,s0,s1" {
		t.Errorf("least loaded: %v, want s0,s1,s0,s1", spread)
	}
	if _, err := pool.Exec(ctx, `UPDATE queen_catalog.shards SET draining = true WHERE name = 's1'`); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 6; i++ {
		if s := place(tenantA, fmt.Sprint("spread-", i)); s != "s0" {
			t.Errorf("spread-%d went to %s with s1 draining", i, s)
		}
	}
	if s := place(tenantB, "plain"); s != "s1" {
		t.Errorf("a placed queue moved to %s by Place", s)
	}
}

// TestBadInputIsNamed: an empty queue, a tenant that is no UUID, a shard
// not configured or not registered: each refused with an error naming it.
func TestBadInputIsNamed(t *testing.T) {
	ctx := context.Background()
	dsn := catalogueDSN(t)
	c, _ := broker(t, dsn, "")
	check := func(what string, err error, target error, names string) {
		t.Helper()
		if !errors.Is(err, target) || !strings.Contains(err.Error(), names) {
			t.Errorf("%s: %v, want %v naming %s", what, err, target, names)
		}
	}
	_, _, err := c.Place(ctx, shards.Queue{Tenant: tenantA, Name: ""})
	check("empty queue", err, catalog.ErrBadQueue, `queue ""`)
	_, _, err = c.Place(ctx, shards.Queue{Tenant: "acme", Name: "orders"})
	check("tenant not a UUID", err, catalog.ErrBadQueue, `tenant "acme"`)
	_, err = c.Lookup(ctx, tenantA, "")
	check("lookup of an empty queue", err, catalog.ErrBadQueue, `queue ""`)
	_, err = c.Lookup(ctx, tenantA, "never")
	check("lookup of a queue not placed", err, catalog.ErrNotPlaced, "never")
	if _, _, err := c.Place(ctx, shards.Queue{Tenant: tenantA, Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SetPlacement(ctx, tenantA, "orders", 1, "s9")
	check("move to a shard not configured", err, catalog.ErrUnknownShard, `"s9"`)
	_, err = c.SetPlacement(ctx, tenantA, "", 1, "s1")
	check("move of an empty queue", err, catalog.ErrBadQueue, `queue ""`)
	// A broker configured with a shard no broker registered yet.
	cfg, err := shards.Parse("postgres://cat/queen", "s0=postgres://a/queen;s1=postgres://b/queen;s2=postgres://c/queen", "queue:new-*=s2")
	if err != nil {
		t.Fatal(err)
	}
	late := catalog.New(open(t, dsn), cfg)
	_, _, err = late.Place(ctx, shards.Queue{Tenant: tenantA, Name: "new-1"})
	check("place on an unregistered shard", err, catalog.ErrUnknownShard, `"s2"`)
	_, err = late.SetPlacement(ctx, tenantA, "orders", 1, "s2")
	check("move to an unregistered shard", err, catalog.ErrUnknownShard, `"s2"`)
}

// TestSetPlacementIsACompareAndSet: the expected epoch moves the queue to
// the next one; a stale epoch is refused with the current one; of
// activations racing from one epoch exactly one wins.
func TestSetPlacementIsACompareAndSet(t *testing.T) {
	ctx := context.Background()
	c, _ := broker(t, catalogueDSN(t), "")
	if _, err := c.SetPlacement(ctx, tenantA, "orders", 1, "s1"); !errors.Is(err, catalog.ErrNotPlaced) {
		t.Errorf("set before placing: %v, want ErrNotPlaced", err)
	}
	if _, _, err := c.Place(ctx, shards.Queue{Tenant: tenantA, Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	p, err := c.SetPlacement(ctx, tenantA, "orders", 1, "s1")
	if err != nil || p != (catalog.Placement{Shard: "s1", Epoch: 2}) {
		t.Fatalf("set from epoch 1: %v %v, want s1 at 2", p, err)
	}
	var stale *catalog.StaleEpochError
	if _, err := c.SetPlacement(ctx, tenantA, "orders", 1, "s0"); !errors.As(err, &stale) || stale.Current != 2 {
		t.Fatalf("set from a stale epoch: %v, want a StaleEpochError at 2", err)
	}
	const racers = 8
	var wg sync.WaitGroup
	results := make(chan error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.SetPlacement(ctx, tenantA, "orders", 2, []string{"s0", "s1"}[i%2])
			results <- err
		}()
	}
	wg.Wait()
	close(results)
	won := 0
	for err := range results {
		switch {
		case err == nil:
			won++
		case !errors.As(err, &stale) || stale.Current != 3:
			t.Errorf("a racer: %v, want a StaleEpochError at 3", err)
		}
	}
	if won != 1 {
		t.Errorf("%d racers won the compare-and-set from epoch 2, want 1", won)
	}
	if p, err := c.Lookup(ctx, tenantA, "orders"); err != nil || p.Epoch != 3 {
		t.Errorf("after the race: %v %v, want epoch 3", p, err)
	}
}

func TestAdoptPlacesWhereTheRowsAre(t *testing.T) {
	ctx := context.Background()
	c, _ := broker(t, catalogueDSN(t), "queue:*=s1")
	p, created, err := c.Adopt(ctx, shards.Queue{Tenant: tenantA, Name: "legacy"}, "s0")
	if err != nil || !created || p.Shard != "s0" || p.Epoch != 1 {
		t.Fatalf("adopt legacy on s0 against the rule: %+v created %v, %v", p, created, err)
	}
	if p, created, err := c.Place(ctx, shards.Queue{Tenant: tenantA, Name: "legacy"}); err != nil || created || p.Shard != "s0" {
		t.Errorf("place after adopt: %+v created %v, %v; want s0 kept", p, created, err)
	}
	if p, created, err := c.Adopt(ctx, shards.Queue{Tenant: tenantA, Name: "legacy"}, "s1"); err != nil || created || p.Shard != "s0" {
		t.Errorf("adopt again elsewhere: %+v created %v, %v; want s0 kept", p, created, err)
	}
	if _, _, err := c.Adopt(ctx, shards.Queue{Tenant: tenantA, Name: "other"}, "s9"); !errors.Is(err, catalog.ErrUnknownShard) {
		t.Errorf("adopt on an unknown shard: %v, want ErrUnknownShard", err)
	}
}
