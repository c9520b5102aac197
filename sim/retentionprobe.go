package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetentionProbeQueue prefixes the retention probe's queues, one per
// retention rule per probe ("sim-retention-0-expired", "-0-completed",
// "-0-evicted"); no simulated client touches them.
const RetentionProbeQueue = "sim-retention"

// retentionProbeRules are the retention rules in the order a pass runs
// them (queen/store retentionRules), each probed through its own queue.
var retentionProbeRules = []string{"expired", "completed", "evicted"}

// retentionDueSecs is how long a probe message waits before its rule is
// due to delete it: retentionSeconds, completedRetentionSeconds and
// maxWaitTimeSeconds of the probe's queues.
const retentionDueSecs = 2

// retentionFailFor is how long the retention.fail fault lasts when the
// scenario gives no For: long enough that a rule held back by the failing
// one is judged (retentionBoundMS) while it still fails.
const retentionFailFor = 20 * time.Second

// retentionStep is the virtual time between two runs of the brokers'
// background services during the probe, and retentionSeenEvery between
// two observations of the probe's rows.
const (
	retentionStep      = 250 * time.Millisecond
	retentionSeenEvery = time.Second
)

// retentionTrigger names the trigger (and its function) the probe's fault
// installs on queen.messages from an outside session.
const retentionTrigger = "sim_retention_fail"

// probeRetention (retention.fail, lockstep; run after the heal and the
// drain, when every broker is up and no other fault is active, so that
// the retention leader's passes are due every RETENTION_INTERVAL) makes
// one retention rule fail and judges that the others still progress.
//
// Under the probe tenant it configures one queue per rule (retention
// after retentionDueSecs; completed retention with a group that consumes
// at once; eviction after maxWait), pushes one message into each, and
// installs, from an outside session, a BEFORE DELETE trigger on
// queen.messages that raises for the rows of the failing rule's queue
// (f.Count: 0 expired, 1 completed, 2 evicted): from the moment that
// message is due, every statement of that rule fails (it is one statement
// across all queues). The trigger goes after For. Virtual time advances in
// retentionStep steps, the brokers' services running as they fall due,
// and every retentionSeenEvery the probe's stored rows are recorded, until
// retentionBoundMS after the fault ended. Events: a KProbe "retention.push"
// per message (Rule, Due), the KFault (Rule, Q, VT, Until) and KProbe
// "retention.seen" observations (Rows); CheckRetention judges them.
func (r *runner) probeRetention(dsn string, f FaultAt, n int) {
	if err := r.runRetentionProbe(dsn, f, n); err != nil {
		r.starved = append(r.starved, fmt.Sprintf("retention.fail at=%v: %v", f.At, err))
	}
}

func (r *runner) runRetentionProbe(dsn string, f FaultAt, n int) error {
	if r.pg == nil {
		return fmt.Errorf("needs a lockstep run")
	}
	tenant := r.probeTenant()
	failing := retentionProbeRules[max(f.Count, 0)%len(retentionProbeRules)]
	failFor := f.For
	if failFor <= 0 {
		failFor = retentionFailFor
	}
	queueOf := func(rule string) string { return fmt.Sprintf("%s-%d-%s", RetentionProbeQueue, n, rule) }
	const group = "sim-retention"
	for _, rule := range retentionProbeRules {
		opts := map[string]any{}
		switch rule {
		case "expired":
			opts["retentionEnabled"], opts["retentionSeconds"] = true, retentionDueSecs
		case "completed":
			opts["retentionEnabled"], opts["completedRetentionSeconds"] = true, retentionDueSecs
		case "evicted":
			opts["maxWaitTimeSeconds"] = retentionDueSecs
		}
		body, _ := json.Marshal(map[string]any{"queue": queueOf(rule), "options": opts})
		if code, raw, err := r.setupCall("POST", "/api/v1/configure", tenant, body); err != nil || code != 200 {
			return fmt.Errorf("configure %s: %d %s %v", queueOf(rule), code, clip(raw), err)
		}
	}
	// The completed queue's group subscribes before the push, as a
	// consumer started before its producer.
	cq := queueOf("completed")
	if txids, err := r.probePopAs(tenant, 0, cq, group, false); err != nil || len(txids) > 0 {
		return fmt.Errorf("subscribe %s to %s: %v %v", group, cq, txids, err)
	}
	for _, rule := range retentionProbeRules {
		txid := queueOf(rule) + "-m"
		if err := r.probePush(tenant, 0, queueOf(rule), txid); err != nil {
			return err
		}
		r.hist.Add(Event{Kind: KProbe, What: "retention.push", Tenant: tenant, Queue: queueOf(rule), Partition: "p", Txid: txid, VT: r.vt(),
			Rule: rule, Due: r.vt() + retentionDueSecs*1000})
	}
	// Consumed at once (autoAck): due under completed retention when
	// its completedRetentionSeconds have passed since its push.
	if txids, err := r.probeAutoAck(tenant, cq, group); err != nil || len(txids) != 1 {
		return fmt.Errorf("consume %s as %s: %v %v", cq, group, txids, err)
	}
	conn, err := pgx.Connect(r.ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := installRetentionFailure(r.ctx, conn, tenant, queueOf(failing)); err != nil {
		return err
	}
	from := r.vt()
	until := from + failFor.Milliseconds()
	r.hist.Add(Event{Kind: KFault, Fault: "retention.fail", Broker: -1, Tenant: tenant, Queue: queueOf(failing), Rule: failing, VT: from, Until: until})
	installed := true
	defer func() {
		if installed {
			_ = removeRetentionFailure(context.Background(), conn)
		}
	}()
	end := until + retentionBoundMS + retentionSeenEvery.Milliseconds()
	nextSeen := from
	for {
		now := r.vt()
		if installed && now >= until {
			if err := removeRetentionFailure(r.ctx, conn); err != nil {
				return err
			}
			installed = false
		}
		if now >= nextSeen {
			rows, err := retentionProbeRows(r.ctx, conn, tenant)
			if err != nil {
				return err
			}
			r.hist.Add(Event{Kind: KProbe, What: "retention.seen", Tenant: tenant, VT: now, Rows: rows})
			nextSeen += retentionSeenEvery.Milliseconds()
		}
		if now >= end {
			break
		}
		r.pg.Advance(retentionStep)
		r.stepServices()
	}
	r.fired["retention.fail"]++
	return nil
}

// probeAutoAck pops up to ten messages of queue as group, autoAck, no
// wait, and returns their transactionIds.
func (r *runner) probeAutoAck(tenant, queue, group string) ([]string, error) {
	v := url.Values{"batch": {"10"}, "autoAck": {"true"}, "consumerGroup": {group}}
	code, raw, err := r.cluster.Do(r.ctx, 0, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+v.Encode(), tenant, nil)
	if err != nil || code != 200 {
		return nil, fmt.Errorf("pop of %s by %s answered %d %s %v", queue, group, code, clip(raw), err)
	}
	var res struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("pop of %s by %s answered %d %s", queue, group, code, clip(raw))
	}
	var out []string
	for _, m := range res.Messages {
		out = append(out, m.TransactionID)
	}
	return out, nil
}

// installRetentionFailure makes every delete of a row of tenant's queue
// raise, from a session outside the brokers: a rule that is due to delete
// one fails as a whole, whatever else it had to delete.
func installRetentionFailure(ctx context.Context, conn *pgx.Conn, tenant, queue string) error {
	var pids []string
	rows, err := conn.Query(ctx, `SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND q.tenant_id::text = coalesce(nullif($2, ''), q.tenant_id::text) ORDER BY 1`, queue, tenant)
	if err != nil {
		return fmt.Errorf("retention.fail: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		pids = append(pids, "'"+id+"'")
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("retention.fail: %w", err)
	}
	if len(pids) == 0 {
		return fmt.Errorf("retention.fail: %s has no partition", queue)
	}
	sql := fmt.Sprintf(`
		SET lock_timeout = '20s';
		CREATE OR REPLACE FUNCTION queen.%[1]s() RETURNS trigger LANGUAGE plpgsql AS $f$
		BEGIN
			IF OLD.partition_id = ANY(ARRAY[%[2]s]::uuid[]) THEN
				RAISE EXCEPTION 'simulated retention failure (retention.fail)';
			END IF;
			RETURN OLD;
		END $f$;
		CREATE TRIGGER %[1]s BEFORE DELETE ON queen.messages FOR EACH ROW EXECUTE FUNCTION queen.%[1]s();`,
		retentionTrigger, strings.Join(pids, ","))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("retention.fail: %w", err)
	}
	return nil
}

// removeRetentionFailure ends the fault.
func removeRetentionFailure(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, fmt.Sprintf(`DROP TRIGGER IF EXISTS %[1]s ON queen.messages; DROP FUNCTION IF EXISTS queen.%[1]s()`, retentionTrigger))
	if err != nil {
		return fmt.Errorf("retention.fail: %w", err)
	}
	return nil
}

// retentionProbeRows reads the probe's stored rows.
func retentionProbeRows(ctx context.Context, conn *pgx.Conn, tenant string) ([]Row, error) {
	rows, err := conn.Query(ctx, `SELECT q.tenant_id::text, q.name, p.name, m.transaction_id
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name LIKE $1 AND q.tenant_id::text = coalesce(nullif($2, ''), q.tenant_id::text) ORDER BY 2, 3, 4`, RetentionProbeQueue+"-%", tenant)
	if err != nil {
		return nil, fmt.Errorf("retention.fail: %w", err)
	}
	out := []Row{}
	for rows.Next() {
		row := Row{Count: 1}
		if err := rows.Scan(&row.Tenant, &row.Queue, &row.Partition, &row.Txid); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// probeRetentions runs the scheduled retention probes, one after another.
func (r *runner) probeRetentions(dsn string) {
	for i, f := range r.retentionFaults {
		r.probeRetention(dsn, f, i)
	}
}
