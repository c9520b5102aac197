package store

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The SQL surface's push (queen.push_messages_v3 and _v2, migration 021)
// runs the broker's own append statement: the functions below are
// appendSQL and dupLookupSQL, their bodies the Go constants' text, so a
// dedup, lock-order or seq rule is written once and the surface cannot keep
// an old one. The broker itself runs the constants as named statements, not
// these functions: a function that writes is volatile, so PostgreSQL never
// inlines it and plans its body again for every calling statement (SQL
// functions have no plan cache before PostgreSQL 18; a 10-row append took
// 0.56-0.73 ms as the prepared statement and 1.5-3.4 ms through
// append_rows, PostgreSQL 15), and the canary variants (canaries.go)
// rewrite the statement text the broker sends, which a function call would
// hide from them. The functions carry no canary: the surface never did.

// surfaceFunction is a statement of the package as a LANGUAGE sql
// function: its signature (arguments by position, $1..$n in the body, so
// no argument name can shadow a column), its result and its volatility.
type surfaceFunction struct {
	signature, returns, volatility, body string
}

// surfaceFunctions are the statements the SQL surface calls. The owner
// (the broker's role) alone executes them: the surface's functions run as
// the owner (SECURITY DEFINER), and queen_sql is granted those, not these.
var surfaceFunctions = []surfaceFunction{
	{
		// The epochs (no shards: NULL) default, so the surface's callers
		// (migration 021) pass the ten arguments they always did.
		signature:  "queen.append_rows(uuid[], uuid[], text[], text[], text[], text[], timestamptz, boolean[], text, boolean, bigint[] DEFAULT NULL)",
		returns:    "TABLE (ord bigint, message_id text, queued boolean, advanced bigint, needs_seal boolean)",
		volatility: "VOLATILE",
		body:       appendSQL,
	},
	{
		signature:  "queen.append_duplicates(uuid[], text[])",
		returns:    "TABLE (ord bigint, message_id text)",
		volatility: "STABLE",
		body:       dupLookupSQL,
	},
}

// ddl creates or replaces f and takes it from PUBLIC (REVOKE names the
// arguments without their defaults).
func (f surfaceFunction) ddl() string {
	if strings.Contains(f.body, "$queen_statement$") {
		panic("store: a statement contains the dollar quote that wraps it as a function")
	}
	return "CREATE OR REPLACE FUNCTION " + f.signature + " RETURNS " + f.returns + " LANGUAGE sql " + f.volatility +
		" SET search_path = pg_catalog, queen, pg_temp AS $queen_statement$" + f.body + "$queen_statement$;\n" +
		"REVOKE EXECUTE ON FUNCTION " + strings.ReplaceAll(f.signature, " DEFAULT NULL", "") + " FROM PUBLIC;\n"
}

// generatedMigration (re)creates the surface's functions from the
// constants. It sits in the order as 020_surface_statements, before
// migration 021 that calls them, and its ledger key carries a hash of its
// text: a broker whose statements changed runs it again at its first start
// on a database (and only then), so an upgrade brings the functions along.
// (Brokers of two versions each starting for the first time on one database
// leave the later starter's text, as a downgrade would.)
func generatedMigration() migration { return generatedMigrationOf(surfaceFunctions) }

// generatedMigrationOf is the generated step that creates fns.
func generatedMigrationOf(fns []surfaceFunction) migration {
	var b strings.Builder
	for _, f := range fns {
		b.WriteString(f.ddl())
	}
	sum := sha256.Sum256([]byte(b.String()))
	const name = "020_surface_statements"
	return migration{version: name + "@" + hex.EncodeToString(sum[:6]), order: name, body: b.String()}
}
