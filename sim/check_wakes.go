package sim

import "fmt"

// wakeSlackMS covers, on a loaded machine, the time between a probe's
// push answer and the poll's next check, beyond PopWaitMax: scheduling,
// the claim, the answer.
const wakeSlackMS = 5000

// CheckWakes: a lost wake costs only latency, and only so much. A wake
// probe's long poll, parked on one broker while its message was pushed
// through another with every mesh frame dropped, must answer with that
// message within the periodic floor: PopWaitMax plus slack after the push
// was answered. A poll that sleeps until something wakes it answers at its
// timeout, or empty.
func CheckWakes(h []Event, _ Spec) []Violation {
	var out []Violation
	floor := PopWaitMax.Milliseconds() + wakeSlackMS
	for _, e := range h {
		if e.Kind != KProbe || e.What != "wake" {
			continue
		}
		switch {
		case e.Code != 200 || e.Status != e.Txid:
			out = append(out, Violation{"lost-wake", fmt.Sprintf("the long poll of %s on broker %d answered %d without %s, pushed through another broker %d ms before",
				e.Queue, e.Broker, e.Code, e.Txid, e.Until)})
		case e.Until > floor:
			out = append(out, Violation{"lost-wake", fmt.Sprintf("the long poll of %s on broker %d delivered %s %d ms after its push was answered, past the periodic floor of %d ms",
				e.Queue, e.Broker, e.Txid, e.Until, floor)})
		}
	}
	return out
}
