package sim

import "fmt"

// CheckSealed: once a queue's encryption was turned on (queue.encrypt),
// every message stored in it by a statement that started after that commit
// is sealed, whatever a broker cached of the queue's configuration (the
// final read lists the rows that are not). That a consumer is never handed
// an envelope is the answers rule's: a pop delivering one is a bad answer.
func CheckSealed(h []Event, _ Spec) []Violation {
	final := finalEvent(h)
	if final == nil {
		return nil
	}
	var out []Violation
	for _, k := range final.Plain {
		out = append(out, Violation{"sealed", fmt.Sprintf("%s was stored in the clear after its queue's encryption was turned on", k)})
	}
	return limit(out, 20)
}
