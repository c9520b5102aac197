//go:build canary

package canary

import "testing"

// No name is the empty name: a caller with no canary of its own (a
// combiner built without a SwapCanary) must never see one switched on,
// not even while QUEEN_CANARY is unset. The pop combiner's empty name read
// as on once, and handed combined pops each other's claims in every
// canary build.
func TestTheEmptyNameIsNeverOn(t *testing.T) {
	t.Setenv("QUEEN_CANARY", "")
	if On("") {
		t.Fatal(`On("") with QUEEN_CANARY unset`)
	}
	t.Setenv("QUEEN_CANARY", "pop-combiner-swaps")
	if !On("pop-combiner-swaps") || On("") || On("combiner-swaps") {
		t.Fatal("On does not report exactly the canary QUEEN_CANARY names")
	}
}
