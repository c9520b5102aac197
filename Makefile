# queen: a Queen MQ-compatible broker whose state lives in PostgreSQL.
.DEFAULT_GOAL := help
GO ?= go
SIM_SEEDS ?= 16
# PostgreSQL's server programs: installed from Debian's packages as root with
# apt-get, else the target fails at once naming the command to run.
ENSURE_PG := ./scripts/ensure-postgres

run: ## start a local PostgreSQL (system binaries, data in .pg/) when PG_HOST is unset, then serve on :6632
	@[ -n "$$PG_HOST$$DATABASE_URL" ] || $(ENSURE_PG)
	$(GO) build -o bin/queen ./cmd/queen
	exec ./bin/queen dev

cluster: ## HA topology without Docker: local PostgreSQL (when PG_HOST is unset), two meshed brokers on :6642/:6652, a load balancer on :6632
	@[ -n "$$PG_HOST$$DATABASE_URL" ] || $(ENSURE_PG)
	$(GO) build -o bin/queen ./cmd/queen
	exec ./bin/queen cluster

cluster-shards: ## cluster's brokers on shards: two local PostgreSQL clusters (wal_level=logical, .pg/shards) holding a catalogue and shards s0, s1; prints a move demo's commands
	$(GO) build -o bin/queen ./cmd/queen
	exec ./bin/queen cluster-shards

ha-pg: ## cluster's brokers on pg_auto_failover (monitor + primary + synchronous secondary in .pg/ha); prints the failover command
	@$(ENSURE_PG) auto-failover
	$(GO) build -o bin/queen ./cmd/queen
	exec ./bin/queen ha-pg

test: ## run every test against real PostgreSQL (a throwaway cluster per test binary, or PG_TEST_DSN); prints the failover tests' numbers
	@$(ENSURE_PG)
	@rm -f failover-report.txt
	QUEEN_FAILOVER_REPORT=$(CURDIR)/failover-report.txt $(GO) test -count=1 -timeout 15m ./...
	@cat failover-report.txt 2>/dev/null || true

failover-async: ## measure what an asynchronous standby loses in a failover (acknowledged pushes that vanish)
	@$(ENSURE_PG)
	QUEEN_FAILOVER_ASYNC=1 $(GO) test -count=1 -timeout 10m -v -run TestAsyncStandbyLosesCommits ./failover/

test-race: ## the tests under the race detector
	@$(ENSURE_PG)
	$(GO) test -race -count=1 -timeout 20m ./...

SIM_RUN := TestCheckers|TestCommittedScenarios|TestRandomSeeds|TestShardMoveSeeds|TestShardMoveRegressions|TestFreeRunningSeeds|TestDeterminism|TestRapidScenarios|TestFormatRoundTrip|TestLockstepSmoke|TestFreeRunningSmoke
sim: ## simulator: checker self-tests, committed scenarios, SIM_SEEDS random seeds (16), determinism double-run, rapid; prints every seed
	@$(ENSURE_PG)
	SIM_SEEDS=$(SIM_SEEDS) $(GO) test -count=1 -tags canary -timeout 30m -v -run '$(SIM_RUN)' ./sim/ ./scenarios/

sim-replay: ## rerun one run and keep its history in sim-out/: make sim-replay SEED=0x... or SCENARIO=path/to.scn
	SIM_REPLAY_SEED=$(SEED) SIM_REPLAY_SCENARIO=$(SCENARIO) $(GO) test -count=1 -tags canary -v -run TestReplayOne ./scenarios/

sim-canaries: ## run the simulator once per planted bug; passes only if every canary is caught
	$(GO) test -count=1 -tags canary -timeout 20m -v -run 'TestCanariesAreCaught|TestStrandedIsCaught|TestShutdownCutsIsCaught|TestCombinerSwapsIsCaught|TestAckCombinerSwapsIsCaught|TestPopCombinerSwapsIsCaught|TestTimerClaimIgnoresLeaseIsCaught|TestPollWaitsForWakeIsCaught|TestDeleteKeepsCacheIsCaught|TestStaleCacheNoRetryIsCaught|TestLockStallsAllIsCaught|TestShardCanariesAreCaught' ./scenarios/

attack: ## the attack suite (attack/): builds bin, starts real brokers on loopback and attacks them black-box; prints a table and "attack: N passed, M failed"
	@$(ENSURE_PG)
	$(GO) test -tags attack -count=1 -timeout 20m -v ./attack/

# A count budget (N x), not a duration: with go1.26 a -fuzztime duration can end a
# clean run with a spurious "context deadline exceeded" (golang/go#75804, fixed in 1.27).
FUZZTIME ?= 20000x
FUZZ_TARGETS := queen/httpapi:FuzzPushBody queen/httpapi:FuzzPushDecodersAgree queen/httpapi:FuzzAckBatchParsersAgree queen/httpapi:FuzzTimerAndKVBodies queen/httpapi:FuzzTransactionOp \
	queen/httpapi:FuzzPopQuery queen/httpapi:FuzzTraceBody queen/httpapi:FuzzCycleBody queen/spool:FuzzRecordReader queen/auth:FuzzToken \
	queen/mesh:FuzzReadFrame queen/mesh:FuzzAcceptHandshake
fuzz: ## run every fuzz target for FUZZTIME (20000x execs) each (their seeds also run in make test)
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz ./$$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg || exit 1; \
	done

BENCH_WINDOW ?= 5s
BENCH_WINDOWS ?= 3
# River, the peer in make bench's three-way table, is its own Go module
# (bench/riverpeer): the broker's go.mod never gains it.
bench: ## broker vs raw PostgreSQL and River in one run (own throwaway server): ratios, latency, bootstrap, CPU, WAL, exactly-once; writes bench-result.json
	$(GO) build -o bin/queen ./cmd/queen
	$(GO) build -o bin/queen-bench ./cmd/queen-bench
	cd bench/riverpeer && $(GO) build -o ../../bin/river-peer .
	./bin/queen-bench -queen bin/queen -river bin/river-peer -window $(BENCH_WINDOW) -windows $(BENCH_WINDOWS) -out bench-result.json

SCALE_FLAGS ?=
bench-scale: ## each operation's p50/p99 at a small size and after growing the tables (10M messages, 100k partitions, 1M DLQ, 1M KV, 10k queues; SCALE_FLAGS to shrink); writes bench-scale-result.json
	$(GO) build -o bin/queen ./cmd/queen
	$(GO) build -o bin/queen-bench ./cmd/queen-bench
	./bin/queen-bench -queen bin/queen -scale $(SCALE_FLAGS) -out bench-scale-result.json

# The queen column of make bench's three-way table on fresh tables, then
# after growing them as bench-scale does (same SCALE_FLAGS): flat or not.
bench-grown: ## the queen column of push-b1, push-b100, pop+ack-b10 fresh and on grown tables (10M messages; SCALE_FLAGS to shrink): msgs/s, CPU, WAL, statements and buffer hits per msg, grown/fresh, exactly-once; writes bench-grown-result.json
	$(GO) build -o bin/queen ./cmd/queen
	$(GO) build -o bin/queen-bench ./cmd/queen-bench
	./bin/queen-bench -queen bin/queen -grown -river "" -window $(BENCH_WINDOW) -windows $(BENCH_WINDOWS) $(SCALE_FLAGS) -out bench-grown-result.json

# Shards (issue 32): plain vs one shard vs two, and a move under load, on
# two local wal_level=logical servers (about 2.5 minutes, so not in make
# bench); SHARDS_FLAGS="-shards-plain URL -shards-catalog URL -shards-urls
# 's0=URL;s1=URL'" points it at servers of their own.
SHARDS_FLAGS ?=
bench-shards: ## routing overhead (push-b1, pop+ack-b10: no shards vs one shard vs two) and a queue moved s0 -> s1 at 1,000 msg/s (copy, freeze pause, stalls, exactly-once); writes bench-shards-result.json
	$(GO) build -o bin/queen ./cmd/queen
	$(GO) build -o bin/queen-bench ./cmd/queen-bench
	./bin/queen-bench -queen bin/queen -river "" -only shards,shard-move -window $(BENCH_WINDOW) -windows $(BENCH_WINDOWS) $(SHARDS_FLAGS) -out bench-shards-result.json

lint: ## go vet and gofmt
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

build: ## build bin/queen
	$(GO) build -o bin/queen ./cmd/queen

help: ## list targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run cluster cluster-shards ha-pg failover-async fuzz test test-race bench bench-scale bench-grown bench-shards sim sim-replay sim-canaries attack lint build help
