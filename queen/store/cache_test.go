package store

import (
	"strconv"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Entries live for the TTL, are dropped by queue or by partition id, and
// expired ones are pruned once the map is large.
func TestNameCacheExpiresAndForgets(t *testing.T) {
	clk := clock.NewSim(time.Unix(1000, 0))
	c := newCache(clk, time.Minute)
	a := partName{"t", "q", "a"}
	b := partName{"t", "other", "b"}
	c.putPartition(a, "pa")
	c.putPartition(b, "pb")
	c.putSubscription(subName{"t", "q", "g"}, "qid")
	if id, ok := c.partition(a); !ok || id != "pa" {
		t.Fatalf("fresh entry: %q %v", id, ok)
	}
	c.forgetQueue("t", "q")
	if _, ok := c.partition(a); ok {
		t.Fatal("entry of a forgotten queue survived")
	}
	if _, ok := c.subscription(subName{"t", "q", "g"}); ok {
		t.Fatal("subscription of a forgotten queue survived")
	}
	c.forgetPartitionIDs(map[string]bool{"pb": true})
	if _, ok := c.partition(b); ok {
		t.Fatal("entry naming a deleted partition survived")
	}
	c.putPartition(a, "pa")
	clk.Advance(2 * time.Minute)
	if _, ok := c.partition(a); ok {
		t.Fatal("entry outlived its TTL")
	}
	for i := 0; i < maxCacheEntries; i++ {
		c.putPartition(partName{"t", "q", strconv.Itoa(i)}, "x")
	}
	clk.Advance(2 * time.Minute)
	c.putPartition(a, "pa")
	if len(c.parts.m) != 1 {
		t.Fatalf("%d entries after a put into a full map of expired ones", len(c.parts.m))
	}
}

// At the cap, a put of a new name drops the oldest live entry, and only
// that one: the map stays bounded without a scan.
func TestCacheAtTheCapDropsTheOldest(t *testing.T) {
	clk := clock.NewSim(time.Unix(1_700_000_000, 0))
	c := newCache(clk, time.Minute)
	name := func(i int) partName { return partName{"t", "q", strconv.Itoa(i)} }
	for i := 0; i < maxCacheEntries; i++ {
		c.putPartition(name(i), "x")
	}
	c.putPartition(name(0), "again") // a re-put moves 0 to the back
	c.putPartition(name(maxCacheEntries), "new")
	if n := len(c.parts.m); n != maxCacheEntries {
		t.Fatalf("%d entries at a cap of %d", n, maxCacheEntries)
	}
	if _, ok := c.partition(name(1)); ok {
		t.Fatal("the oldest entry survived a put at the cap")
	}
	for _, i := range []int{0, 2, maxCacheEntries} {
		if _, ok := c.partition(name(i)); !ok {
			t.Fatalf("entry %d was dropped", i)
		}
	}
	if len(c.parts.order)-c.parts.head > 2*maxCacheEntries {
		t.Fatalf("the order holds %d places for %d entries", len(c.parts.order)-c.parts.head, len(c.parts.m))
	}
}

// BenchmarkCachePutFull: a put into a full cache costs the same as into an
// empty one (2.4 ms before, at 100,000 names, against 708 ns).
func BenchmarkCachePutFull(b *testing.B) {
	clk := clock.NewSim(time.Unix(1_700_000_000, 0))
	c := newCache(clk, time.Minute)
	for i := 0; i < maxCacheEntries; i++ {
		c.putPartition(partName{"t", "q", strconv.Itoa(i)}, "x")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.putPartition(partName{"t", "n", strconv.Itoa(i)}, "x")
	}
}

// A push with nothing to forget neither walks the partition cache nor takes
// its lock: it returns while another goroutine holds the lock. Before, every
// push walked the whole map under it (0.58 of a fresh broker's push rate
// once 5,000 partitions were cached). The deadline only bounds a broken
// build, which would block until the lock was released.
func TestForgettingNoPartitionIsFree(t *testing.T) {
	c := newCache(clock.Real{}, time.Minute)
	for i := range 1000 {
		c.putPartition(partName{tenant: "t", queue: "q", partition: strconv.Itoa(i)}, "id-"+strconv.Itoa(i))
	}
	c.mu.Lock()
	done := make(chan struct{})
	go func() {
		c.forgetPartitionIDs(map[string]bool{})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.mu.Unlock()
		<-done
		t.Fatal("forgetting no partition waited for the cache's lock: it walks the map")
	}
	c.mu.Unlock()
	c.forgetPartitionIDs(map[string]bool{"id-7": true})
	if _, ok := c.partition(partName{tenant: "t", queue: "q", partition: "7"}); ok {
		t.Fatal("a partition id to forget was kept")
	}
}

// BenchmarkPushForgetsNothing is the cost every push pays at 100,000 cached
// partitions.
func BenchmarkPushForgetsNothing(b *testing.B) {
	c := newCache(clock.Real{}, time.Hour)
	for i := range maxCacheEntries {
		c.putPartition(partName{tenant: "t", queue: "q", partition: strconv.Itoa(i)}, "id-"+strconv.Itoa(i))
	}
	b.ResetTimer()
	for range b.N {
		c.forgetPartitionIDs(map[string]bool{})
	}
}
