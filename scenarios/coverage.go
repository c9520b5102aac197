package scenarios

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/queen-go/queen/sim"
)

// Markers around SPEC.md's list of required coverage cells: SPEC is the one
// place the list lives, and make sim reads it from there.
const (
	requiredBegin = "<!-- coverage-required: begin -->"
	requiredEnd   = "<!-- coverage-required: end -->"
)

// RequiredCells reads the cells SPEC.md (at path) requires generated seeds
// to reach: every `backquoted` cell on the lines between the markers.
func RequiredCells(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cells []string
	in, seen := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == requiredBegin:
			in, seen = true, true
			continue
		case line == requiredEnd:
			in = false
		}
		for rest := line; in; {
			_, after, ok := strings.Cut(rest, "`")
			if !ok {
				break
			}
			cell, tail, ok := strings.Cut(after, "`")
			if !ok {
				return nil, fmt.Errorf("%s: unbalanced backquote in %q", path, line)
			}
			cells = append(cells, cell)
			rest = tail
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !seen || len(cells) == 0 {
		return nil, fmt.Errorf("%s: no required coverage cells between %q and %q", path, requiredBegin, requiredEnd)
	}
	return cells, nil
}

// Unreached are the required cells cov does not hold.
func Unreached(cov sim.Coverage, required []string) []string {
	var out []string
	for _, c := range required {
		if cov[c] == 0 {
			out = append(out, c)
		}
	}
	return out
}

// RowsFor are the plan rows built to reach cell: the rows whose first queue
// has the cell's queue option, or every row when the cell names none (or
// an option no row gives orders, such as dlq's deliveries, which any row
// may reach).
func RowsFor(cell string) []int {
	var want string
	for _, part := range strings.Split(cell, " x ") {
		if v, ok := strings.CutPrefix(part, "queue="); ok {
			want = v
		}
	}
	var rows []int
	for r := 0; r < Rows; r++ {
		if rowQueues[r%8] == want {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		for r := 0; r < Rows; r++ {
			rows = append(rows, r)
		}
	}
	return rows
}

// TopUp runs more seeds for the required cells cov misses, rounds times
// over the rows that plan each (RowsFor), with seeds drawn from base, and
// adds their cells to cov; run answers a seed's cells
// (nil when it failed). It answers the cells still unreached. A cell a
// change made unreachable stays unreached; a cell a busy machine's one
// seed missed (a late group's only pop on a window queue timed out, say)
// is reached by a rerun of its rows, and the test says so.
func TopUp(cov sim.Coverage, required []string, base uint64, rounds int, run func(seed uint64) sim.Coverage) []string {
	next := uint64(Rows)
	for round := 0; round < rounds; round++ {
		missing := Unreached(cov, required)
		if len(missing) == 0 {
			return nil
		}
		ran := map[int]bool{}
		for _, c := range missing {
			for _, r := range RowsFor(c) {
				if ran[r] || cov[c] > 0 {
					continue
				}
				ran[r] = true
				if got := run(WithRow(base^(next*0x9e3779b97f4a7c15), r)); got != nil {
					cov.Add(got)
				}
				next++
			}
		}
	}
	return Unreached(cov, required)
}
