package sim

import "hash/fnv"

// lateExtendAfter is how long past a held batch's latest lease end its
// late extend waits (virtual time), well past the late-extend rule's
// slack.
const lateExtendAfter = 1000

// lateExtends sends, before each lockstep step, the late extends that are
// due: every held batch picked by lateExtendPicked whose lease ended at
// least lateExtendAfter ago is extended once, while its client still holds
// it (nobody else has claimed the partition yet, most often). The broker
// must answer that nothing was renewed. Each is a request beside the
// workload's, not drawn from its stream: with a correct broker it changes
// nothing, so every other choice of the seed stays as it was.
func (r *runner) lateExtends() {
	if r.pg == nil || r.o.Weights.LateExtendPct == 0 {
		return
	}
	now := r.vt()
	for _, c := range r.clients {
		for _, h := range c.held {
			if h.lateDone || now < h.until+lateExtendAfter || !r.lateExtendPicked(h.lease, 0) {
				continue
			}
			b, ok := r.brokerFor(c)
			if !ok {
				break
			}
			h.lateDone = true
			r.act.extend(r.ctx, c.id, b, h, extendSecs)
		}
	}
}

// extendAfterAck extends h once more right after the ack that let it go,
// when lateExtendPicked picks it (lockstep only): released or expired,
// its lease has ended, and the broker must renew nothing.
func (r *runner) extendAfterAck(c, b int, h *held) {
	if r.pg == nil || r.o.Weights.LateExtendPct == 0 || !r.lateExtendPicked(h.lease, 1) {
		return
	}
	r.act.extend(r.ctx, c, b, h, extendSecs)
}

// lateExtendPicked decides, from the lease id (seeded, so a replay picks
// the same) mixed with the seed, whether a batch gets a late extend of
// the given kind (0: after expiry, 1: after its ack).
func (r *runner) lateExtendPicked(lease string, kind uint64) bool {
	f := fnv.New64a()
	_, _ = f.Write([]byte(lease))
	return mix64(r.o.Seed^f.Sum64()^kind*0x9e3779b97f4a7c15)%100 < uint64(r.o.Weights.LateExtendPct)
}
