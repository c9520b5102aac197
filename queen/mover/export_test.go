package mover

// SetAfterEffect sets m's Config.AfterEffect after New: fn is called after
// each step's effect and before its state write, and at the points inside
// a step; an error stops the step there, as a mover that died.
func SetAfterEffect(m *Mover, fn func(point string) error) { m.cfg.AfterEffect = fn }

// Statements is the mover's statement table, for the placeholder test.
func Statements() map[string][2]any {
	out := map[string][2]any{}
	for name, st := range statements {
		out[name] = [2]any{st.text, st.params}
	}
	return out
}
