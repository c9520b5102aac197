//go:build !canary

// Package canary switches planted bugs on for the simulator's self-test.
// Built without the canary tag (every production build) On is the constant
// false and the bugs compile away.
package canary

// On reports whether a planted bug is switched on. Without the canary
// build tag it is the constant false and every planted bug compiles away.
func On(string) bool { return false }
