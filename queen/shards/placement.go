package shards

import (
	"slices"
	"strings"
)

// RuleKind is what a placement rule matches on.
type RuleKind string

// The rule kinds: a queue's tenant id, its namespace, or its name.
const (
	ByTenant    RuleKind = "tenant"
	ByNamespace RuleKind = "namespace"
	ByQueue     RuleKind = "queue"
)

// Rule places the new queues it matches: on its one shard, or on the least
// loaded of its several.
type Rule struct {
	Kind    RuleKind
	Pattern string   // '*' matches any run of characters, anything else itself
	Shards  []string // configured shard names, at least one
}

// Queue is what placement knows of a new queue.
type Queue struct {
	Tenant, Namespace, Name string
}

// parseRules reads QUEEN_PLACEMENT: rules separated by ';', each
// kind:pattern=shard[,shard...], e.g.
// "tenant:acme=s1;namespace:billing=s1;queue:orders-*=s0,s1".
func parseRules(v string, shards []Shard, fail func(name, part, why string)) []Rule {
	known := map[string]bool{}
	for _, s := range shards {
		known[s.Name] = true
	}
	var out []Rule
	for _, part := range strings.Split(v, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		r, why := parseRule(part, known)
		if why != "" {
			fail(PlacementVar, part, why)
			continue
		}
		out = append(out, r)
	}
	return out
}

// parseRule reads one kind:pattern=shards rule, or says what is wrong.
func parseRule(part string, known map[string]bool) (Rule, string) {
	lhs, rhs, ok := strings.Cut(part, "=")
	kind, pattern, ok2 := strings.Cut(lhs, ":")
	if !ok || !ok2 {
		return Rule{}, "want kind:pattern=shard[,shard...]"
	}
	r := Rule{Kind: RuleKind(strings.TrimSpace(kind)), Pattern: strings.TrimSpace(pattern)}
	if r.Kind != ByTenant && r.Kind != ByNamespace && r.Kind != ByQueue {
		return Rule{}, "the kind is tenant, namespace or queue"
	}
	if r.Pattern == "" {
		return Rule{}, "an empty pattern"
	}
	for _, name := range strings.Split(rhs, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return Rule{}, "an empty shard name"
		case !known[name]:
			return Rule{}, "names shard " + name + ", which " + ShardsVar + " does not configure"
		case slices.Contains(r.Shards, name):
			return Rule{}, "names shard " + name + " twice"
		}
		r.Shards = append(r.Shards, name)
	}
	return r, ""
}

// Place chooses the shard of a new queue: the first rule that matches it
// decides (its shard, or the least loaded of its shards, the first listed
// on a tie); no rule matching, the first configured shard. loads maps a
// shard to its load (what "least loaded" compares, e.g. queues or bytes);
// a shard missing from it counts as 0. It is "" only when no shard is
// configured.
func Place(q Queue, c Config, loads map[string]int64) string {
	for _, r := range c.Rules {
		if r.matches(q) {
			return leastLoaded(r.Shards, loads)
		}
	}
	if len(c.Shards) == 0 {
		return ""
	}
	return c.Shards[0].Name
}

// matches reports whether the rule's pattern matches the queue's field.
func (r Rule) matches(q Queue) bool {
	switch r.Kind {
	case ByTenant:
		return glob(r.Pattern, q.Tenant)
	case ByNamespace:
		return q.Namespace != "" && glob(r.Pattern, q.Namespace)
	default:
		return glob(r.Pattern, q.Name)
	}
}

// leastLoaded is the shard of names with the smallest load, the earliest
// listed among equals.
func leastLoaded(names []string, loads map[string]int64) string {
	best := names[0]
	for _, n := range names[1:] {
		if loads[n] < loads[best] {
			best = n
		}
	}
	return best
}

// glob matches s against a pattern whose '*' matches any run of
// characters ('/' and '.' included, unlike path.Match).
func glob(pattern, s string) bool {
	head, rest, star := strings.Cut(pattern, "*")
	if !star {
		return pattern == s
	}
	if !strings.HasPrefix(s, head) {
		return false
	}
	s = s[len(head):]
	// Each later literal segment is matched at its first occurrence; the
	// last one must end the string.
	segs := strings.Split(rest, "*")
	for i, seg := range segs {
		if i == len(segs)-1 {
			return strings.HasSuffix(s, seg)
		}
		j := strings.Index(s, seg)
		if j < 0 {
			return false
		}
		s = s[j+len(seg):]
	}
	return true
}
