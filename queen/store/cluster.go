package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cluster view for the dashboard: the brokers that recorded a minute
// lately, who holds each leader lock now, and a tenant's timers and KV
// namespaces, each bounded so the view stays cheap on big tables.

// BrokerSeen is a broker and the last minute it recorded.
type BrokerSeen struct {
	ID, Hostname string
	Port         int
	LastMinute   time.Time
	Requests     int64 // in that minute
}

// LeaderHold is a leader lock and the broker holding it now ("" between
// passes: the leaders release their lock after each pass).
type LeaderHold struct {
	Name   string
	Lock   int64
	Holder string // the holder's application_name, "queen:<server id>"
}

// TimerQueue is a queue's pending timers.
type TimerQueue struct {
	Queue  string
	Timers int64
	NextAt time.Time
}

// KVNamespace is a KV namespace and its live keys, counted up to
// kvCountCap (Capped: there are more).
type KVNamespace struct {
	Namespace string
	Keys      int64
	Capped    bool
}

// ClusterView is what the dashboard's cluster page shows.
type ClusterView struct {
	Brokers      []BrokerSeen
	Leaders      []LeaderHold
	Timers       []TimerQueue
	KVNamespaces []KVNamespace
}

const kvCountCap = 10000

// clusterKVSQL walks the distinct namespaces of tenant $1 on the primary
// key (a skip scan: one probe per namespace, at most 100), then counts
// each one's live keys up to kvCountCap+1.
const clusterKVSQL = `
WITH RECURSIVE ns AS (
	(SELECT namespace FROM queen.kv WHERE tenant_id = $1 ORDER BY namespace LIMIT 1)
	UNION ALL
	SELECT (SELECT k.namespace FROM queen.kv k WHERE k.tenant_id = $1 AND k.namespace > ns.namespace ORDER BY k.namespace LIMIT 1)
	FROM ns WHERE ns.namespace IS NOT NULL
)
SELECT ns.namespace, (SELECT count(*) FROM (SELECT 1 FROM queen.kv k WHERE k.tenant_id = $1 AND k.namespace = ns.namespace
	AND (k.expires_at IS NULL OR k.expires_at > coalesce($2::timestamptz, now())) LIMIT $3) c)
FROM ns WHERE ns.namespace IS NOT NULL LIMIT 100`

// clusterBrokersSQL lists each broker's latest stats minute of the last ten
// ($1 now).
const clusterBrokersSQL = `SELECT DISTINCT ON (broker_id) broker_id, hostname, port, minute, requests
			FROM queen.stats_broker_minutes WHERE minute >= coalesce($1::timestamptz, now()) - interval '10 minutes'
			ORDER BY broker_id, minute DESC`

// clusterLeaderSQL names the session holding the advisory lock $1 (empty
// when none does).
const clusterLeaderSQL = `SELECT coalesce((SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = $1 AND l.objsubid = 1
				AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1), '')`

// clusterTimersSQL counts tenant $1's timers per queue, with the next one due.
const clusterTimersSQL = `SELECT queue, count(*), min(deliver_at) FROM queen.log_timers WHERE tenant_id = $1
			GROUP BY queue ORDER BY queue LIMIT 100`

// Cluster reads the cluster view for a tenant.
func (s *Store) Cluster(ctx context.Context, tenant string) (ClusterView, error) {
	var v ClusterView
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		rows, err := tx.Query(ctx, clusterBrokersSQL, now)
		if err != nil {
			return err
		}
		if v.Brokers, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (BrokerSeen, error) {
			var b BrokerSeen
			err := r.Scan(&b.ID, &b.Hostname, &b.Port, &b.LastMinute, &b.Requests)
			return b, err
		}); err != nil {
			return err
		}
		leaders := []LeaderHold{{Name: "retention", Lock: RetentionLock}, {Name: "stats", Lock: StatsLock}}
		for i := range leaders {
			if err := tx.QueryRow(ctx, clusterLeaderSQL, leaders[i].Lock).Scan(&leaders[i].Holder); err != nil {
				return err
			}
		}
		v.Leaders = leaders
		rows, err = tx.Query(ctx, clusterTimersSQL, tenant)
		if err != nil {
			return err
		}
		if v.Timers, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TimerQueue, error) {
			var t TimerQueue
			err := r.Scan(&t.Queue, &t.Timers, &t.NextAt)
			return t, err
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, clusterKVSQL, tenant, now, kvCountCap+1)
		if err != nil {
			return err
		}
		v.KVNamespaces, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (KVNamespace, error) {
			var k KVNamespace
			err := r.Scan(&k.Namespace, &k.Keys)
			if k.Keys > kvCountCap {
				k.Keys, k.Capped = kvCountCap, true
			}
			return k, err
		})
		return err
	})
	return v, err
}
