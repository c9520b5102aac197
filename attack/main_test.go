//go:build attack

// Package attack is the broker's own attack suite (`make attack`): it builds
// bin/queen, starts real broker processes on loopback against a throwaway
// PostgreSQL, and attacks them from outside as issue 28's findings did:
// shared and corrupted spools, read-only and full spool filesystems, slow and
// idle connections, hostile bodies and queries, method confusion,
// cross-origin requests, tokens of every level against every route and op,
// rows held locked, and deletes racing pushes on other brokers. Each probe
// reports what it tried and whether the property held; the run closes with
// a table and "attack: N passed, M failed".
//
// Every file carries the attack build tag, so `go test ./...` never runs it.
package attack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// probes is the suite, in the order it runs. Each is a small function that
// starts what it needs and records what it tried and what it saw.
var probes = []struct {
	name string
	run  func(p *probe)
}{
	{"shared-spool-dir", probeSharedSpool},
	{"kill-9-and-restart", probeKillRestart},
	{"corrupted-spool-record", probeCorruptedSpool},
	{"spool-permissions", probeSpoolPermissions},
	{"spool-fs-full-or-read-only", probeSpoolFilesystem},
	{"idle-and-slow-connections", probeConnections},
	{"hostile-bodies-and-queries", probeHostileInput},
	{"pop-byte-budget", probePopBytes},
	{"method-confusion", probeMethods},
	{"cross-origin", probeCrossOrigin},
	{"token-levels", probeLevels},
	{"tenant-isolation", probeTenancy},
	{"rows-held-locked", probeLockedRows},
	{"deletes-racing-pushes", probeDeleteRace},
	{"autoack-client-leaves", probeAutoAckLeaves},
	{"shard-moves", probeShards},
}

// TestAttack runs every probe (ATTACK_ONLY=name,name runs a subset) and
// prints the table.
func TestAttack(t *testing.T) {
	s := &suite{bin: buildBroker(t), began: time.Now()}
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("ATTACK_ONLY"), ",") {
		if n != "" {
			only[n] = true
		}
	}
	var results []*probe
	for _, pr := range probes {
		if len(only) > 0 && !only[pr.name] {
			continue
		}
		p := &probe{name: pr.name, s: s}
		began := time.Now()
		t.Run(pr.name, func(t *testing.T) {
			p.t = t
			pr.run(p)
		})
		p.took = time.Since(began)
		results = append(results, p)
	}
	printTable(results)
}

// buildBroker compiles ./cmd/queen into a temporary directory.
func buildBroker(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "queen")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/queen")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/queen: %v\n%s", err, out)
	}
	return bin
}

func printTable(results []*probe) {
	passed, failed := 0, 0
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-28s %-8s %6s  %s\n", "probe", "verdict", "secs", "tried / evidence")
	for _, p := range results {
		verdict := "held"
		switch {
		case p.notTried != "":
			verdict = "skipped"
		case p.failedAny():
			verdict = "FAILED"
			failed++
		default:
			passed++
		}
		fmt.Fprintf(&b, "%-28s %-8s %6.1f  tried: %s\n", p.name, verdict, p.took.Seconds(), strings.Join(p.tried, "; "))
		if p.notTried != "" {
			fmt.Fprintf(&b, "%-44s not tried: %s\n", "", p.notTried)
		}
		for _, e := range p.evidence {
			fmt.Fprintf(&b, "%-44s evidence: %s\n", "", e)
		}
	}
	if skipped := len(results) - passed - failed; skipped > 0 {
		fmt.Fprintf(&b, "attack: %d probe(s) not tried (see above)\n", skipped)
	}
	fmt.Fprintf(&b, "attack: %d passed, %d failed\n", passed, failed)
	fmt.Print(b.String())
}
