package store

import "strings"

// The planted bugs of the simulator's self-test (queen/canary) that are
// statement variants: each is a named rewrite of one production statement,
// applied only when its canary is on. A rewrite whose text no longer occurs
// in its statement would silently disarm the canary; TestCanaryVariantsApply
// (in make test, no build tag needed) checks every one against the
// statement it rewrites, so a change to a statement that drifts from its
// canary fails there, not by a canary that quietly stops being caught.
type variant struct {
	canary   string
	old, new string
	// rewrite, when set, replaces the plain substitution of old by new:
	// a rewrite no single replacement can say (strandedSQL).
	rewrite func(string) string
}

// apply rewrites sql; text applies it only when v.canary is on.
func (v variant) apply(sql string) string {
	if v.rewrite != nil {
		return v.rewrite(sql)
	}
	return strings.Replace(sql, v.old, v.new, 1)
}

// freezeOnlyLocks: a freeze locks and rewrites the queue's partition and
// cursor rows but leaves their epochs (only the queue row is frozen): a
// push, pop or ack routed at the old epoch passes the fence on the source,
// its write after the activation is never copied. Not a named statement:
// fence applies it to fenceSQL (TestFreezeOnlyLocksApplies).
var freezeOnlyLocks = []variant{
	{canary: "freeze-only-locks", old: "UPDATE queen.partitions p SET epoch = $4 WHERE", new: "UPDATE queen.partitions p SET epoch = p.epoch WHERE"},
	{canary: "freeze-only-locks", old: "UPDATE queen.partition_consumers pc SET epoch = $4", new: "UPDATE queen.partition_consumers pc SET epoch = pc.epoch"},
}

var (
	// stranded: appends ordered at creation, not commit (strandedSQL).
	stranded = variant{canary: "stranded", rewrite: strandedSQL}
	// dedupRaises: a resent transactionId hits the unique index as an error.
	dedupRaises = variant{canary: "dedup-raises", old: "ON CONFLICT (partition_id, transaction_id) DO NOTHING", new: ""}
	// timerEarly: claims (and fires) timers up to two seconds early.
	timerEarly = variant{canary: "timer-early", old: "<= coalesce($1::timestamptz, now())\n", new: "<= coalesce($1::timestamptz, now()) + interval '2 seconds'\n"}
	// kvTTLIgnored: reads see expired rows until the sweeper prunes them.
	kvTTLIgnored = variant{canary: "kv-ttl-ignored", old: kvLive, new: "true"}
	// kvGetManyTTLIgnored: getMany alone sees expired rows (get and
	// getPrefix do not), so only a workload reading every way sees it.
	kvGetManyTTLIgnored = variant{canary: "kv-getmany-ttl-ignored", old: kvLive, new: "true"}
	// sealCacheTrusted: the append takes the process's cached "this
	// queue does not encrypt" for the truth, as before the statement read
	// it: encryption turned on from another broker stores plaintext.
	sealCacheTrusted     = variant{canary: "seal-cache-trusted", old: "\n\tWHERE NOT EXISTS (SELECT 1 FROM unsealed)", new: ""}
	sealCacheTrustedFlag = variant{canary: "seal-cache-trusted", old: "coalesce($10::boolean AND l.seal AND NOT i.enc, false)", new: "false"}
	// timerClaimIgnoresLease: a sweeper claims a due timer whatever claim
	// another sweeper holds on it.
	timerClaimIgnoresLease = variant{canary: "timer-claim-ignores-lease", old: "WHERE greatest(deliver_at, coalesce(claimed_until, deliver_at)) <=", new: "WHERE deliver_at <="}
	// claimUnfair: lowest partition id first, whoever was served last.
	claimUnfairOrder = variant{canary: "claim-unfair", old: `/*order*/ pc.lease_acquired_at ASC NULLS FIRST,`, new: ``}
	claimUnfairPick  = variant{canary: "claim-unfair", old: `ORDER BY c.acquired ASC NULLS FIRST, c.partition_id`, new: `ORDER BY c.partition_id`}
	// popIgnoresLease: a live lease does not keep a partition from a pop.
	popIgnoresLease = variant{canary: "pop-ignores-lease", old: `(pc.lease_expires_at IS NULL OR pc.lease_expires_at <= coalesce($8::timestamptz, now()))`, new: `TRUE`}
	// delayIgnored: a pop claims and reads messages delayedProcessing
	// still hides, as if the queue had no delay.
	delayIgnoredHead   = variant{canary: "delay-ignored", old: "WHERE (SELECT delayed_processing FROM q) = 0", new: "WHERE TRUE"}
	delayIgnoredHidden = variant{canary: "delay-ignored", old: "CASE WHEN q.delayed_processing = 0 THEN NULL", new: "CASE WHEN TRUE THEN NULL"}
	// windowIgnored: a pop serves a partition whose newest message is
	// younger than the queue's windowBuffer.
	windowIgnored = variant{canary: "window-ignored", old: "AND ((SELECT window_buffer FROM q) = 0", new: "AND (TRUE"}
	// retentionIgnoresGroup: completed retention deletes what any one
	// group consumed, whatever the others.
	retentionIgnoresGroupMin = variant{canary: "retention-ignores-group", old: "min(pc.last_consumed_seq)", new: "max(pc.last_consumed_seq)"}
	retentionIgnoresGroupSub = variant{canary: "retention-ignores-group", old: "/*subscribed*/", new: "AND false"}
	// evictEarly: eviction at a tenth of maxWaitTimeSeconds.
	evictEarly = variant{canary: "evict-early", old: "secs => q.max_wait_time_seconds", new: "secs => q.max_wait_time_seconds / 10.0"}
	// extendRevives: an extend renews its token's lease whether or not it
	// is still live, so a lease that expired (or was released, its expiry
	// NULL) comes back to life while nobody else claimed the partition.
	extendRevives = variant{canary: "extend-revives", old: " AND pc.lease_expires_at > coalesce($3::timestamptz, now())", new: ""}
	// ackIgnoresLease: an ack is judged as if every lease were live, held
	// by its token and covering its message (queen.ack_verdict's
	// ignore_lease), in the combined completions and the general batch's
	// read alike; the read calls the rule twice, as read and unleased.
	ackIgnoresLeaseCompleted = variant{canary: "ack-ignores-lease", old: "f.lease, clock.now, false) END AS verdict", new: "f.lease, clock.now, true) END AS verdict"}
	ackIgnoresLeaseRead      = variant{canary: "ack-ignores-lease", old: "c.lease_expires_at, c.lease_max_seq, f.lease, clock.now, false)", new: "c.lease_expires_at, c.lease_max_seq, f.lease, clock.now, true)"}
	ackIgnoresLeaseUnleased  = variant{canary: "ack-ignores-lease", old: "NULL, NULL, c.lease_max_seq, f.lease, clock.now, false)", new: "NULL, NULL, c.lease_max_seq, f.lease, clock.now, true)"}
	// lockStallsAll: a combined push or ack statement waits for a row
	// lock as long as it takes (lock_timeout 0, no bound), so it never
	// fails with 55P03 and its calls never split out to run alone: every
	// request behind it waits too, as before issue 28 item 8. A NULL lock
	// wait (a transaction's) still keeps the session's.
	lockStallsAllAppend = variant{canary: "lock-stalls-all", old: "set_config('lock_timeout', $9, true)", new: "set_config('lock_timeout', '0', true)"}
	lockStallsAllAck    = variant{canary: "lock-stalls-all", old: "set_config('lock_timeout', $7, true)", new: "set_config('lock_timeout', '0', true)"}
	// subscriptionSkipsOne: a group subscribing with mode new or from
	// gets its cursor one message past its start point, so the first
	// message after it is never delivered to the group.
	subscriptionSkipsOne = variant{canary: "subscription-skips-one", old: "x.created_at <= m.subscription_timestamp), 0) END", new: "x.created_at <= m.subscription_timestamp), 0) + 1 END"}
	// seekSkipsOne: a seek to a timestamp puts the cursor one message
	// past it.
	seekSkipsOne = variant{canary: "seek-skips-one", old: "m.created_at <= $6::timestamptz), 0) END", new: "m.created_at <= $6::timestamptz), 0) + 1 END"}
)

// statementVariants is the substitution table of the planted bugs that
// are statement variants: a statement's name (as in statements) to the
// rewrites of its text, applied in order by substitute for the one canary
// switched on, and only in the canary build (text). A statement run under
// several names (kv.get and kv.getMany) lists each rewrite under every
// name it affects, so a rewrite of one use leaves the others alone.
var statementVariants = map[string][]variant{
	"append":              {stranded, dedupRaises, sealCacheTrusted, sealCacheTrustedFlag, lockStallsAllAppend},
	"timer.claim":         {timerEarly, timerClaimIgnoresLease},
	"kv.get":              {kvTTLIgnored},
	"kv.getMany":          {kvGetManyTTLIgnored, kvTTLIgnored},
	"kv.getPrefix":        {kvTTLIgnored},
	"kv.getPrefixOpen":    {kvTTLIgnored},
	"pop":                 popVariants,
	"pop.partition":       popVariants,
	"pop.one":             popOneVariants,
	"pop.partition.one":   popOneVariants,
	"pop.many":            popOneVariants,
	"retention.completed": {retentionIgnoresGroupMin, retentionIgnoresGroupSub},
	"retention.evicted":   {evictEarly},
	"lease.extend":        {extendRevives},
	"subscribe":           {subscriptionSkipsOne},
	"seek":                {seekSkipsOne},
	"ack.completed":       {ackIgnoresLeaseCompleted, lockStallsAllAck},
	"ack.read":            {ackIgnoresLeaseRead, ackIgnoresLeaseUnleased},
}

var (
	// popVariants rewrite the general pop statements.
	popVariants = []variant{claimUnfairOrder, claimUnfairPick, popIgnoresLease, delayIgnoredHead, delayIgnoredHidden, windowIgnored}
	// popOneVariants rewrite the one-partition pop statements, which
	// rank nothing, so claimUnfairPick has nothing to rewrite there.
	popOneVariants = []variant{claimUnfairOrder, popIgnoresLease, delayIgnoredHead, delayIgnoredHidden, windowIgnored}
)

// substitute is sql as the canary named canaryName rewrites it: every
// variant of vs that belongs to that canary, in order.
func substitute(sql string, vs []variant, canaryName string) string {
	for _, v := range vs {
		if v.canary == canaryName {
			sql = v.apply(sql)
		}
	}
	return sql
}
