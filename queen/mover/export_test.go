package mover

// SetAfterEffect sets m's test hook: fn is called after each step's effect
// and before its state write (point is the state), and at the points
// inside a step ("activate.placement": the destination activated, the
// catalogue not yet set; "rollback": before a rollback's effects). An
// error stops the step there, as a mover that died.
func SetAfterEffect(m *Mover, fn func(point string) error) { m.afterEffect = fn }

// Statements is the mover's statement table, for the placeholder test.
func Statements() map[string][2]any {
	out := map[string][2]any{}
	for name, st := range statements {
		out[name] = [2]any{st.text, st.params}
	}
	return out
}
