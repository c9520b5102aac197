package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store/storetest"
)

// No broker table is PUBLIC's, and the SQL surface is queen_sql's. A role
// that is merely in the database (as any of a shared server's may be) can
// neither grant itself streams quota nor read or write the broker's
// tables, nor call the SQL surface; a member of queen_sql calls the SQL
// surface and nothing else. Before, the queen_streams tables, quota
// included, were granted to PUBLIC.
func TestNoPublicGrantsAndTheSQLSurfaceRole(t *testing.T) {
	ctx := context.Background()
	dsn := storetest.DSN(t)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	suffix := strings.ReplaceAll(ids.NewSource(clock.Real{}, nil).New(), "-", "")[24:]
	stranger, caller := "stranger_"+suffix, "sqlcaller_"+suffix
	for _, r := range []string{stranger, caller} {
		if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'pw'`, r)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				return
			}
			defer c.Close(context.Background())
			_, _ = c.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE IF EXISTS %s`, r, r))
		})
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`GRANT queen_sql TO %s`, caller)); err != nil {
		t.Fatal(err)
	}
	as := func(role string) *pgx.Conn {
		t.Helper()
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.User, cfg.Password = role, "pw"
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("connect as %s: %v", role, err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	denied := func(c *pgx.Conn, who, sql string) {
		t.Helper()
		_, err := c.Exec(ctx, sql)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != pgerrcode.InsufficientPrivilege {
			t.Fatalf("%s: %s: got %v, want insufficient_privilege", who, sql, err)
		}
	}
	quota := `INSERT INTO queen_streams.quota (tenant_id, enabled, max_queries) VALUES ('cccccccc-cccc-4ccc-8ccc-cccccccccccc', true, NULL)`
	push := `SELECT queen.push_messages_v3('[{"queue":"sqlq","payload":{"n":1}}]'::jsonb)`
	s := as(stranger)
	for _, sql := range []string{quota, `SELECT * FROM queen_streams.queries`, `SELECT * FROM queen.messages`,
		`DELETE FROM queen.queues`, push, `SELECT queen.pop_specific_batch('[]'::jsonb)`} {
		denied(s, "a stranger", sql)
	}
	c := as(caller)
	if _, err := c.Exec(ctx, push); err != nil {
		t.Fatalf("a queen_sql member calling push_messages_v3: %v", err)
	}
	for _, sql := range []string{quota, `SELECT * FROM queen.messages`, `UPDATE queen.queues SET lease_time = 1`} {
		denied(c, "a queen_sql member", sql)
	}
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'sqlq'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the SQL surface's push stored %d (%v)", n, err)
	}
	// Nothing in the broker's schemas is granted to PUBLIC.
	var public []string
	rows, err := admin.Query(ctx, `
		SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
			aclexplode(c.relacl) a
		WHERE n.nspname IN ('queen', 'queen_streams') AND a.grantee = 0
		UNION ALL
		SELECT n.nspname || '.' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname IN ('queen', 'queen_streams') AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))
		UNION ALL
		SELECT n.nspname FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname IN ('queen', 'queen_streams') AND a.grantee = 0`)
	if err != nil {
		t.Fatal(err)
	}
	if public, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(public) > 0 {
		t.Fatalf("granted to PUBLIC: %v", public)
	}
}
