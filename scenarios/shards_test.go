package scenarios_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/scenarios"
	"github.com/queen-go/queen/sim"
)

// shardCluster starts the shard worlds' cluster: wal_level=logical, which
// the simulator's shared one lacks (a move's copy is logical replication).
func shardCluster(t *testing.T) *pglocal.Cluster {
	return storetest.Cluster(t, "pg", pglocal.LogicalSettings...)
}

// shardWorld creates and migrates a catalogue and shards s0 and s1 named
// after the run, as databases of c.
func shardWorld(t *testing.T, c *pglocal.Cluster, name string) sim.ShardWorld {
	t.Helper()
	var w sim.ShardWorld
	for i, dst := range []*string{&w.Catalog, &w.S0, &w.S1} {
		db := fmt.Sprintf("%s_%s", []string{"cat", "s0", "s1"}[i], name)
		pool := storetest.CreateDatabase(t, c, db)
		*dst = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
		migrate := store.Migrate
		if i == 0 {
			migrate = catalog.Migrate
		}
		if err := migrate(context.Background(), pool); err != nil {
			t.Fatalf("migrate %s: %v", db, err)
		}
		pool.Close()
	}
	return w
}

// runShards runs a shard world's scenario and reports it as run does.
func runShards(t *testing.T, c *pglocal.Cluster, s *scenarios.Scenario, try int) *scenarios.Outcome {
	t.Helper()
	w := shardWorld(t, c, fmt.Sprintf("x%x_%d", s.Seed, try))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o, err := scenarios.RunSharded(ctx, w, s, scenarios.OutDir(root), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(o.Report())
	if o.Failed() {
		t.Errorf("FAILED %s\n%s", s.Name, o.Report())
	}
	return o
}

// TestShardMoveSeeds runs SIM_SHARD_SEEDS (default 2) generated shard
// world scenarios, each moving a queue under load between two shards of
// one cluster, from SIM_SHARD_SEED when set, then the first again, which
// must give the same history hash; SIM_SHARD_REPLAY runs that one seed
// twice and compares the hashes.
func TestShardMoveSeeds(t *testing.T) {
	c := shardCluster(t)
	if v := os.Getenv("SIM_SHARD_REPLAY"); v != "" {
		seed, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("SIM_SHARD_REPLAY=%q: %v", v, err)
		}
		s := scenarios.GenerateShardMove(seed)
		a := runShards(t, c, s, 0)
		s2 := scenarios.GenerateShardMove(seed)
		s2.Name += "-again"
		b := runShards(t, c, s2, 1)
		if a.Hash != b.Hash {
			t.Errorf("seed %#x: history hash %s then %s", seed, a.Hash, b.Hash)
		}
		return
	}
	n := 2
	if v, err := strconv.Atoi(os.Getenv("SIM_SHARD_SEEDS")); err == nil && v > 0 {
		n = v
	}
	hashes := map[uint64]string{}
	list := seedList(t, n, "SIM_SHARD_SEED")
	for _, seed := range list {
		s := scenarios.GenerateShardMove(seed)
		t.Run(s.Name, func(t *testing.T) { hashes[seed] = runShards(t, c, s, 0).Hash })
	}
	// The first seed once more: the same history, mover steps and all.
	s := scenarios.GenerateShardMove(list[0])
	s.Name += "-again"
	if h := runShards(t, c, s, 1).Hash; h != hashes[list[0]] {
		t.Errorf("seed %#x: history hash %s then %s", list[0], hashes[list[0]], h)
	}
}

// TestShardMoveRegressions replays the shard-world seeds that once failed
// (testdata/shard-seeds.txt: a seed and what it caught, one a line).
func TestShardMoveRegressions(t *testing.T) {
	raw, err := os.ReadFile("testdata/shard-seeds.txt")
	if err != nil {
		t.Fatal(err)
	}
	c := shardCluster(t)
	for _, line := range strings.Split(string(raw), "\n") {
		field, _, _ := strings.Cut(line, "#")
		if field = strings.TrimSpace(field); field == "" {
			continue
		}
		seed, err := strconv.ParseUint(field, 0, 64)
		if err != nil {
			t.Fatalf("shard-seeds.txt: %q: %v", line, err)
		}
		s := scenarios.GenerateShardMove(seed)
		t.Run(s.Name, func(t *testing.T) { runShards(t, c, s, 0) })
	}
}
