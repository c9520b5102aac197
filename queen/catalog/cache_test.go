package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/shards"
)

// gated is the catalogue with a pause: the reads whose numbers (from 1)
// are in hold read the catalogue, report their number on reached, and
// return only when their channel closes. It orders a test's steps around a
// read in flight without sleeping.
type gated struct {
	src     catalog.Source
	mu      sync.Mutex
	calls   int
	hold    map[int]chan struct{}
	reached chan int
}

func newGated(src catalog.Source, holds ...int) *gated {
	g := &gated{src: src, hold: map[int]chan struct{}{}, reached: make(chan int, len(holds))}
	for _, n := range holds {
		g.hold[n] = make(chan struct{})
	}
	return g
}

func (g *gated) Lookup(ctx context.Context, tenant, queue string) (catalog.Placement, error) {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	p, err := g.src.Lookup(ctx, tenant, queue)
	if h, ok := g.hold[n]; ok {
		g.reached <- n
		<-h
		if err == nil {
			err = ctx.Err() // its caller gave up while it was held
		}
	}
	return p, err
}

// count is the number of catalogue reads so far.
func (g *gated) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// placed places queues of tenantA through c, failing the test on an error.
func placed(t *testing.T, c *catalog.Catalog, queues ...string) {
	t.Helper()
	for _, q := range queues {
		if _, _, err := c.Place(context.Background(), shards.Queue{Tenant: tenantA, Name: q}); err != nil {
			t.Fatal(err)
		}
	}
}

// lookup is a Lookup in the background, its answer on the channel.
func lookup(cache *catalog.Cache, queue string) <-chan string {
	out := make(chan string, 1)
	go func() {
		p, err := cache.Lookup(context.Background(), tenantA, queue)
		out <- fmt.Sprint(p, err)
	}()
	return out
}

// TestCacheDropsAReadInFlightAcrossInvalidate: a read that began before a
// move and returns after the Invalidate the move caused is neither stored
// nor served; its caller reads again and gets the new placement.
func TestCacheDropsAReadInFlightAcrossInvalidate(t *testing.T) {
	ctx := context.Background()
	c, _ := broker(t, catalogueDSN(t), "")
	placed(t, c, "orders")
	g := newGated(c, 1)
	cache := catalog.NewCache(g, 10)
	first := lookup(cache, "orders")
	<-g.reached // the read holds s0 at epoch 1
	if _, err := c.SetPlacement(ctx, tenantA, "orders", 1, "s1"); err != nil {
		t.Fatal(err)
	}
	cache.Invalidate(tenantA, "orders") // the move's mesh hint
	close(g.hold[1])
	if got := <-first; got != "{s1 2} <nil>" {
		t.Errorf("the read across the move answered %s, want {s1 2}", got)
	}
	if p, err := cache.Lookup(ctx, tenantA, "orders"); err != nil || p != (catalog.Placement{Shard: "s1", Epoch: 2}) {
		t.Errorf("then the cache serves %v %v, want {s1 2}", p, err)
	}
	if n := g.count(); n != 2 {
		t.Errorf("%d catalogue reads, want 2 (the stale one and its replacement)", n)
	}
}

// TestCacheEpochNeverGoesBack: a read that returns late, after a newer
// placement was stored, does not replace it; a catalogue answering an
// epoch older than one seen (failed over to a lagging standby) is refused,
// not served.
func TestCacheEpochNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	c, pool := broker(t, catalogueDSN(t), "")
	placed(t, c, "orders")
	g := newGated(c, 1)
	cache := catalog.NewCache(g, 10)
	slow := lookup(cache, "orders")
	<-g.reached // read 1 holds epoch 1
	if _, err := c.SetPlacement(ctx, tenantA, "orders", 1, "s1"); err != nil {
		t.Fatal(err)
	}
	cache.Invalidate(tenantA, "orders")
	// Read 2 begins after the move and stores epoch 2 while read 1 waits.
	if p, err := cache.Lookup(ctx, tenantA, "orders"); err != nil || p.Epoch != 2 {
		t.Fatalf("the read after the move: %v %v, want epoch 2", p, err)
	}
	close(g.hold[1])
	if got := <-slow; got != "{s1 2} <nil>" {
		t.Errorf("the late read answered %s, want {s1 2}", got)
	}
	if p, _ := cache.Lookup(ctx, tenantA, "orders"); p.Epoch != 2 {
		t.Errorf("after the late read the cache serves %v, want epoch 2", p)
	}
	// The catalogue goes back to epoch 1 (a restored backup, a lagging
	// standby promoted).
	if _, err := pool.Exec(ctx, `UPDATE queen_catalog.placements SET shard = 's0', epoch = 1`); err != nil {
		t.Fatal(err)
	}
	cache.Invalidate(tenantA, "orders")
	if p, err := cache.Lookup(ctx, tenantA, "orders"); !errors.Is(err, catalog.ErrEpochBehind) {
		t.Errorf("a catalogue behind the cache: %v %v, want ErrEpochBehind", p, err)
	}
}

// TestCacheServesWhileTheCatalogueIsDown: cached queues keep their
// placement with the catalogue gone (invariant 8); a miss, or a queue
// invalidated meanwhile, is an error wrapping the cause.
func TestCacheServesWhileTheCatalogueIsDown(t *testing.T) {
	ctx := context.Background()
	dsn := catalogueDSN(t)
	c, _ := broker(t, dsn, "")
	placed(t, c, "orders", "invoices", "cold")
	cache := catalog.NewCache(c, 10)
	for _, q := range []string{"orders", "invoices"} {
		if _, err := cache.Lookup(ctx, tenantA, q); err != nil {
			t.Fatal(err)
		}
	}
	up := takeDown(t, dsn)
	defer up()
	if p, err := cache.Lookup(ctx, tenantA, "orders"); err != nil || p.Shard != "s0" {
		t.Errorf("a cached queue with the catalogue down: %v %v, want s0", p, err)
	}
	// The cause is PostgreSQL's: the pool's session terminated, or a new
	// one refused.
	var cause *pgconn.PgError
	_, err := cache.Lookup(ctx, tenantA, "cold")
	if !errors.As(err, &cause) || !strings.Contains(err.Error(), "/cold") {
		t.Errorf("a miss with the catalogue down: %v, want PostgreSQL's error, naming the queue", err)
	}
	cache.Invalidate(tenantA, "invoices")
	if _, err := cache.Lookup(ctx, tenantA, "invoices"); err == nil {
		t.Error("an invalidated queue was served with the catalogue down")
	}
	up()
	if p, err := cache.Lookup(ctx, tenantA, "cold"); err != nil || p.Shard != "s0" {
		t.Errorf("after the catalogue came back: %v %v", p, err)
	}
}

// TestCacheIsBounded: past its size the cache drops the least recently
// used queue (with the catalogue down, only the others are served).
func TestCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	dsn := catalogueDSN(t)
	c, _ := broker(t, dsn, "")
	placed(t, c, "a", "b", "c")
	cache := catalog.NewCache(c, 2)
	for _, q := range []string{"a", "b", "a", "c"} { // b is the least recent when c comes
		if _, err := cache.Lookup(ctx, tenantA, q); err != nil {
			t.Fatal(err)
		}
	}
	if n := cache.Len(); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
	defer takeDown(t, dsn)()
	for q, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, err := cache.Lookup(ctx, tenantA, q); (err == nil) != want {
			t.Errorf("%s served from memory: %v, want %v", q, err == nil, want)
		}
	}
}

// TestCacheReadsOncePerMiss: concurrent misses on one queue wait for one
// catalogue read; a queue with no placement is not kept.
func TestCacheReadsOncePerMiss(t *testing.T) {
	ctx := context.Background()
	c, _ := broker(t, catalogueDSN(t), "")
	placed(t, c, "orders")
	g := newGated(c, 1)
	cache := catalog.NewCache(g, 10)
	var answers []<-chan string
	answers = append(answers, lookup(cache, "orders"))
	<-g.reached
	for range 7 {
		answers = append(answers, lookup(cache, "orders"))
	}
	for deadline := time.Now().Add(10 * time.Second); catalog.Waiters(cache, tenantA, "orders") < 7; runtime.Gosched() {
		if time.Now().After(deadline) {
			close(g.hold[1])
			t.Fatalf("%d lookups joined the read in flight, want 7", catalog.Waiters(cache, tenantA, "orders"))
		}
	}
	close(g.hold[1])
	for _, a := range answers {
		if got := <-a; got != "{s0 1} <nil>" {
			t.Errorf("a concurrent miss answered %s", got)
		}
	}
	if n := g.count(); n != 1 {
		t.Errorf("%d catalogue reads for concurrent misses, want 1", n)
	}
	for range 2 {
		if _, err := cache.Lookup(ctx, tenantA, "nowhere"); !errors.Is(err, catalog.ErrNotPlaced) {
			t.Errorf("a queue with no placement: %v, want ErrNotPlaced", err)
		}
	}
	if n := g.count(); n != 3 {
		t.Errorf("%d catalogue reads, want 3: a missing placement is read again", n)
	}
}

// TestCacheUnderConcurrentMoves: lookups and invalidations from many
// goroutines while queues move: no caller ever sees a queue's epoch go
// down, and each ends at the catalogue's.
func TestCacheUnderConcurrentMoves(t *testing.T) {
	ctx := context.Background()
	c, _ := broker(t, catalogueDSN(t), "")
	queues := []string{"q0", "q1", "q2", "q3"}
	placed(t, c, queues...)
	cache := catalog.NewCache(c, 100)
	var epochs [4]atomic.Int64 // the highest epoch the catalogue has activated
	for i := range epochs {
		epochs[i].Store(1)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := map[string]int64{}
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				q := queues[r.IntN(len(queues))]
				p, err := cache.Lookup(ctx, tenantA, q)
				if errors.Is(err, catalog.ErrUnsettled) {
					// Moved during each of its reads: a loaded machine
					// lets the loop below move a queue that often; the
					// caller retries, as a broker answers 503.
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if p.Epoch < seen[q] {
					t.Errorf("%s went from epoch %d to %d", q, seen[q], p.Epoch)
				}
				seen[q] = p.Epoch
			}
		}()
	}
	for move := range 40 {
		i := move % len(queues)
		e := epochs[i].Load()
		if _, err := c.SetPlacement(ctx, tenantA, queues[i], e, []string{"s0", "s1"}[e%2]); err != nil {
			t.Fatal(err)
		}
		epochs[i].Store(e + 1)
		cache.Invalidate(tenantA, queues[i])
	}
	close(stop)
	wg.Wait()
	for i, q := range queues {
		if p, err := cache.Lookup(ctx, tenantA, q); err != nil || p.Epoch != epochs[i].Load() {
			t.Errorf("%s: the cache serves %v %v, the catalogue is at %d", q, p, err, epochs[i].Load())
		}
	}
}

// TestCacheWaiterOutlivesTheLeadersContext: the caller whose read others
// joined gives up; its error is its own, and the others read again
// instead of failing with it.
func TestCacheWaiterOutlivesTheLeadersContext(t *testing.T) {
	c, _ := broker(t, catalogueDSN(t), "")
	placed(t, c, "orders")
	g := newGated(c, 1)
	cache := catalog.NewCache(g, 10)
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() {
		_, err := cache.Lookup(ctx, tenantA, "orders")
		leader <- err
	}()
	<-g.reached
	waiter := lookup(cache, "orders")
	for deadline := time.Now().Add(10 * time.Second); catalog.Waiters(cache, tenantA, "orders") < 1; runtime.Gosched() {
		if time.Now().After(deadline) {
			close(g.hold[1])
			t.Fatal("the second lookup did not join the read in flight")
		}
	}
	cancel()
	close(g.hold[1])
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Errorf("the leader: %v, want its context's end", err)
	}
	if got := <-waiter; got != "{s0 1} <nil>" {
		t.Errorf("the waiter: %s, want {s0 1} from a read of its own", got)
	}
}

// A catalogue that ended the pool's sessions (a restart, an operator) is
// read again on a fresh connection: the first lookup after it answers,
// rather than failing on the dead pooled connection. It fails with
// reconnecting's retry removed.
func TestLookupOutlivesAnEndedSession(t *testing.T) {
	t.Parallel()
	dsn := catalogueDSN(t)
	c, _ := broker(t, dsn, "")
	placed(t, c, "q1")
	ctx := context.Background()
	if _, err := c.Lookup(ctx, tenantA, "q1"); err != nil {
		t.Fatal(err)
	}
	back := takeDown(t, dsn) // ends the pooled session, idle well under pgxpool's ping age
	back()
	if p, err := c.Lookup(ctx, tenantA, "q1"); err != nil || p.Epoch != 1 {
		t.Fatalf("lookup after the sessions ended: %+v %v", p, err)
	}
}
