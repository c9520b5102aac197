package outages

import (
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// A failover as a broker sees it: the server turns read-only, becomes
// unavailable, the pool lands on another server, writes resume. One
// period with both kinds, the servers before and after, a change during
// the pause; the rings keep the newest Keep.
func TestRecordFollowsAFailover(t *testing.T) {
	c := clock.NewSim(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	r := New(c)
	r.Connected("10.0.0.1:5432")
	c.Advance(time.Minute)
	r.ReadOnly(true)
	c.Advance(2 * time.Second)
	r.Reachable(false)
	if v := r.View(); v.Open == nil || len(v.Open.Kinds) != 2 || v.LastPause != nil || !v.ReadOnly || !v.Unavailable {
		t.Fatalf("during the pause: %+v", v)
	}
	c.Advance(time.Second)
	r.Connected("10.0.0.2:5432")
	r.ReadOnly(false)
	if v := r.View(); v.Open == nil {
		t.Fatal("the pause ended while the database was still unavailable")
	}
	c.Advance(500 * time.Millisecond)
	r.Reachable(true)
	v := r.View()
	p := v.LastPause
	if v.Open != nil || p == nil || p.To.Sub(p.From) != 3500*time.Millisecond || p.ServerBefore != "10.0.0.1:5432" ||
		p.ServerAfter != "10.0.0.2:5432" || len(v.Changes) != 1 || !v.Changes[0].DuringPause || v.Server != "10.0.0.2:5432" {
		t.Fatalf("after the failover: %+v %+v", v, p)
	}
	for i := 0; i < Keep+5; i++ {
		r.Reachable(false)
		r.Reachable(true)
	}
	if v := r.View(); len(v.Periods) != Keep {
		t.Fatalf("%d periods kept, want %d", len(v.Periods), Keep)
	}
}
