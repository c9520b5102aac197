package sim_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/sim"
)

func TestLockstepSmoke(t *testing.T) {
	o := sim.Options{Seed: 1, Brokers: 2, Tenants: []string{"11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"},
		Queues: []sim.QueueSpec{{Name: "orders", Partitions: 3, LeaseSecs: 10, Groups: []string{sim.QueueMode, "audit"}}},
		Ops:    300, VTime: 120 * time.Second,
		Faults: []sim.FaultAt{{At: 20 * time.Second, Kind: "pg.refuse", Broker: 1, For: 10 * time.Second},
			{At: 40 * time.Second, Kind: "broker.crash", Broker: 0}, {At: 60 * time.Second, Kind: "broker.start", Broker: 0}},
		Sometimes: []string{"pg.refuse", "broker.crash"}}
	start := time.Now()
	res, err := sim.Run(context.Background(), storetest.DSN(t), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s in %v", res.Summary(), time.Since(start))
	if res.Failed() {
		if f, err := os.CreateTemp("", "queen-sim-history-*.jsonl"); err == nil {
			res.History.WriteJSONL(f)
			f.Close()
			t.Log("history:", f.Name())
		}
		t.Fatal("run failed")
	}
}

func TestFreeRunningSmoke(t *testing.T) {
	w := sim.DefaultWeights
	w.Extend = 0 // a 30 s renewal would make the drain wait 30 s of real time
	o := sim.Options{Seed: 7, Mode: "free", Brokers: 2, Clients: 8, Ops: 800, Weights: w,
		Queues: []sim.QueueSpec{{Name: "hot", Partitions: 2, LeaseSecs: 2, Groups: []string{sim.QueueMode, "g"}}},
		Faults: []sim.FaultAt{{At: 300 * time.Millisecond, Kind: "pg.reset", Broker: -1}}}
	start := time.Now()
	res, err := sim.Run(context.Background(), storetest.DSN(t), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s in %v", res.Summary(), time.Since(start))
	if res.Failed() {
		t.Fatal("run failed")
	}
}
