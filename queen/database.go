package queen

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// hostsOf lists the hosts a connection config tries, in order, host:port.
func hostsOf(cc *pgx.ConnConfig) []string {
	out := []string{fmt.Sprintf("%s:%d", cc.Host, cc.Port)}
	for _, f := range cc.Fallbacks {
		out = append(out, fmt.Sprintf("%s:%d", f.Host, f.Port))
	}
	return out
}

// database names the database for logs and errors: its hosts and name.
func (b *Broker) database() string {
	return strings.Join(b.hosts, ",") + "/" + b.cfg.PGDatabase
}

// afterConnect logs the server a new pool connection reached when it is
// not the one the last connection reached: after a failover, the log says
// which host the broker is on now.
func (b *Broker) afterConnect(_ context.Context, c *pgx.Conn) error {
	on := remoteOf(c.PgConn())
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
func (b *Broker) checkStandby(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DBConnectionTimeout)
	defer cancel()
	var names, commit string
	err := b.pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')`).
		Scan(&names, &commit)
	if err != nil {
		b.log.Warn("could not read the replication settings", "err", err)
		return nil
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
