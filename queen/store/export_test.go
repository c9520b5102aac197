package store

// RetentionRuleSQL is a retention rule's statement, for the cost tests.
func RetentionRuleSQL(name string) string {
	for _, r := range retentionRules {
		if r.name == name {
			return r.sql()
		}
	}
	return ""
}
