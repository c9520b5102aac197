package httpapi

import (
	"fmt"
	"testing"

	"github.com/queen-go/queen/queen/store"
)

// TestMergeSpreads: the union's size, minimum, maximum and average are
// exact; its median the medians averaged by size; an empty set changes
// nothing (its zeros are no minimum).
func TestMergeSpreads(t *testing.T) {
	a := store.Spread{Avg: 2, Median: 2, Min: 1, Max: 3, N: 3}     // {1, 2, 3}
	b := store.Spread{Avg: 10, Median: 10, Min: 10, Max: 10, N: 1} // {10}
	got := mergeSpreads([]store.Spread{a, {}, b})
	if want := (store.Spread{Avg: 4, Median: 4, Min: 1, Max: 10, N: 4}); got != want {
		t.Errorf("merged %+v, want %+v", got, want)
	}
	if got := mergeSpreads([]store.Spread{{}, a}); got != a {
		t.Errorf("one set merged with an empty one: %+v, want %+v", got, a)
	}
	if got := mergeSpreads([]store.Spread{{}, {}}); got != (store.Spread{}) {
		t.Errorf("empty sets merged: %+v", got)
	}
}

// TestMergeTopErrors: counts of one error add up across shards, and the
// five commonest are kept, ties by error.
func TestMergeTopErrors(t *testing.T) {
	got := mergeTopErrors([][]store.ErrorCount{
		{{Error: "a", Count: 5}, {Error: "b", Count: 4}, {Error: "c", Count: 1}, {Error: "d", Count: 1}, {Error: "e", Count: 1}},
		{{Error: "c", Count: 6}, {Error: "f", Count: 2}, {Error: "e", Count: 1}},
	})
	if s := fmt.Sprint(got); s != "[{c 7} {a 5} {b 4} {e 2} {f 2}]" {
		t.Errorf("merged %s, want [{c 7} {a 5} {b 4} {e 2} {f 2}]", s)
	}
}

// TestPageOf: offsets and limits past the end are clamped; limit 0 is
// the rest.
func TestPageOf(t *testing.T) {
	rows := []int{1, 2, 3}
	for _, c := range []struct {
		offset, limit int
		want          string
	}{{0, 0, "[1 2 3]"}, {1, 0, "[2 3]"}, {1, 1, "[2]"}, {2, 5, "[3]"}, {3, 1, "[]"}, {9, 0, "[]"}} {
		if got := fmt.Sprint(pageOf(rows, c.offset, c.limit)); got != c.want {
			t.Errorf("pageOf(%d, %d) = %s, want %s", c.offset, c.limit, got, c.want)
		}
	}
}
