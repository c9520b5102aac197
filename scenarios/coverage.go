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
