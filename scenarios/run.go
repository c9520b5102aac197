package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/queen-go/queen/sim"
)

// OutDir is where failing runs leave their artefacts: $SIM_OUT, else
// sim-out/ at the repository root.
func OutDir(repoRoot string) string {
	d := os.Getenv("SIM_OUT")
	if d == "" {
		d = filepath.Join(repoRoot, "sim-out")
	}
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return d
}

// Outcome is a finished run and, if it failed, where its artefacts are and
// the one command that replays it.
type Outcome struct {
	*sim.Result
	Scenario *Scenario
	Files    []string
	Replay   string
}

// Run runs s against the migrated database dsn. When the run fails, or
// when keep is true, it writes the scenario and its history under out.
// fromFile, when set, is the committed file s came from.
func Run(ctx context.Context, dsn string, s *Scenario, out, fromFile string, keep bool) (*Outcome, error) {
	res, err := sim.Run(ctx, dsn, s.Options, nil)
	if err != nil {
		return nil, fmt.Errorf("scenario %s (seed %#x): harness: %w", s.Name, s.Seed, err)
	}
	o := &Outcome{Result: res, Scenario: s}
	switch {
	case fromFile != "":
		o.Replay = "make sim-replay SCENARIO=" + fromFile
	case s.Generated:
		o.Replay = fmt.Sprintf("make sim-replay SEED=%#x", s.Seed)
	}
	return o, o.keep(out, fromFile, keep)
}

// RunSharded runs a GenerateShardMove scenario in world w, as Run does;
// its replay is the seed's (SIM_SHARD_REPLAY runs it twice and compares
// the history hashes).
func RunSharded(ctx context.Context, w sim.ShardWorld, s *Scenario, out string, keep bool) (*Outcome, error) {
	res, err := sim.RunSharded(ctx, w, s.Options, nil)
	if err != nil {
		return nil, fmt.Errorf("scenario %s (seed %#x): harness: %w", s.Name, s.Seed, err)
	}
	o := &Outcome{Result: res, Scenario: s}
	o.Replay = fmt.Sprintf("SIM_SHARD_REPLAY=%#x go test -count=1 -tags canary -v -run TestShardMoveSeeds ./scenarios/", s.Seed)
	return o, o.keep(out, "", keep)
}

// keep writes the scenario and its history under out when the run failed
// or keep is set.
func (o *Outcome) keep(out, fromFile string, keep bool) error {
	s, res := o.Scenario, o.Result
	if !res.Failed() && !keep {
		return nil
	}
	dir := out
	if res.Failed() {
		dir = filepath.Join(out, "failed")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	scn := filepath.Join(dir, s.Name+".scn")
	f, err := os.Create(scn)
	if err != nil {
		return err
	}
	err = Print(f, s)
	f.Close()
	if err != nil {
		return err
	}
	hist := filepath.Join(dir, s.Name+".history.jsonl")
	hf, err := os.Create(hist)
	if err != nil {
		return err
	}
	err = res.History.WriteJSONL(hf)
	hf.Close()
	o.Files = []string{scn, hist}
	if fromFile == "" && res.Failed() && s.Move == nil { // a shard world replays by its seed only
		if o.Replay != "" {
			o.Replay += "   (or: make sim-replay SCENARIO=" + scn + ")"
		} else {
			o.Replay = "make sim-replay SCENARIO=" + scn
		}
	}
	return err
}

// Report is the human account of an outcome.
func (o *Outcome) Report() string {
	s := fmt.Sprintf("scenario %s seed %#x: %s", o.Scenario.Name, o.Scenario.Seed, o.Summary())
	if len(o.Files) > 0 {
		s += fmt.Sprintf("\n  artefacts: %v", o.Files)
	}
	if o.Failed() {
		s += "\n  replay: " + o.Replay
	}
	return s
}
