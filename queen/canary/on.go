//go:build canary

package canary

import "os"

// On reports whether the planted bug name is switched on through
// QUEEN_CANARY. Only the simulator's self-test builds with the canary tag:
// each planted bug must make `make sim` fail, or the simulator is blind to
// it. The bugs: ack-ignores-lease, dedup-off, pop-ignores-lease,
// tenant-dropped, stranded (appends ordered at creation, not commit),
// claim-unfair (wildcard pops serve the lowest partition id first),
// retention-ignores-group (completed retention deletes what one group consumed),
// spool-tenant-dropped (replay under the default tenant),
// spool-poison-whole-file (a refused batch is not split: every record in
// the poison record's file is quarantined with it), dedup-raises (a resent
// transactionId fails the push with a unique violation), failed-ack-completes
// (a failed ack moves the cursor as a completion does), ack-ignores-tenant
// (an ack is applied as the partition's owner, whoever sent it),
// shutdown-cuts-requests (a graceful stop cancels the requests in flight
// before letting them answer), cancel-keeps-claim (a claim that finished
// after its pop's client left is not given back), timer-early (the sweeper
// claims and fires timers up to two seconds before they are due),
// kv-ttl-ignored (KV reads see expired rows until they are pruned),
// evict-early (eviction deletes messages at a tenth of maxWaitTimeSeconds),
// cycle-ignores-lease (a streams cycle commits under a lease it lost),
// combiner-swaps (a combined push batch hands its answers back reversed),
// ack-combiner-swaps (a combined ack batch does the same),
// pop-combiner-swaps (a combined pop statement does the same),
// kv-getmany-ttl-ignored (getMany alone reads expired rows), limits-off
// (the edge checks no field against queen/limits), timer-batch-poisoned
// (a timer whose fire is refused fails its whole claimed batch, every
// lease, as before poison timers were isolated), seal-cache-trusted (the
// append trusts the process's cached encryption setting),
// timer-claim-ignores-lease (a sweeper claims a timer another still holds),
// read-only-permanent (SQLSTATE 25006, a read-only server, is bad data
// again rather than an outage), poll-waits-for-wake (a parked long poll
// checks again only when woken, or at its timeout), delete-keeps-cache (a
// queue's delete leaves this process's cached ids of it, and a pop trusts
// its cached subscription), claim-after-leave
// (a pop does not look at its client before it claims; the release after
// the claim still gives the claim back),
// stale-cache-no-retry (a transaction that meets a stale cached partition
// id fails without forgetting it, until the entry's ttl; plain pushes
// still retry), spool-corrupt-drops-rest (a spool record failing its
// checksum is read as a torn tail: the records after it are dropped and
// nothing is quarantined, as before issue 28 item 2), lock-stalls-all (a
// combined push or ack statement waits for a row lock with no bound, so
// every request behind it waits too, as before issue 28 item 8),
// autoack-consumes-undelivered (an autoAck pop's claim completes what it
// claims, so an answer its client never got loses it, as before issue 28
// item 3), retention-stops-at-failure (the first retention rule that fails
// ends the pass: the rules after it do not run), retention-on-pool (the
// retention leader's statements run on the pool, not on the session
// holding the advisory lock, so a leader whose lock session died keeps
// acting), timer-seals-twice (a timer's fire reads its sealed payload as
// plain and seals it again: a pop of an encrypted queue delivers an
// envelope), extend-revives (a lease extend renews its token's lease
// whether or not it is still live: an expired or released lease comes
// back), spool-lock-off (spool.Open takes no lock on its directory: a
// second broker given the same FILE_BUFFER_DIR opens it beside the first),
// delay-ignored (a pop claims and reads messages delayedProcessing still
// hides), window-ignored (a pop serves a partition inside its
// windowBuffer), txn-skips-limits (a transaction's push items are not held
// to queen/limits, so a field the database cannot index fails the
// transaction with a 500, as issue 29 found), subscription-skips-one (a
// group subscribing with mode new or subscriptionFrom gets its cursor one
// message past its start point), seek-skips-one (a seek to a timestamp
// puts the cursor one message past it), freeze-only-locks (a move's freeze
// locks the queue's partition and cursor rows without changing their
// epochs), activate-before-catchup (the mover activates the destination
// without waiting for it to apply what the source committed up to the
// freeze), drain-spooled-shard (a shard's spool lane replays through its
// own shard's push path, unfenced, not where its queue is placed when it
// drains: a queue moved meanwhile gets its buffered pushes on the old
// shard), move-step-twice (the mover's activation does not look whether
// it ran and bumps the catalogue's epoch it reads: rerun after a mover
// died past its set, it places the queue past the destination's epoch).
func On(name string) bool { return name != "" && os.Getenv("QUEEN_CANARY") == name }
