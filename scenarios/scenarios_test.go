package scenarios_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/scenarios"
	"github.com/queen-go/queen/sim"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const root = ".."

func run(t *testing.T, s *scenarios.Scenario, fromFile string) *scenarios.Outcome {
	t.Helper()
	o, err := scenarios.Run(context.Background(), storetest.DSN(t), s, scenarios.OutDir(root), fromFile, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(o.Report())
	if o.Failed() {
		t.Errorf("FAILED %s\n%s", s.Name, o.Report())
	}
	return o
}

func load(t *testing.T, path string) *scenarios.Scenario {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := scenarios.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// TestCommittedScenarios replays every scenario under testdata/scenarios:
// the recorded regressions and the named fault scenarios.
func TestCommittedScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "testdata", "scenarios", "*.scn"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no committed scenarios (%v)", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".scn"), func(t *testing.T) {
			run(t, load(t, f), filepath.ToSlash(strings.TrimPrefix(f, root+"/")))
		})
	}
}

// seeds returns SIM_SEEDS seeds (default 4; make sim asks for 16), from
// SIM_SEED when set, else from a fresh random base that is printed.
func seeds(t *testing.T) []uint64 {
	n := 4
	if v, err := strconv.Atoi(os.Getenv("SIM_SEEDS")); err == nil && v > 0 {
		n = v
	}
	return seedList(t, n, "SIM_SEED")
}

// seedList is n seeds from a random base, or from the base in env.
func seedList(t *testing.T, n int, env string) []uint64 {
	var base uint64
	if v := os.Getenv(env); v != "" {
		b, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
		base = b
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		base = binary.LittleEndian.Uint64(b[:])
	}
	t.Logf("random seeds from base %#x (%s=%#x reproduces this set)", base, env, base)
	out := make([]uint64, n)
	for i := range out {
		out[i] = splitmix(base + uint64(i))
	}
	return out
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// TestRandomSeeds runs generated scenarios; a failure writes the scenario
// file and prints the one command that replays it.
//
// It adds up the coverage matrix of its seeds and prints it; with
// scenarios.Rows seeds or more (make sim runs 16), every row of the
// generator's matrix plan ran once, and a cell SPEC.md requires that no
// seed reached fails the test, naming it.
func TestRandomSeeds(t *testing.T) {
	required, err := scenarios.RequiredCells(filepath.Join(root, "SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	list := seeds(t)
	cov := sim.Coverage{}
	for i, seed := range list {
		s := scenarios.Generate(scenarios.WithRow(seed, i))
		t.Run(s.Name, func(t *testing.T) {
			if o := run(t, s, ""); o != nil {
				cov.Add(o.Coverage)
			}
		})
	}
	t.Log(cov.Table(len(list)))
	if len(list) < scenarios.Rows || t.Failed() {
		return
	}
	missed := scenarios.Unreached(cov, required)
	if len(missed) == 0 {
		return
	}
	t.Logf("coverage: %d required cells missed by the first %d seeds (%q); topping up with their rows' seeds", len(missed), len(list), missed)
	still := scenarios.TopUp(cov, required, list[0], topUpRounds, func(seed uint64) sim.Coverage {
		s := scenarios.Generate(seed)
		var got sim.Coverage
		t.Run("topup-"+s.Name, func(t *testing.T) {
			if o := run(t, s, ""); o != nil {
				got = o.Coverage
			}
		})
		return got
	})
	for _, c := range still {
		t.Errorf("coverage: required cell %q was reached by none of %d seeds nor by %d more rounds of its rows (SPEC.md, \"Coverage matrix\")", c, len(list), topUpRounds)
	}
}

// topUpRounds is how many more rounds of a missed cell's rows run before
// the cell fails the test: one busy machine's miss is forgiven by a rerun,
// a cell no seed can reach any more is not.
const topUpRounds = 2

// TestFreeRunningSeeds runs SIM_FREE_SEEDS (3) generated free-running
// scenarios: concurrent clients racing commits on a hot partition. A
// failure writes the scenario file and prints the command that reruns it.
func TestFreeRunningSeeds(t *testing.T) {
	n := 3
	if v, err := strconv.Atoi(os.Getenv("SIM_FREE_SEEDS")); err == nil && v >= 0 {
		n = v
	}
	for _, seed := range seedList(t, n, "SIM_FREE_SEED") {
		s := scenarios.GenerateFree(seed)
		t.Run(s.Name, func(t *testing.T) { run(t, s, "") })
	}
}

// TestDeterminism runs one seed twice in lockstep mode: the histories must
// hash the same, or the simulator cannot replay what it finds.
func TestDeterminism(t *testing.T) {
	seed := seeds(t)[0]
	a := run(t, scenarios.Generate(seed), "")
	b := run(t, scenarios.Generate(seed), "")
	sameHistory(t, fmt.Sprintf("seed %#x", seed), a, b)
	// Connection resets right after pushes once gave a different history
	// on each run; this committed scenario keeps them honest.
	file := filepath.Join(root, "testdata", "determinism", "resets.scn")
	a = run(t, load(t, file), file)
	b = run(t, load(t, file), file)
	sameHistory(t, "testdata/determinism/resets.scn", a, b)
}

// sameHistory fails when two runs of one scenario differ, naming the first
// event where they part.
func sameHistory(t *testing.T, name string, a, b *scenarios.Outcome) {
	t.Helper()
	if a.Hash == b.Hash {
		t.Logf("%s: both runs hash %s", name, a.Hash)
		return
	}
	ea, eb := a.History.Events(), b.History.Events()
	for i := range min(len(ea), len(eb)) {
		ja, _ := json.Marshal(ea[i])
		jb, _ := json.Marshal(eb[i])
		if string(ja) != string(jb) {
			t.Fatalf("%s: hashes differ (%s vs %s); first difference at event %d:\n  %s\n  %s", name, a.Hash, b.Hash, i, ja, jb)
		}
	}
	t.Fatalf("%s: hashes differ (%s vs %s); one history is a prefix of the other (%d vs %d events)", name, a.Hash, b.Hash, len(ea), len(eb))
}

// TestReplayOne reruns one run with its history kept: make sim-replay
// SEED=0x... or SCENARIO=path.
func TestReplayOne(t *testing.T) {
	seed, file := os.Getenv("SIM_REPLAY_SEED"), os.Getenv("SIM_REPLAY_SCENARIO")
	var s *scenarios.Scenario
	switch {
	case file != "":
		if !filepath.IsAbs(file) {
			file = filepath.Join(root, file)
		}
		s = load(t, file)
	case seed != "":
		v, err := strconv.ParseUint(seed, 0, 64)
		if err != nil {
			t.Fatalf("SEED=%q: %v", seed, err)
		}
		s = scenarios.Generate(v)
	default:
		t.Skip("set SEED=0x... or SCENARIO=path (make sim-replay)")
	}
	o, err := scenarios.Run(context.Background(), storetest.DSN(t), s, scenarios.OutDir(root), file, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(o.Report())
	if o.Failed() {
		t.Fail()
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for i := uint64(0); i < 50; i++ {
		s := scenarios.Generate(splitmix(i))
		var a, b bytes.Buffer
		if err := scenarios.Print(&a, s); err != nil {
			t.Fatal(err)
		}
		back, err := scenarios.Parse(bytes.NewReader(a.Bytes()))
		if err != nil {
			t.Fatalf("%v\n%s", err, a.String())
		}
		if err := scenarios.Print(&b, back); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Fatalf("round trip changed the scenario:\n%s\nvs\n%s", a.String(), b.String())
		}
	}
	for _, bad := range []string{
		"seed 1",                          // no scenario line
		"scenario x\nbrokers 9",           // out of range
		"scenario x\nfault at=1s pg.boom", // unknown fault
		"scenario x\nexpect properties no-such-property",
		"scenario x\nqueues q(partitions=x)",
		"scenario x\nqueues q(late=a:old:1s:0s:0s)", // mode new or from only
		"scenario x\nfrobnicate 1",
	} {
		if _, err := scenarios.Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("parsed %q without error", bad)
		}
	}
}
