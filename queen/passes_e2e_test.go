package queen_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/store/storetest"
)

// TestClusterAnswerListsThePassesThisBrokerLed: two brokers on one
// database take turns at the retention lock; GET /api/v1/system/cluster of
// each lists the passes that broker led (role, itself, the lock's session,
// start, how long), never the other's, and its sweeper's share. Between
// them the two lists hold the retention passes of both.
func TestClusterAnswerListsThePassesThisBrokerLed(t *testing.T) {
	dsn := storetest.DSN(t)
	type pass struct {
		Role, Broker, Start string
		Session             uint32
		DurationMs          *int64
		Error               *string
	}
	type cluster struct {
		Passes      []pass
		PassesSince *string
		Sweeper     *struct {
			Broker string
			Cycles int64
		}
	}
	var bases []string
	for _, id := range []string{"lead-a", "lead-b"} {
		cfg := testConfig(t, dsn)
		cfg.ServerID, cfg.RetentionInterval = id, 50*time.Millisecond
		b := start(t, cfg)
		t.Cleanup(func() { b.Shutdown(context.Background()) })
		bases = append(bases, "http://"+b.Addr())
	}
	read := func(base string) cluster {
		t.Helper()
		_, body := do(t, "GET", base+"/api/v1/system/cluster", "", "")
		var c cluster
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatalf("cluster: %v %s", err, body)
		}
		return c
	}
	led := map[string]int{}
	for deadline := time.Now().Add(30 * time.Second); led["lead-a"] == 0 || led["lead-b"] == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("retention passes led in 30 s: %v", led)
		}
		clear(led)
		for i, base := range bases {
			c := read(base)
			self := []string{"lead-a", "lead-b"}[i]
			if c.PassesSince == nil || c.Sweeper == nil || c.Sweeper.Broker != self {
				t.Fatalf("%s: passesSince %v, sweeper %+v", self, c.PassesSince, c.Sweeper)
			}
			for _, p := range c.Passes {
				if p.Broker != self || p.Session == 0 || p.Start == "" || p.Error != nil {
					t.Fatalf("%s lists %+v", self, p)
				}
				if p.Role == "retention" && p.DurationMs != nil && *p.DurationMs >= 0 {
					led[self]++
				}
			}
		}
	}
	t.Logf("retention passes led: %v", led)
}
