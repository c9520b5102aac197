package scenarios_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/scenarios"
	"github.com/queen-go/queen/sim"
)

// faultGen draws one fault for a run of n brokers.
func faultGen(brokers int) *rapid.Generator[sim.FaultAt] {
	return rapid.Custom(func(t *rapid.T) sim.FaultAt {
		f := sim.FaultAt{
			At:     time.Duration(rapid.IntRange(1, 50).Draw(t, "at")) * time.Second,
			Kind:   rapid.SampledFrom([]string{"pg.refuse", "pg.blackhole", "pg.reset", "clock.skew", "spool.poison"}).Draw(t, "kind"),
			Broker: rapid.IntRange(-1, brokers-1).Draw(t, "broker"),
		}
		switch f.Kind {
		case "pg.refuse", "pg.blackhole":
			f.For = time.Duration(rapid.IntRange(1, 15).Draw(t, "for")) * time.Second
		case "clock.skew":
			f.By = time.Duration(rapid.IntRange(-10, 10).Draw(t, "by")) * time.Second
			if f.Broker < 0 {
				f.Broker = 0
			}
		}
		return f
	})
}

// TestRapidScenarios lets rapid draw small scenarios (cluster size,
// workload, faults) so that a failure shrinks to a minimal one, which is
// written as a .scn file for committing under testdata/scenarios.
func TestRapidScenarios(t *testing.T) {
	setFlagDefault("rapid.checks", "3")
	rapid.Check(t, func(rt *rapid.T) {
		brokers := rapid.IntRange(1, 3).Draw(rt, "brokers")
		s := &scenarios.Scenario{}
		s.Seed = rapid.Uint64().Draw(rt, "seed")
		s.Name = fmt.Sprintf("rapid-%#x", s.Seed)
		s.Mode, s.Brokers = "lockstep", brokers
		s.TenantNames = []string{"t1", "t2"}[:rapid.IntRange(1, 2).Draw(rt, "tenants")]
		for _, n := range s.TenantNames {
			s.Tenants = append(s.Tenants, scenarios.TenantID(n))
		}
		s.Queues = []sim.QueueSpec{{Name: "orders", Partitions: rapid.IntRange(1, 3).Draw(rt, "partitions"),
			LeaseSecs: rapid.IntRange(2, 15).Draw(rt, "lease"), Groups: []string{sim.QueueMode, "audit"}}}
		s.Clients = rapid.IntRange(1, 4).Draw(rt, "clients")
		s.Ops = rapid.IntRange(10, 120).Draw(rt, "ops")
		s.VTime = 60 * time.Second
		s.Weights = sim.DefaultWeights
		s.Faults = rapid.SliceOfN(faultGen(brokers), 0, 3).Draw(rt, "faults")
		o, err := scenarios.Run(context.Background(), storetest.DSN(t), s, scenarios.OutDir(root), "", false)
		if err != nil {
			rt.Fatal(err)
		}
		if o.Failed() {
			rt.Fatalf("%s", o.Report())
		}
	})
}

// setFlagDefault sets a flag unless the command line did.
func setFlagDefault(name, value string) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if !set {
		_ = flag.Set(name, value)
	}
}
