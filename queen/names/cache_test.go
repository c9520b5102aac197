package names

import (
	"strconv"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/ttlcache"
)

// newBare is a cache over a store with no pool: the tests here run no
// statement.
func newBare(c clock.Clock, ttl time.Duration) *Names {
	return New(store.New(nil, store.Options{}), Options{Clock: c, TTL: ttl})
}

// Entries live for the TTL, and are dropped by queue or by partition id.
func TestNameCacheExpiresAndForgets(t *testing.T) {
	clk := clock.NewSim(time.Unix(1000, 0))
	c := newBare(clk, time.Minute)
	a := partName{"t", "q", "a"}
	b := partName{"t", "other", "b"}
	c.parts.Put(a, "pa")
	c.parts.Put(b, "pb")
	c.subs.Put(subName{"t", "q", "g"}, "qid")
	if id, ok := c.parts.Get(a); !ok || id != "pa" {
		t.Fatalf("fresh entry: %q %v", id, ok)
	}
	c.ForgetQueue("t", "q")
	if _, ok := c.parts.Get(a); ok {
		t.Fatal("entry of a forgotten queue survived")
	}
	if _, ok := c.Subscription("t", "q", "g"); ok {
		t.Fatal("subscription of a forgotten queue survived")
	}
	if _, ok := c.parts.Get(b); !ok {
		t.Fatal("another queue's entry was forgotten with it")
	}
	c.forgetPartitionIDs(map[string]bool{"pb": true})
	if _, ok := c.parts.Get(b); ok {
		t.Fatal("entry naming a deleted partition survived")
	}
	c.parts.Put(a, "pa")
	clk.Advance(2 * time.Minute)
	if _, ok := c.parts.Get(a); ok {
		t.Fatal("entry outlived its TTL")
	}
}

// A push with nothing to forget neither walks the partition cache nor takes
// its lock: it returns while another goroutine holds the lock. Before, every
// push walked the whole map under it (0.58 of a fresh broker's push rate
// once 5,000 partitions were cached). The deadline only bounds a broken
// build, which would block until the lock was released.
func TestForgettingNoPartitionIsFree(t *testing.T) {
	c := newBare(clock.Real{}, time.Minute)
	for i := range 1000 {
		c.parts.Put(partName{tenant: "t", queue: "q", partition: strconv.Itoa(i)}, "id-"+strconv.Itoa(i))
	}
	// The lock is held while a walk's callback runs: this one blocks in
	// it until the test lets it go.
	held, unlock := make(chan struct{}), make(chan struct{})
	walked := make(chan struct{})
	go func() {
		first := true
		c.parts.DeleteIf(func(partName, string) bool {
			if first {
				first = false
				close(held)
				<-unlock
			}
			return false
		})
		close(walked)
	}()
	<-held
	done := make(chan struct{})
	go func() {
		c.forgetPartitionIDs(map[string]bool{})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		close(unlock)
		<-done
		t.Fatal("forgetting no partition waited for the cache's lock: it walks the map")
	}
	close(unlock)
	<-walked
	c.forgetPartitionIDs(map[string]bool{"id-7": true})
	if _, ok := c.parts.Get(partName{tenant: "t", queue: "q", partition: "7"}); ok {
		t.Fatal("a partition id to forget was kept")
	}
}

// BenchmarkPushForgetsNothing is the cost every push pays at 100,000 cached
// partitions.
func BenchmarkPushForgetsNothing(b *testing.B) {
	c := newBare(clock.Real{}, time.Hour)
	for i := range ttlcache.MaxEntries {
		c.parts.Put(partName{tenant: "t", queue: "q", partition: strconv.Itoa(i)}, "id-"+strconv.Itoa(i))
	}
	b.ResetTimer()
	for range b.N {
		c.forgetPartitionIDs(map[string]bool{})
	}
}
