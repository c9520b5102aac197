//go:build canary

package scenarios_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/scenarios"
	"github.com/queen-go/queen/sim"
)

// canaries are the bugs planted in queen/store behind the canary build tag.
// Each is hunted by the scenario that can see it: stranding needs real
// concurrency, so the free-running scenario hunts it.
var canaries = map[string]string{
	"ack-ignores-lease": "canary-hunt.scn",
	"dedup-off":         "canary-hunt.scn",
	"pop-ignores-lease": "canary-hunt.scn",
	"tenant-dropped":    "canary-hunt.scn",
	"stranded":          "canary-race.scn",
	// Spooled pushes must replay under the tenant resolved at push time.
	"spool-tenant-dropped": "canary-spool.scn",
}

// TestCanariesAreCaught runs the canary scenario with each planted bug
// switched on: the simulator must fail every one of them, and must pass
// the same scenario with none switched on.
func TestCanariesAreCaught(t *testing.T) {
	run := func(t *testing.T, file string, reseed uint64) *scenarios.Outcome {
		s := load(t, filepath.Join(root, "testdata", "canaries", file))
		s.Seed += reseed
		o, err := scenarios.Run(context.Background(), storetest.DSN(t), s, t.TempDir(), "", false)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, file := range []string{"canary-hunt.scn", "canary-race.scn", "canary-spool.scn"} {
		t.Run("none/"+file, func(t *testing.T) {
			t.Setenv("QUEEN_CANARY", "")
			if o := run(t, file, 0); o.Failed() {
				t.Fatalf("fails with no canary: %s", o.Report())
			}
		})
	}
	for _, c := range slices.Sorted(maps.Keys(canaries)) {
		t.Run(c, func(t *testing.T) {
			t.Setenv("QUEEN_CANARY", c)
			// A free-running scenario catches its canary only when the
			// race happens; it gets the file's seed and the next two.
			o := run(t, canaries[c], 0)
			for i := uint64(1); !o.Failed() && i < 3 && o.Scenario.Mode == "free"; i++ {
				t.Logf("canary %s survived seed %#x, trying the next", c, o.Scenario.Seed)
				o = run(t, canaries[c], i)
			}
			if !o.Failed() {
				t.Fatalf("canary %s survived: %s", c, o.Report())
			}
			caught := map[string]bool{}
			for _, v := range o.Violations {
				caught[v.Property] = true
			}
			t.Logf("canary %s caught by %v", c, caught)
		})
	}
}

// generatedCanaries are hunted by generated seeds only: the test walks a
// fixed run of seeds, keeps those whose generated scenario exercises what
// the bug breaks, and the canary must fail one of them. No committed
// scenario helps.
var generatedCanaries = map[string]func(*scenarios.Scenario) bool{
	// Lowest partition id first: a hot partition starves the others.
	"claim-unfair": func(s *scenarios.Scenario) bool { return s.Weights.HotPct > 0 },
	// Completed retention deletes what one group consumed, whatever the
	// others have.
	"retention-ignores-group": func(s *scenarios.Scenario) bool { return s.Queues[0].CompletedRetentionSecs > 0 },
	// A streams cycle commits under a lease it lost: counted twice.
	"cycle-ignores-lease": func(s *scenarios.Scenario) bool { return s.Weights.Stream > 0 },
	// Eviction deletes messages long before their maxWait.
	"evict-early": func(s *scenarios.Scenario) bool { return s.Queues[0].MaxWaitSecs > 0 },
	// A resent transactionId fails its push with a unique violation: a
	// 500 on a healthy database.
	"dedup-raises": func(s *scenarios.Scenario) bool { return s.Weights.ReusePct > 0 },
	// A failed ack moves the cursor: the message never comes back.
	"failed-ack-completes": func(s *scenarios.Scenario) bool { return s.Weights.FailPct > 0 },
	// An ack under another tenant is applied as the owner's.
	"ack-ignores-tenant": func(s *scenarios.Scenario) bool { return s.Weights.Foreign > 0 },
	// A claim that finished after its client left is kept: the partition
	// hides for a lease.
	"cancel-keeps-claim": func(s *scenarios.Scenario) bool { return s.Weights.Leave > 0 },
	// A pop claims for a client already gone (the release afterwards
	// gives the claim back): only the abandoned-claims rule sees it.
	"claim-after-leave": func(s *scenarios.Scenario) bool { return s.Weights.EarlyPct > 0 },
	// Timers fire before their deliverAt.
	"timer-early": func(s *scenarios.Scenario) bool { return s.Weights.Timer > 0 },
	// A poison timer fails the whole batch claimed with it, every lease:
	// the healthy timers never fire.
	"timer-batch-poisoned": func(s *scenarios.Scenario) bool { return s.Weights.Timer > 0 },
	// Expired KV rows stay readable until pruned.
	"kv-ttl-ignored": func(s *scenarios.Scenario) bool { return s.Weights.KV > 0 },
	// getMany alone reads expired rows: only a workload that reads every
	// way (get, getMany, getPrefix) sees it.
	"kv-getmany-ttl-ignored": func(s *scenarios.Scenario) bool { return s.Weights.KV > 0 },
	// The edge checks nothing against the limits table: an input
	// PostgreSQL refuses answers 500, or is buffered in an outage and
	// dropped at replay.
	"limits-off": func(s *scenarios.Scenario) bool { return s.Weights.Push > 0 },
	// A transaction's push items skip the limits table: a field the
	// database cannot index fails the transaction with a 500, which the
	// edges rule counts as a violation (refused input, not an outage).
	// Every seed's consumers send transactions past a limit.
	"txn-skips-limits": func(s *scenarios.Scenario) bool { return s.Weights.Pop > 0 },
	// The append trusts a broker's cached "plain" for a queue whose
	// encryption was turned on through another broker: plaintext stored.
	"seal-cache-trusted": func(s *scenarios.Scenario) bool { return hasFault(s, "queue.encrypt") && s.Brokers > 1 },
	// A read-only server (a failover's standby, 25006) is bad data: pushes
	// meeting it answer 500 and spooled ones are quarantined.
	"read-only-permanent": func(s *scenarios.Scenario) bool { return hasFault(s, "pg.readonly") },
	// A refused batch quarantines its whole file, clients' records with it.
	"spool-poison-whole-file": func(s *scenarios.Scenario) bool { return hasFault(s, "spool.poison") },
	// A record failing its checksum with records after it is read as a
	// torn tail: the rest of its file is dropped, nothing quarantined.
	"spool-corrupt-drops-rest": func(s *scenarios.Scenario) bool { return hasFault(s, "spool.corrupt") },
	// The retention leader's statements run on the pool, not on the
	// session holding its lock: a pass whose lock session was cut as it
	// started (leader.cut) still deletes, and ends without error.
	"retention-on-pool": func(s *scenarios.Scenario) bool { return hasFault(s, "leader.cut") },
	// A pop ignores delayedProcessing: messages are delivered before
	// they are that old (the queue-options rule).
	"delay-ignored": func(s *scenarios.Scenario) bool { return s.Queues[0].DelayedSecs > 0 },
	// A pop serves a partition whose newest message is younger than the
	// queue's windowBuffer (the queue-options rule).
	"window-ignored": func(s *scenarios.Scenario) bool {
		return slices.ContainsFunc(s.Queues, func(q sim.QueueSpec) bool { return q.WindowSecs > 0 })
	},
	// An autoAck pop whose client left while it claimed consumes what it
	// claimed: nobody receives it.
	// The first retention rule that fails ends the pass: the rules
	// after it stop too (the retention probe makes one rule fail).
	"retention-stops-at-failure": func(s *scenarios.Scenario) bool { return hasFault(s, "retention.fail") },
	"autoack-consumes-undelivered": func(s *scenarios.Scenario) bool {
		return s.Weights.Leave > 0 && s.Weights.LeaveAutoAckPct > 0 && hasGroup(s)
	},
	// A timer's fire seals its stored envelope again: a pop of the
	// encrypted queue (sealed.paths) hands out an envelope.
	"timer-seals-twice": func(s *scenarios.Scenario) bool { return hasFault(s, "sealed.paths") },
	// An extend renews an expired or released lease: only the late-extend
	// rule, fed by the late extends of held batches, sees it.
	"extend-revives": func(s *scenarios.Scenario) bool { return s.Weights.LateExtendPct > 0 },
	// The spool takes no lock on its directory: a second spool opens a
	// running broker's (spool.second), which spool-exclusive rejects.
	"spool-lock-off": func(s *scenarios.Scenario) bool { return hasFault(s, "spool.second") },
	// A group subscribing with mode new or subscriptionFrom starts one
	// message past its start point: its first message never comes.
	"subscription-skips-one": func(s *scenarios.Scenario) bool { return hasLate(s) },
	// A seek to a timestamp starts one message past it.
	"seek-skips-one": func(s *scenarios.Scenario) bool { return hasLate(s) },
}

// hasLate reports whether a queue of s has late subscriptions.
func hasLate(s *scenarios.Scenario) bool {
	for _, q := range s.Queues {
		if len(q.Late) > 0 {
			return true
		}
	}
	return false
}

// canaryProperty names, for a generated canary, the property that must
// catch it: a seed failing only through another one does not count.
var canaryProperty = map[string]string{
	"timer-seals-twice":          "payloads",
	"retention-stops-at-failure": "retention-progress",
	"retention-on-pool":          "leader-passes",
	"extend-revives":             "late-extend",
	"spool-lock-off":             "spool-exclusive",
	"txn-skips-limits":           "edges",
	"delay-ignored":              "queue-options",
	"window-ignored":             "queue-options",
	"subscription-skips-one":     "subscription",
	"seek-skips-one":             "subscription",
}

// hasGroup reports whether a queue of s is read by a consumer group (the
// leaving pops ask for autoAck only in groups).
func hasGroup(s *scenarios.Scenario) bool {
	for _, q := range s.Queues {
		for _, g := range q.Groups {
			if g != sim.QueueMode {
				return true
			}
		}
	}
	return false
}

func hasFault(s *scenarios.Scenario, kind string) bool {
	for _, f := range s.Faults {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

func TestCanariesAreCaughtByGeneratedSeeds(t *testing.T) {
	// Lockstep seeds replay exactly, so which seed catches a canary is
	// fixed; ten fitting seeds leave room for workload changes.
	const base, tries = 0x9e3779b97f4a7c15, 10
	for _, c := range slices.Sorted(maps.Keys(generatedCanaries)) {
		t.Run(c, func(t *testing.T) {
			t.Setenv("QUEEN_CANARY", c)
			ran := 0
			for i := uint64(0); ran < tries && i < 200; i++ {
				s := scenarios.Generate(base + i)
				if !generatedCanaries[c](s) {
					continue
				}
				ran++
				o, err := scenarios.Run(context.Background(), storetest.DSN(t), s, t.TempDir(), "", false)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: generated seed %#x failed=%v", c, s.Seed, o.Failed())
				if o.Failed() {
					caught := map[string]bool{}
					for _, v := range o.Violations {
						caught[v.Property] = true
					}
					if p := canaryProperty[c]; p != "" && !caught[p] {
						t.Logf("canary %s: generated seed %#x failed through %v, not %s", c, s.Seed, caught, p)
						continue
					}
					t.Logf("canary %s caught by generated seed %#x (%s) through %v", c, s.Seed, s.Name, caught)
					return
				}
			}
			t.Fatalf("canary %s survived %d generated seeds", c, ran)
		})
	}
}

// TestStrandedIsCaughtByGeneratedFreeSeeds: stranding (appends ordered at
// creation, not commit) needs commits racing, which only free-running runs
// have; generated free-running seeds must catch it, not only the committed
// canary-race scenario.
func TestStrandedIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "stranded", func(*scenarios.Scenario) bool { return true })
}

// TestShutdownCutsIsCaughtByGeneratedFreeSeeds: a graceful stop that
// cancels its requests first answers them with empty 200s; generated
// free-running seeds with a rolling restart must catch it.
func TestShutdownCutsIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "shutdown-cuts-requests", func(s *scenarios.Scenario) bool { return hasFault(s, "broker.stop") })
}

// TestCombinerSwapsIsCaughtByGeneratedFreeSeeds: a combined push batch
// that hands each request another's answer passes every delivery property
// (the rows are right); only the answers rule, which ties what a push was
// told to what is delivered, sees it, in free-running runs where pushes
// combine.
func TestCombinerSwapsIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "combiner-swaps", func(*scenarios.Scenario) bool { return true })
}

// TestAckCombinerSwapsIsCaughtByGeneratedFreeSeeds: a combined ack batch
// that hands each request another's answers settles the right rows; only
// the answers rule, which holds each ack answer to its own item, sees it,
// in free-running runs where acks combine.
func TestAckCombinerSwapsIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "ack-combiner-swaps", func(*scenarios.Scenario) bool { return true })
}

// TestPopCombinerSwapsIsCaughtByGeneratedFreeSeeds: a combined pop
// statement that hands each pop another's claim (pops of other queues,
// groups or tenants among them) is seen by the delivery rules: a message
// handed out under a second live lease, twice in a group, or to a pop of
// another tenant.
func TestPopCombinerSwapsIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "pop-combiner-swaps", func(*scenarios.Scenario) bool { return true })
}

// TestTimerClaimIgnoresLeaseIsCaughtByGeneratedFreeSeeds: a sweeper that
// claims timers another still holds fires each once all the same (the last
// claim's token is the one the fire needs); only the timer-claims rule,
// which sees the claims, catches it, in free-running runs with a slow
// sweeper.
func TestTimerClaimIgnoresLeaseIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "timer-claim-ignores-lease", func(s *scenarios.Scenario) bool { return hasFault(s, "sweeper.stall") })
}

// TestPollWaitsForWakeIsCaughtByGeneratedFreeSeeds: a long poll that
// sleeps until something wakes it passes every delivery property (another
// consumer, or its own timeout, delivers in the end); only the lost-wake
// rule, which bounds what a lost wake costs, catches it.
func TestPollWaitsForWakeIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "poll-waits-for-wake", func(s *scenarios.Scenario) bool { return hasFault(s, "wake.probe") })
}

// TestDeleteKeepsCacheIsCaughtByGeneratedFreeSeeds: a delete that leaves
// the deleting broker's cached ids of the queue passes every property of
// the workload's own queues, which are never deleted; only the recreate
// rule, which deletes and re-creates a queue both brokers cached, sees it.
func TestDeleteKeepsCacheIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "delete-keeps-cache", func(s *scenarios.Scenario) bool { return hasFault(s, "queue.recreate") })
}

// TestLockStallsAllIsCaughtByGeneratedFreeSeeds: a combined push or ack
// statement that waits for a row lock as long as it takes (no lock wait
// bound, its calls never split out to run alone) holds up every request
// behind it; only the row-lock rule, which times the other partitions'
// pushes and acks while an outside session holds one row (pg.rowlock),
// sees it.
func TestLockStallsAllIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "lock-stalls-all", func(s *scenarios.Scenario) bool { return hasFault(s, "pg.rowlock") })
}

// TestStaleCacheNoRetryIsCaughtByGeneratedFreeSeeds: a transaction that
// meets a cached partition id deleted through another broker fails, and
// keeps failing, rather than forget the id and run again (a plain push
// did); only the stale-cache probe (cache.stale: the deleting broker's
// mesh frames lost, so the others keep their cached ids) sees it.
func TestStaleCacheNoRetryIsCaughtByGeneratedFreeSeeds(t *testing.T) {
	huntFree(t, "stale-cache-no-retry", func(s *scenarios.Scenario) bool { return hasFault(s, "cache.stale") })
}

// huntFree runs the canary against the first generated free-running seeds
// that fit; one of four must fail.
func huntFree(t *testing.T, canary string, fits func(*scenarios.Scenario) bool) {
	const base, tries = 0x9e3779b97f4a7c15, 4
	t.Setenv("QUEEN_CANARY", canary)
	ran := 0
	for i := uint64(0); ran < tries && i < 50; i++ {
		s := scenarios.GenerateFree(base + i)
		if !fits(s) {
			continue
		}
		ran++
		o, err := scenarios.Run(context.Background(), storetest.DSN(t), s, t.TempDir(), "", false)
		if err != nil {
			t.Fatal(err)
		}
		if o.Failed() {
			caught := map[string]bool{}
			for _, v := range o.Violations {
				caught[v.Property] = true
			}
			t.Logf("%s caught by generated free-running seed %#x through %v", canary, s.Seed, caught)
			if len(caught) == 0 {
				t.Fatalf("%s failed seed %#x but broke no property (a harness failure, not a catch): %s", canary, s.Seed, o.Report())
			}
			return
		}
		t.Logf("%s: generated free-running seed %#x passed", canary, s.Seed)
	}
	t.Fatalf("%s survived %d generated free-running seeds", canary, ran)
}

// shardCanaries are the shard world's planted bugs, each with what must
// catch it: a property, or (after "sometimes ") an event a healthy run
// always has.
var shardCanaries = map[string]string{
	// Writes routed at the old epoch pass a freeze that only locks: those
	// after the activation stay on the source, deleted by the cleanup.
	"freeze-only-locks": "no-loss",
	// The activation meets a destination that has not applied the
	// freeze yet (its queue row not frozen): the mover's own check fails
	// the move and rolls it back, so the move never finishes.
	"activate-before-catchup": "sometimes move.done",
	// The activation, rerun by a new mover after the one that ran it died
	// past the catalogue's set, bumps the placement past the
	// destination's epoch: every push of the queue then answers 503
	// (moved, forever) outside every fault window.
	"move-step-twice": "answers",
}

// shardCanaryNeeds names, for a shard canary that only bites after a
// fault, the event (Result.Fired) a seed's run must have for the seed to
// count: move-step-twice needs the mover killed past the activation's
// catalogue set.
var shardCanaryNeeds = map[string]string{
	"move-step-twice": "move.crashed.activate",
}

// TestShardCanariesAreCaughtByGeneratedSeeds: each shard canary fails one
// of the first four generated shard world seeds that fit it (of 24), by
// its property.
func TestShardCanariesAreCaughtByGeneratedSeeds(t *testing.T) {
	const base, tries = 0x9e3779b97f4a7c15, 4
	c := shardCluster(t)
	for _, name := range slices.Sorted(maps.Keys(shardCanaries)) {
		t.Run(name, func(t *testing.T) {
			t.Setenv("QUEEN_CANARY", name)
			ran := 0
			for i := uint64(0); ran < tries && i < 24; i++ {
				s := scenarios.GenerateShardMove(base + i)
				w := shardWorld(t, c, fmt.Sprintf("c%d_%d", len(name), i))
				o, err := scenarios.RunSharded(context.Background(), w, s, t.TempDir(), false)
				if err != nil {
					t.Fatal(err)
				}
				if need := shardCanaryNeeds[name]; need != "" && o.Fired[need] == 0 {
					t.Logf("canary %s: generated shard seed %#x has no %s, does not count", name, s.Seed, need)
					continue
				}
				ran++
				caught := map[string]bool{}
				for _, v := range o.Violations {
					caught[v.Property] = true
				}
				for _, m := range o.Missing {
					caught["sometimes "+m] = true
				}
				if caught[shardCanaries[name]] {
					t.Logf("canary %s caught by generated shard seed %#x through %v; replay: QUEEN_CANARY=%s %s", name, s.Seed, slices.Sorted(maps.Keys(caught)), name, o.Replay)
					return
				}
				t.Logf("canary %s: generated shard seed %#x not caught by %s (%v): %s", name, s.Seed, shardCanaries[name], caught, o.Summary())
			}
			t.Fatalf("canary %s survived %d generated shard seeds that fit it", name, ran)
		})
	}
}
