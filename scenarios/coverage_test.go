package scenarios_test

import (
	"reflect"
	"testing"

	"github.com/queen-go/queen/scenarios"
	"github.com/queen-go/queen/sim"
)

// TestRowsForAreTheRowsThatPlanTheCell: a window cell reruns the window
// rows; a cell naming no queue any row gives orders reruns every row.
func TestRowsForAreTheRowsThatPlanTheCell(t *testing.T) {
	if got, want := scenarios.RowsFor("consume=group-new x queue=window"), []int{4, 12}; !reflect.DeepEqual(got, want) {
		t.Errorf("window rows %v, want %v", got, want)
	}
	if got := scenarios.RowsFor("edge=push:past"); len(got) != scenarios.Rows {
		t.Errorf("a cell without a queue reruns %d rows, want all %d", len(got), scenarios.Rows)
	}
}

// TestTopUpForgivesOneMissButNotAnUnreachableCell: a cell reached by a
// rerun of its rows passes; a cell no rerun reaches is answered unreached
// after the rounds, each round running only the missed cells' rows.
func TestTopUpForgivesOneMissButNotAnUnreachableCell(t *testing.T) {
	const cell = "consume=group-new x queue=window"
	var rows []uint64
	reach := func(seed uint64) sim.Coverage {
		rows = append(rows, seed%scenarios.Rows)
		if seed%scenarios.Rows == 12 {
			return sim.Coverage{cell: 1}
		}
		return sim.Coverage{"other": 1}
	}
	cov := sim.Coverage{}
	if still := scenarios.TopUp(cov, []string{cell}, 7, 2, reach); len(still) != 0 || cov[cell] == 0 {
		t.Fatalf("reachable cell: still %v, cov %v", still, cov)
	}
	if !reflect.DeepEqual(rows, []uint64{4, 12}) {
		t.Errorf("ran rows %v, want the window rows once", rows)
	}

	rows = nil
	never := func(seed uint64) sim.Coverage {
		rows = append(rows, seed%scenarios.Rows)
		return nil // a failed seed
	}
	still := scenarios.TopUp(sim.Coverage{}, []string{cell}, 7, 2, never)
	if !reflect.DeepEqual(still, []string{cell}) {
		t.Errorf("unreachable cell answered %v", still)
	}
	if len(rows) != 4 {
		t.Errorf("ran %d seeds, want 2 rounds of 2 rows", len(rows))
	}
	if covered := scenarios.TopUp(sim.Coverage{cell: 1}, []string{cell}, 7, 2, never); covered != nil {
		t.Errorf("nothing missed: %v", covered)
	}
}
