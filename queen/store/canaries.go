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
}

// apply rewrites sql; the caller has checked canary.On(v.canary).
func (v variant) apply(sql string) string { return strings.Replace(sql, v.old, v.new, 1) }

var (
	// dedupRaises: a resent transactionId hits the unique index as an error.
	dedupRaises = variant{"dedup-raises", "ON CONFLICT (partition_id, transaction_id) DO NOTHING", ""}
	// timerEarly: claims (and fires) timers up to two seconds early.
	timerEarly = variant{"timer-early", "<= coalesce($1::timestamptz, now())\n", "<= coalesce($1::timestamptz, now()) + interval '2 seconds'\n"}
	// kvTTLIgnored: reads see expired rows until the sweeper prunes them.
	kvTTLIgnored = variant{"kv-ttl-ignored", kvLive, "true"}
	// kvGetManyTTLIgnored: getMany alone sees expired rows (get and
	// getPrefix do not), so only a workload reading every way sees it.
	kvGetManyTTLIgnored = variant{"kv-getmany-ttl-ignored", kvLive, "true"}
	// sealCacheTrusted: the append takes the process's cached "this
	// queue does not encrypt" for the truth, as before the statement read
	// it: encryption turned on from another broker stores plaintext.
	sealCacheTrusted     = variant{"seal-cache-trusted", "\n\tWHERE NOT EXISTS (SELECT 1 FROM unsealed)", ""}
	sealCacheTrustedFlag = variant{"seal-cache-trusted", "coalesce(l.seal AND NOT i.enc, false)", "false"}
	// timerClaimIgnoresLease: a sweeper claims a due timer whatever claim
	// another sweeper holds on it.
	timerClaimIgnoresLease = variant{"timer-claim-ignores-lease", "WHERE greatest(deliver_at, coalesce(claimed_until, deliver_at)) <=", "WHERE deliver_at <="}
	// claimUnfair: lowest partition id first, whoever was served last.
	claimUnfairOrder = variant{"claim-unfair", `/*order*/ pc.lease_acquired_at ASC NULLS FIRST,`, ``}
	claimUnfairPick  = variant{"claim-unfair", `ORDER BY c.acquired ASC NULLS FIRST, c.partition_id`, `ORDER BY c.partition_id`}
	// popIgnoresLease: a live lease does not keep a partition from a pop.
	popIgnoresLease = variant{"pop-ignores-lease", `(pc.lease_expires_at IS NULL OR pc.lease_expires_at <= coalesce($8::timestamptz, now()))`, `TRUE`}
	// delayIgnored: a pop claims and reads messages delayedProcessing
	// still hides, as if the queue had no delay.
	delayIgnoredHead   = variant{"delay-ignored", "WHERE (SELECT delayed_processing FROM q) = 0", "WHERE TRUE"}
	delayIgnoredHidden = variant{"delay-ignored", "CASE WHEN q.delayed_processing = 0 THEN NULL", "CASE WHEN TRUE THEN NULL"}
	// windowIgnored: a pop serves a partition whose newest message is
	// younger than the queue's windowBuffer.
	windowIgnored = variant{"window-ignored", "AND ((SELECT window_buffer FROM q) = 0", "AND (TRUE"}
	// retentionIgnoresGroup: completed retention deletes what any one
	// group consumed, whatever the others.
	retentionIgnoresGroupMin = variant{"retention-ignores-group", "min(pc.last_consumed_seq)", "max(pc.last_consumed_seq)"}
	retentionIgnoresGroupSub = variant{"retention-ignores-group", "/*subscribed*/", "AND false"}
	// evictEarly: eviction at a tenth of maxWaitTimeSeconds.
	evictEarly = variant{"evict-early", "secs => q.max_wait_time_seconds", "secs => q.max_wait_time_seconds / 10.0"}
	// extendRevives: an extend renews its token's lease whether or not it
	// is still live, so a lease that expired (or was released, its expiry
	// NULL) comes back to life while nobody else claimed the partition.
	extendRevives = variant{"extend-revives", " AND pc.lease_expires_at > coalesce($3::timestamptz, now())", ""}
	// subscriptionSkipsOne: a group subscribing with mode new or from
	// gets its cursor one message past its start point, so the first
	// message after it is never delivered to the group.
	subscriptionSkipsOne = variant{"subscription-skips-one", "x.created_at <= m.subscription_timestamp), 0) END", "x.created_at <= m.subscription_timestamp), 0) + 1 END"}
	// seekSkipsOne: a seek to a timestamp puts the cursor one message
	// past it.
	seekSkipsOne = variant{"seek-skips-one", "m.created_at <= $6::timestamptz), 0) END", "m.created_at <= $6::timestamptz), 0) + 1 END"}
)

// canaryVariant is one variant and a statement it rewrites.
type canaryVariant struct {
	v    variant
	stmt string
}

// canaryVariants pairs every variant with each statement it rewrites, for
// the test.
func canaryVariants() []canaryVariant {
	rule := func(name string) string {
		for _, r := range retentionRules {
			if r.name == name {
				return r.sql()
			}
		}
		return ""
	}
	return []canaryVariant{
		{dedupRaises, appendSQL}, {sealCacheTrusted, appendSQL}, {sealCacheTrustedFlag, appendSQL}, {timerEarly, claimTimersSQL}, {timerClaimIgnoresLease, claimTimersSQL}, {kvTTLIgnored, kvGetSQL}, {kvTTLIgnored, kvGetPrefixSQL}, {kvTTLIgnored, kvGetPrefixOpenSQL}, {kvGetManyTTLIgnored, kvGetSQL},
		{claimUnfairOrder, popSQL}, {claimUnfairPick, popSQL}, {popIgnoresLease, popSQL}, {claimUnfairOrder, popOneSQL}, {popIgnoresLease, popOneSQL},
		{delayIgnoredHead, popSQL}, {delayIgnoredHidden, popSQL}, {delayIgnoredHead, popOneSQL}, {delayIgnoredHidden, popOneSQL},
		{windowIgnored, popSQL}, {windowIgnored, popOneSQL},
		{retentionIgnoresGroupMin, rule("completed")}, {retentionIgnoresGroupSub, rule("completed")}, {evictEarly, rule("evicted")},
		{extendRevives, extendSQL},
		{subscriptionSkipsOne, subscribeSQL}, {seekSkipsOne, seekSQL},
	}
}
