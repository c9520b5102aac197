package queen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// hostsOf lists the hosts a connection config tries, in order, host:port.
// hostsOf lists the distinct hosts a connection config tries, in order,
// host:port (pgx adds a fallback per host for sslmode=prefer's plain try).
func hostsOf(cc *pgx.ConnConfig) []string {
	out := []string{fmt.Sprintf("%s:%d", cc.Host, cc.Port)}
	for _, f := range cc.Fallbacks {
		if h := fmt.Sprintf("%s:%d", f.Host, f.Port); !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// database names the database for logs and errors: its hosts and name
// (DATABASE_URL's, when it is set).
func (b *Broker) database() string {
	return strings.Join(b.hosts, ",") + "/" + b.dbName
}

// afterConnect logs the server a new pool connection reached when it is
// not the one the last connection reached: after a failover, the log says
// which host the broker is on now.
func (b *Broker) afterConnect(_ context.Context, c *pgx.Conn) error {
	on := remoteOf(c.PgConn())
	b.outages.Connected(on)
	if last := b.onHost.Swap(&on); last == nil || *last != on {
		b.log.Info("database connected", "server", on, "hosts", strings.Join(b.hosts, ","))
	}
	return nil
}

func remoteOf(pc *pgconn.PgConn) string {
	if nc := pc.Conn(); nc != nil && nc.RemoteAddr() != nil {
		return nc.RemoteAddr().String()
	}
	return "?"
}

// checkStandby reads whether the primary waits for a synchronous standby
// before it acknowledges a commit. Without one, a failover to a standby
// loses the commits it had not received yet, pushes the broker answered
// "queued" among them: the broker warns, or with QUEEN_REQUIRE_SYNC_STANDBY
// refuses to start. A database it cannot ask now is only logged: the
// broker rides out an outage at startup as at any other time.
//
// When the setting requires a synchronous standby, a database that cannot
// be asked yet (down, or a standby the address points at) is asked again
// until ctx ends, as the migration is: the broker never starts unchecked.
func (b *Broker) checkStandby(ctx context.Context) error {
	var names, commit string
	for attempt := 1; ; attempt++ {
		err := b.readReplication(ctx, &names, &commit)
		if err == nil {
			break
		}
		if !b.cfg.RequireSyncStandby {
			b.log.Warn("could not read the replication settings", "err", err)
			return nil
		}
		b.log.Warn("QUEEN_REQUIRE_SYNC_STANDBY: cannot read the primary's replication settings yet; retrying", "attempt", attempt, "err", err)
		t := b.opts.Clock.NewTimer(min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("QUEEN_REQUIRE_SYNC_STANDBY: could not read the primary's replication settings: %w", err)
		case <-t.C():
		}
	}
	if sync := strings.TrimSpace(names) != "" && commit != "off" && commit != "local"; sync {
		b.log.Info("commits wait for a synchronous standby", "synchronous_standby_names", names, "synchronous_commit", commit)
		return nil
	}
	why := fmt.Sprintf("the primary has no synchronous standby (synchronous_standby_names=%q, synchronous_commit=%s): "+
		"a failover to a standby loses the commits it had not received, acknowledged pushes among them", names, commit)
	if b.cfg.RequireSyncStandby {
		return fmt.Errorf("QUEEN_REQUIRE_SYNC_STANDBY: %s", why)
	}
	b.log.Warn(why)
	return nil
}

// readReplication reads the primary's synchronous_standby_names and
// synchronous_commit; a standby's own settings say nothing of the
// primary's, so a server in recovery is an error.
func (b *Broker) readReplication(ctx context.Context, names, commit *string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DBConnectionTimeout)
	defer cancel()
	var recovering bool
	err := b.pool.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'), current_setting('synchronous_commit')`).
		Scan(&recovering, names, commit)
	if err == nil && recovering {
		err = errors.New("the server is a standby (in recovery)")
	}
	return err
}
