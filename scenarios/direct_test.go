package scenarios_test

import (
	"strings"
	"testing"

	"github.com/queen-go/queen/scenarios"
	"github.com/queen-go/queen/sim"
)

// directScenario sends every workload pop through the brokers'
// consume.Consumer (direct=100%): autoAck ones too, and some during an
// outage of every broker's database path.
const directScenario = `
scenario  direct-pops
seed      0xd1ec7
mode      lockstep
brokers   2
tenants   t1 t2
queues    orders(partitions=3,leaseTime=6s,groups=__QUEUE_MODE__|audit)
workload  clients=3 ops=240 push=45 pop=30 ack=18 extend=2 txn=3 abandon=2 reuse=5% fail=8% direct=100%
vtime     2m0s
converge  1m0s
fault at=40s pg.refuse broker=all for=6s
expect properties no-loss no-double-delivery fifo dedup tenant lease-recovery fairness answers redelivery liveness payloads
`

// TestDirectPops runs a lockstep scenario whose every workload pop goes
// through the consumer rather than HTTP: the pops must happen (claims
// delivered, autoAck ones among them) and every property hold over them,
// as over HTTP pops. The final drain still pops over HTTP.
func TestDirectPops(t *testing.T) {
	s, err := scenarios.Parse(strings.NewReader(directScenario))
	if err != nil {
		t.Fatal(err)
	}
	o := run(t, s, "")
	calls := map[int]sim.Event{}
	var direct, http, delivered, autoAcked int
	for _, e := range o.History.Events() {
		switch {
		case e.Kind == sim.KInvoke && e.Op == "pop" && e.Client > 0:
			calls[e.Call] = e
			if e.Direct {
				direct++
			} else {
				http++
			}
		case e.Kind == sim.KOK && e.Op == "pop" && e.Code == 200 && calls[e.Call].Direct:
			delivered++
			if calls[e.Call].Status == "autoack" {
				autoAcked++
			}
		}
	}
	t.Logf("workload pops: %d direct (%d delivered, %d of them autoAck), %d over HTTP", direct, delivered, autoAcked, http)
	if http > 0 || direct == 0 {
		t.Errorf("direct=100%%: %d workload pops went over HTTP, %d directly", http, direct)
	}
	if delivered == 0 || autoAcked == 0 {
		t.Errorf("direct pops delivered %d batches, %d of them autoAck: want some of each", delivered, autoAcked)
	}
	if o.Coverage["consume=direct x queue=plain"] == 0 {
		t.Errorf("coverage cell consume=direct x queue=plain not reached")
	}
}
