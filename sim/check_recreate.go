package sim

import (
	"fmt"
	"strings"
)

// recreateSlackMS bounds, on a loaded machine, how long after its last
// push a re-created queue's messages may take to reach the deleter's polls.
const recreateSlackMS = 8000

// CheckRecreates: a queue deleted and created again is a new queue to
// every broker that cached the old one. A re-create probe's deleter must
// deliver exactly the messages pushed after the delete (through itself
// and another broker, both of which had cached the old partition), within
// the slack, and nothing pushed before it. A cache the delete did not
// reach shows as pops that find nothing, or pushes into a partition that
// is gone.
//
// A stale-cache probe (What "stale") holds a broker that never heard of
// the delete (its mesh frames lost) to the same: a transaction into the
// re-created queue commits, and a consumer group it had cached gets
// every message pushed after the delete, within the slack.
func CheckRecreates(h []Event, _ Spec) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Kind == KProbe && e.What == "stale" {
			out = append(out, checkStale(e)...)
			continue
		}
		if e.Kind != KProbe || e.What != "recreate" {
			continue
		}
		switch {
		case e.Status != e.Txid:
			out = append(out, Violation{"recreate", fmt.Sprintf("%s, deleted and created again through broker %d, delivered [%s] there in %d ms; pushed after the delete: [%s]",
				e.Queue, e.Broker, e.Status, e.Until, e.Txid)})
		case e.Until > recreateSlackMS:
			out = append(out, Violation{"recreate", fmt.Sprintf("%s, deleted and created again through broker %d, took %d ms to deliver [%s] there (slack %d ms)",
				e.Queue, e.Broker, e.Until, strings.ReplaceAll(e.Status, ",", " "), recreateSlackMS)})
		}
	}
	return out
}

// checkStale judges one stale-cache probe.
func checkStale(e Event) []Violation {
	var out []Violation
	if e.Bad != "" {
		out = append(out, Violation{"recreate", fmt.Sprintf("%s, deleted through another broker with the mesh down: broker %d refused a valid transaction into it: %s", e.Queue, e.Broker, e.Bad)})
	}
	switch {
	case e.Status != e.Txid:
		out = append(out, Violation{"recreate", fmt.Sprintf("%s, deleted through another broker with the mesh down, gave group %s [%s] on broker %d in %d ms; pushed there after the delete: [%s]",
			e.Queue, e.Group, e.Status, e.Broker, e.Until, e.Txid)})
	case e.Until > recreateSlackMS:
		out = append(out, Violation{"recreate", fmt.Sprintf("%s, deleted through another broker with the mesh down, took %d ms to reach group %s on broker %d (slack %d ms)",
			e.Queue, e.Until, e.Group, e.Broker, recreateSlackMS)})
	}
	return out
}
