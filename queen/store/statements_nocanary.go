//go:build !canary

package store

// text is the statement named name. Without the canary build tag no
// statement is ever rewritten: the substitution table (statementVariants)
// is read only by its test.
func text(name string) string { return baseText(name) }
