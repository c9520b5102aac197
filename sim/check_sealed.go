package sim

import "fmt"

// CheckSealed: once a queue's encryption was turned on (queue.encrypt, or
// SealedQueue from its creation), every message stored in it by a
// statement that started after that commit is sealed, whatever a broker
// cached of the queue's configuration (the final read lists the rows that
// are not), and sealed once: no stored envelope opens to another envelope
// (the final read opens every sealed row of those queues with the
// simulated keys). That a consumer is never handed an envelope, nor
// anything but what was written, is the payloads rule's.
func CheckSealed(h []Event, _ Spec) []Violation {
	final := finalEvent(h)
	if final == nil {
		return nil
	}
	var out []Violation
	for _, k := range final.Plain {
		out = append(out, Violation{"sealed", fmt.Sprintf("%s was stored in the clear after its queue's encryption was turned on", k)})
	}
	for _, k := range final.Twice {
		out = append(out, Violation{"sealed", fmt.Sprintf("%s was stored sealed twice: its envelope opens to another envelope", k)})
	}
	return limit(out, 20)
}
