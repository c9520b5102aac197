// Package shards holds what queen knows of shards before it routes to
// them: the configuration (QUEEN_CATALOG_URL, QUEEN_SHARDS,
// QUEEN_PLACEMENT), parsed and checked once, the placement decision of a
// new queue, and the logical-replication statements a move copies a queue
// with (see /work/shared/design-shards.md).
//
// Nothing here is on a request's path: the broker parses the
// configuration once, and Place runs only when a queue is first placed
// (through queen/catalog).
package shards

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The variables this package parses; errors name them.
const (
	CatalogVar   = "QUEEN_CATALOG_URL"
	ShardsVar    = "QUEEN_SHARDS"
	PlacementVar = "QUEEN_PLACEMENT"
)

// Shard is one PostgreSQL cluster that holds queues.
type Shard struct {
	Name string // unique, as placements and rules name it
	URL  string // a postgres:// connection URL, multi-host allowed
}

// Config is the parsed shard configuration. The zero value is no shards:
// one database, today's deployment.
type Config struct {
	CatalogURL string  // QUEEN_CATALOG_URL
	Shards     []Shard // QUEEN_SHARDS, in the order given; the first is the default
	Rules      []Rule  // QUEEN_PLACEMENT, tried in the order given
}

// Enabled reports whether shards are configured at all.
func (c Config) Enabled() bool { return len(c.Shards) > 0 }

// Names are the configured shards' names, in order.
func (c Config) Names() []string {
	out := make([]string, len(c.Shards))
	for i, s := range c.Shards {
		out[i] = s.Name
	}
	return out
}

// Parse reads the three variables' values. Every bad part is reported,
// each naming its variable and the part (a URL's password never shown).
// All three empty is the zero Config.
func Parse(catalog, shards, placement string) (Config, error) {
	var errs []error
	fail := func(name, part, why string) { errs = append(errs, fmt.Errorf("%s: %q: %s", name, part, why)) }
	c := Config{CatalogURL: strings.TrimSpace(catalog)}
	if c.CatalogURL != "" {
		if why := checkURL(c.CatalogURL); why != "" {
			fail(CatalogVar, redact(c.CatalogURL), why)
		}
	}
	c.Shards = parseShards(shards, fail)
	c.Rules = parseRules(placement, c.Shards, fail)
	switch {
	case c.CatalogURL != "" && strings.TrimSpace(shards) == "":
		fail(CatalogVar, redact(c.CatalogURL), "a catalogue without shards: set "+ShardsVar+" too, or neither")
	case c.CatalogURL == "" && strings.TrimSpace(shards) != "":
		fail(ShardsVar, "", "shards without a catalogue: set "+CatalogVar+" too, or neither")
	case strings.TrimSpace(placement) != "" && strings.TrimSpace(shards) == "":
		fail(PlacementVar, strings.TrimSpace(placement), "placement rules without shards: set "+ShardsVar)
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// parseShards reads name=URL pairs separated by ';'.
func parseShards(v string, fail func(name, part, why string)) []Shard {
	var out []Shard
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, u, ok := strings.Cut(part, "=")
		name, u = strings.TrimSpace(name), strings.TrimSpace(u)
		switch {
		case !ok:
			fail(ShardsVar, redact(part), "want name=URL")
		case !validName(name):
			fail(ShardsVar, redact(part), "a shard name is 1-63 letters, digits, '-' or '_'")
		case seen[name]:
			fail(ShardsVar, name, "a shard named twice")
		default:
			if why := checkURL(u); why != "" {
				fail(ShardsVar, name+"="+redact(u), why)
				continue
			}
			seen[name] = true
			out = append(out, Shard{Name: name, URL: u})
		}
	}
	return out
}

// validName accepts names that are safe in SQL identifiers and logs.
func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// checkURL says what is wrong with a connection URL, or "". It must be a
// postgres:// (or postgresql://) URL that pgx can parse: libpq's
// multi-host form included, so a shard is an HA formation as the single
// database is today.
func checkURL(u string) string {
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return "want a postgres:// connection URL"
	}
	if _, err := pgconn.ParseConfig(u); err != nil {
		return "not a connection URL pgx can parse"
	}
	return ""
}

// redact hides a URL's password (the userinfo after its first ':'). It
// works on the text, since an unparsable URL must be shown too.
func redact(u string) string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	auth, _, _ := strings.Cut(rest, "/")
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return u
	}
	user, _, has := strings.Cut(auth[:at], ":")
	if !has {
		return u
	}
	return u[:len(u)-len(rest)] + user + ":xxxxx" + rest[at:]
}
