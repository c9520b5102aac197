package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// profileSettings are the server settings of a profiled run (-pg-profile):
// pg_stat_statements counts every statement, nested ones too, and
// auto_explain logs a sample of plans with their buffers to the server log
// kept beside the profile.
func profileSettings() []string {
	return []string{"shared_preload_libraries=pg_stat_statements,auto_explain",
		"pg_stat_statements.track=all", "pg_stat_statements.max=1000", "pg_stat_statements.track_planning=on",
		"auto_explain.log_min_duration=0", "auto_explain.sample_rate=0.002",
		"auto_explain.log_analyze=on", "auto_explain.log_buffers=on", "auto_explain.log_nested_statements=on"}
}

// profileReset clears the statement and table counters before a profiled
// broker window (or any broker window of the grown mode), so what
// profileDump and countStatements read is that window's.
func (e *env) profileReset(ctx context.Context) error {
	if e.o.profile == "" && !e.o.grown {
		return nil
	}
	if _, err := e.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	_, err := e.pool.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset()`)
	return err
}

// profileDump appends to the profile file, per message of the window (n
// messages), each busiest statement's calls, rows, buffer hits, WAL and
// execution time, and the update counts of the consume path's tables.
// Backends report table counters at most once a second when idle, hence
// the wait.
func (e *env) profileDump(ctx context.Context, name string, n int64) error {
	if e.o.profile == "" || n == 0 {
		return nil
	}
	time.Sleep(1500 * time.Millisecond)
	var b strings.Builder
	fmt.Fprintf(&b, "== %s: %d messages\n  calls/msg rows/msg hit/msg read/msg wal/msg exec_us/msg plan_us/msg  query\n", name, n)
	rows, err := e.pool.Query(ctx, `SELECT calls, rows, shared_blks_hit, shared_blks_read, wal_bytes::bigint,
		total_exec_time, total_plan_time, regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	for rows.Next() {
		var calls, nrows, hit, read, wal int64
		var exec, plan float64
		var q string
		if err := rows.Scan(&calls, &nrows, &hit, &read, &wal, &exec, &plan, &q); err != nil {
			rows.Close()
			return err
		}
		f := float64(n)
		fmt.Fprintf(&b, "  %8.4f %8.3f %7.2f %8.3f %7.1f %11.2f %11.2f  %.160s\n", float64(calls)/f, float64(nrows)/f,
			float64(hit)/f, float64(read)/f, float64(wal)/f, 1000*exec/f, 1000*plan/f, q)
	}
	rows.Close()
	if err := e.profileTables(ctx, &b); err != nil {
		return err
	}
	f, err := os.OpenFile(e.o.profile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(b.String())
	return err
}

// profileTables writes the consume path's tables' updates (HOT among
// them), inserts and size.
func (e *env) profileTables(ctx context.Context, b *strings.Builder) error {
	rows, err := e.pool.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
		pg_relation_size(relid) / 8192, pg_indexes_size(relid) / 8192
		FROM pg_stat_user_tables WHERE schemaname = 'queen'
			AND relname IN ('partition_consumers', 'partitions', 'messages', 'pop_marks')`)
	if err != nil {
		return fmt.Errorf("profile tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rel string
		var ins, upd, hot, del, pages, ipages int64
		if err := rows.Scan(&rel, &ins, &upd, &hot, &del, &pages, &ipages); err != nil {
			return err
		}
		fmt.Fprintf(b, "  table %-20s ins %7d upd %7d hot %7d del %7d heap pages %5d index pages %5d\n",
			rel, ins, upd, hot, del, pages, ipages)
	}
	return rows.Err()
}
