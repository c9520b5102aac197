package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// checkLeaks is the leaks property on the database side: after every
// broker of a run has stopped, no connection with the run's
// application_name may remain (goroutine leaks are goleak's, in every test
// binary's TestMain). It fails when a broker connection outlived its broker.
func checkLeaks(ctx context.Context, dsn, appPrefix string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(30 * time.Second) // returns as soon as they are gone; generous for a loaded machine
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '%'`, appPrefix).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d database connections of stopped brokers (%s*) still open", n, appPrefix)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
