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
		c.parts[partName{"t", "q", strconv.Itoa(i)}] = cached{id: "x", expires: clk.Now().Add(-time.Second)}
	}
	c.putPartition(a, "pa")
	if len(c.parts) != 1 {
		t.Fatalf("%d entries after a put into a full map of expired ones", len(c.parts))
	}
}
