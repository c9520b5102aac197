package shards

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const twoShards = "s0=postgres://a1,a2/queen?sslmode=disable; s1=postgres://u:secret@b1:5433,b2:5434/queen"

func TestParse(t *testing.T) {
	c, err := Parse(" postgres://cat1,cat2/queen ", twoShards, "tenant:acme=s1;queue:orders-*=s0,s1;namespace:billing=s1")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() || c.CatalogURL != "postgres://cat1,cat2/queen" || strings.Join(c.Names(), ",") != "s0,s1" ||
		c.Shards[1].URL != "postgres://u:secret@b1:5433,b2:5434/queen" {
		t.Fatalf("parsed: %+v", c)
	}
	want := []Rule{{ByTenant, "acme", []string{"s1"}}, {ByQueue, "orders-*", []string{"s0", "s1"}},
		{ByNamespace, "billing", []string{"s1"}}}
	if len(c.Rules) != len(want) {
		t.Fatalf("rules: %+v", c.Rules)
	}
	for i, r := range want {
		g := c.Rules[i]
		if g.Kind != r.Kind || g.Pattern != r.Pattern || strings.Join(g.Shards, ",") != strings.Join(r.Shards, ",") {
			t.Errorf("rule %d: %+v, want %+v", i, g, r)
		}
	}
	if c, err := Parse("", "", ""); err != nil || c.Enabled() {
		t.Fatalf("nothing configured is no shards: %+v %v", c, err)
	}
}

// TestParseRefusesBadValues: each bad value is an error naming its
// variable and the bad part, and never a password.
func TestParseRefusesBadValues(t *testing.T) {
	cat := "postgres://cat/queen"
	for _, c := range []struct {
		catalog, shards, placement string
		want                       []string
	}{
		{cat, "=postgres://a/q", "", []string{ShardsVar, `"=postgres://a/q"`, "shard name"}},
		{cat, "s 0=postgres://a/q", "", []string{ShardsVar, "shard name"}},
		{cat, "s0=postgres://a/q;s0=postgres://b/q", "", []string{ShardsVar, `"s0"`, "twice"}},
		{cat, "s0", "", []string{ShardsVar, `"s0"`, "name=URL"}},
		{cat, "s0=mysql://a/q", "", []string{ShardsVar, "s0=mysql://a/q", "postgres://"}},
		{cat, "s0=postgres://u:hunter2@a:notaport/q", "", []string{ShardsVar, "u:xxxxx@a:notaport", "parse"}},
		{"postgres://u:hunter2@cat:99999999/q", "s0=postgres://a/q", "", []string{CatalogVar, "u:xxxxx@", "parse"}},
		{"cat", "s0=postgres://a/q", "", []string{CatalogVar, `"cat"`}},
		{cat, "", "", []string{CatalogVar, "without shards"}},
		{"", "s0=postgres://a/q", "", []string{ShardsVar, "without a catalogue"}},
		{"", "", "queue:x=s0", []string{PlacementVar, "without shards"}},
		{cat, "s0=postgres://a/q", "queue:x=s9", []string{PlacementVar, `"queue:x=s9"`, "s9"}},
		{cat, "s0=postgres://a/q", "queue:x=s0,s0", []string{PlacementVar, "twice"}},
		{cat, "s0=postgres://a/q", "queue:x=", []string{PlacementVar, "empty shard"}},
		{cat, "s0=postgres://a/q", "colour:x=s0", []string{PlacementVar, "tenant, namespace or queue"}},
		{cat, "s0=postgres://a/q", "queue:=s0", []string{PlacementVar, "empty pattern"}},
		{cat, "s0=postgres://a/q", "queue-x-s0", []string{PlacementVar, "kind:pattern"}},
	} {
		_, err := Parse(c.catalog, c.shards, c.placement)
		if err == nil {
			t.Errorf("%q %q %q: no error", c.catalog, c.shards, c.placement)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q %q %q: %v does not say %q", c.catalog, c.shards, c.placement, err, w)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows a password: %v", err)
		}
	}
}

func TestPlace(t *testing.T) {
	c, err := Parse("postgres://cat/q", "s0=postgres://a/q;s1=postgres://b/q;s2=postgres://c/q",
		"tenant:acme=s2;namespace:bill*=s1;queue:orders-*=s1,s2;queue:*.audit=s2")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		q     Queue
		loads map[string]int64
		want  string
	}{
		{Queue{Tenant: "t", Name: "plain"}, nil, "s0"},
		{Queue{Tenant: "acme", Namespace: "billing", Name: "orders-1"}, nil, "s2"}, // the first rule wins
		{Queue{Tenant: "t", Namespace: "billing", Name: "x"}, nil, "s1"},
		{Queue{Tenant: "t", Name: "orders-1"}, nil, "s1"},                                    // a tie: the first listed
		{Queue{Tenant: "t", Name: "orders-1"}, map[string]int64{"s1": 5, "s2": 4}, "s2"},     // least loaded
		{Queue{Tenant: "t", Name: "orders-1"}, map[string]int64{"s1": 5, "s0": 0}, "s2"},     // s0 is not in the list
		{Queue{Tenant: "t", Name: "orders"}, nil, "s0"},                                      // no match
		{Queue{Tenant: "t", Name: "a/b.audit"}, nil, "s2"},                                   // '*' crosses '/' and '.'
		{Queue{Tenant: "t", Namespace: "", Name: "bill"}, map[string]int64{"s0": 100}, "s0"}, // the default ignores load
	} {
		if got := Place(p.q, c, p.loads); got != p.want {
			t.Errorf("%+v %v: %s, want %s", p.q, p.loads, got, p.want)
		}
	}
	if got := Place(Queue{Name: "q"}, Config{}, nil); got != "" {
		t.Errorf("no shards: %q", got)
	}
}

// TestPlaceProperties: every queue lands on a configured shard; a queue
// that only a one-shard rule matches lands on that shard; one no rule
// matches lands on the first shard; a several-shard rule picks one of its
// shards with no smaller load among them.
func TestPlaceProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		names := rapid.SliceOfNDistinct(rapid.StringMatching(`s[0-9]`), 1, 5, rapid.ID[string]).Draw(rt, "shards")
		var shards, rules []string
		for _, n := range names {
			shards = append(shards, n+"=postgres://h-"+n+"/q")
		}
		field := rapid.StringMatching(`[ab]{0,3}`)
		nRules := rapid.IntRange(0, 4).Draw(rt, "rules")
		for range nRules {
			kind := rapid.SampledFrom([]string{"tenant", "namespace", "queue"}).Draw(rt, "kind")
			pat := rapid.StringMatching(`[ab*]{1,4}`).Draw(rt, "pattern")
			to := rapid.SliceOfNDistinct(rapid.SampledFrom(names), 1, len(names), rapid.ID[string]).Draw(rt, "to")
			rules = append(rules, kind+":"+pat+"="+strings.Join(to, ","))
		}
		c, err := Parse("postgres://cat/q", strings.Join(shards, ";"), strings.Join(rules, ";"))
		if err != nil {
			rt.Fatal(err)
		}
		q := Queue{Tenant: field.Draw(rt, "tenant"), Namespace: field.Draw(rt, "namespace"), Name: field.Draw(rt, "name")}
		loads := map[string]int64{}
		for _, n := range names {
			loads[n] = rapid.Int64Range(0, 3).Draw(rt, "load")
		}
		got := Place(q, c, loads)
		if !slices.Contains(names, got) {
			rt.Fatalf("placed on %q, not a configured shard %v", got, names)
		}
		first := -1
		for i, r := range c.Rules {
			if reMatch(r, q) {
				first = i
				break
			}
		}
		if first < 0 {
			if got != names[0] {
				rt.Fatalf("no rule matches %+v, placed on %s, want the first shard %s", q, got, names[0])
			}
			return
		}
		r := c.Rules[first]
		if !slices.Contains(r.Shards, got) {
			rt.Fatalf("rule %+v matches %+v first, placed on %s outside it", r, q, got)
		}
		for _, s := range r.Shards {
			if loads[s] < loads[got] {
				rt.Fatalf("rule %+v: placed on %s (load %d), %s has %d", r, got, loads[got], s, loads[s])
			}
		}
	})
}

// reMatch is the rules' matching written independently, through a regular
// expression, so the property does not restate glob.
func reMatch(r Rule, q Queue) bool {
	re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(r.Pattern), `\*`, ".*") + "$")
	switch r.Kind {
	case ByTenant:
		return re.MatchString(q.Tenant)
	case ByNamespace:
		return q.Namespace != "" && re.MatchString(q.Namespace)
	}
	return re.MatchString(q.Name)
}
