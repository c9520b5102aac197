//go:build attack

package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// popLeased pops queue with a lease and returns its messages.
func (p *probe) popLeased(url, queue string) []poppedMsg {
	a := p.do("GET", url+"/api/v1/pop/queue/"+queue+"?batch=10", "")
	var res struct {
		Messages []poppedMsg `json:"messages"`
	}
	if a.code != 200 || json.Unmarshal(a.body, &res) != nil || len(res.Messages) == 0 {
		p.fatalf("pop %s: %s", queue, a)
	}
	return res.Messages
}

func ackBody(m poppedMsg) string {
	return fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q}`, m.TransactionID, m.PartitionID, m.LeaseID)
}

// holdRow begins a transaction on c holding rows FOR UPDATE (sql selects
// them); the returned func releases it.
func (p *probe) holdRow(c *pgx.Conn, sql string, args ...any) func() {
	tx, err := c.Begin(context.Background())
	if err != nil {
		p.fatalf("begin: %v", err)
	}
	tag, err := tx.Exec(context.Background(), sql, args...)
	if err != nil || (strings.HasPrefix(sql, "SELECT") && tag.RowsAffected() == 0) {
		p.fatalf("lock %q: %v (%d rows)", sql, err, tag.RowsAffected())
	}
	return func() { _ = tx.Rollback(context.Background()) }
}

// inBackground runs call and hands its answer over.
func inBackground(call func() answer) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- call() }()
	return ch
}

// waitBlocked waits until a session waits on a lock.
func (p *probe) waitBlocked(watch *pgx.Conn, what string) {
	if !eventually(15*time.Second, func() bool { return lockWaiters(watch) > 0 }) {
		p.fatalf("%s never waited on the held lock", what)
	}
}

// timedAll runs calls at once and fails each one that errs or takes
// longer than stallBound.
func (p *probe) timedAll(calls map[string]func() answer, ok func(answer) bool) {
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := call()
			if !ok(a) {
				p.failf("%s while a row is held: %s", name, a)
			} else if a.took > stallBound {
				p.failf("%s while an unrelated row is held took %v (bound %v)", name, a.took.Round(time.Millisecond), stallBound)
			}
		}()
	}
	wg.Wait()
}

// probeLockedRows (item 8): an outside session holds one partition row,
// then one cursor row; pushes and acks of other queues must finish within
// the bound meanwhile, and the held ones once it lets go.
func probeLockedRows(p *probe) {
	db := p.database()
	b := p.start(db, filepath.Join(p.t.TempDir(), "spool"), "DB_LOCK_TIMEOUT=30000")
	hold, watch := p.conn(db), p.conn(db)
	cold := []string{"cold1", "cold2", "cold3", "cold4", "cold5"}
	for _, q := range append([]string{"hot", "ackhot"}, cold...) {
		for i := 0; i < 2; i++ {
			if a := p.pushItems(b.url, item(q, "p-"+q, fmt.Sprintf("%s-%d", q, i))); a.code != 201 {
				p.fatalf("push %s: %s", q, a)
			}
		}
	}
	p.triedf("partition row of one queue held FOR UPDATE, 30 pushers waiting on it (DB_POOL_SIZE=20): pushes to 5 others")
	release := p.holdRow(hold, `SELECT 1 FROM queen.partitions WHERE name = 'p-hot' FOR UPDATE`)
	held := inBackground(func() answer { return p.pushItems(b.url, item("hot", "p-hot", "hot-held")) })
	p.waitBlocked(watch, "a push to the held partition")
	var waiting []<-chan answer
	for i := 0; i < 30; i++ {
		waiting = append(waiting, inBackground(func() answer { return p.pushItems(b.url, item("hot", "p-hot", fmt.Sprintf("hot-wait-%d", i))) }))
	}
	time.Sleep(500 * time.Millisecond) // they reach the broker and queue behind the lock
	calls := map[string]func() answer{}
	for i, q := range cold {
		calls["push "+q] = func() answer { return p.pushItems(b.url, item(q, "p-"+q, fmt.Sprintf("cold-push-%d", i))) }
	}
	p.timedAll(calls, func(a answer) bool { return a.code == 201 && pushStatus(a) == "queued" })
	release()
	if a := <-held; a.code != 201 {
		p.failf("the push to the held partition answered %s once released", a)
	}
	for _, w := range waiting {
		if a := <-w; a.code != 201 {
			p.failf("a push waiting on the held partition answered %s once released", a)
			break
		}
	}

	p.triedf("cursor row of one queue held FOR UPDATE, 30 acks waiting on it: acks of 5 others")
	hot := p.popLeased(b.url, "ackhot")
	colds := map[string]poppedMsg{}
	for _, q := range cold {
		colds[q] = p.popLeased(b.url, q)[0]
	}
	release = p.holdRow(hold, `SELECT 1 FROM queen.partition_consumers WHERE partition_id = $1::uuid FOR UPDATE`, hot[0].PartitionID)
	held = inBackground(func() answer { return p.do("POST", b.url+"/api/v1/ack", ackBody(hot[0])) })
	p.waitBlocked(watch, "an ack on the held cursor")
	waiting = nil
	for i := 0; i < 30; i++ {
		waiting = append(waiting, inBackground(func() answer { return p.do("POST", b.url+"/api/v1/ack", ackBody(hot[len(hot)-1])) }))
	}
	time.Sleep(500 * time.Millisecond)
	calls = map[string]func() answer{}
	for q, m := range colds {
		calls["ack "+q] = func() answer { return p.do("POST", b.url+"/api/v1/ack", ackBody(m)) }
	}
	p.timedAll(calls, func(a answer) bool { return a.code == 200 && strings.Contains(string(a.body), `"success":true`) })
	release()
	if a := <-held; a.code != 200 || !strings.Contains(string(a.body), `"success":true`) {
		p.failf("the ack on the held cursor answered %s once released", a)
	}
	for _, w := range waiting {
		if a := <-w; a.code != 200 {
			p.failf("an ack waiting on the held cursor answered %s once released", a)
			break
		}
	}
}

// probeDeleteRace (items 8, 12): two brokers on one database without the
// mesh; A deletes a queue while B pushes into it and into others. No 5xx,
// no stall of the others, and B's later pushes, transactions, timers and
// consumer groups on the recreated names work at once.
func probeDeleteRace(p *probe) {
	db := p.database()
	a := p.start(db, filepath.Join(p.t.TempDir(), "spool-a"))
	b := p.start(db, filepath.Join(p.t.TempDir(), "spool-b"))
	p.triedf("A deletes queue race every 300 ms for 4 s while B pushes into it and into calm1, calm2")
	stop := make(chan struct{})
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	for w, q := range []string{"race", "calm1", "calm2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ans := p.pushItems(b.url, item(q, fmt.Sprintf("p%d", i%4), fmt.Sprintf("%s-%d-%d", q, w, i)))
				mu.Lock()
				switch {
				case ans.code != 201:
					problems = append(problems, fmt.Sprintf("push %s: %s", q, ans))
				case q != "race" && ans.took > stallBound:
					problems = append(problems, fmt.Sprintf("push %s took %v while race was deleted", q, ans.took.Round(time.Millisecond)))
				}
				mu.Unlock()
			}
		}()
	}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		if ans := p.do("DELETE", a.url+"/api/v1/resources/queues/race", ""); ans.code != 200 {
			p.failf("delete through A: %s", ans)
		}
	}
	close(stop)
	wg.Wait()
	for i, pr := range problems {
		if i == 5 {
			p.failf("... %d problems in all", len(problems))
			break
		}
		p.failf("%s", pr)
	}
	p.staleAfterDelete(a, b)
}

// staleAfterDelete: B caches a queue, A deletes it, and B's next
// transaction push, plain push, timer and consumer-group pop must work at
// once.
func (p *probe) staleAfterDelete(a, b *broker) {
	p.triedf("A deletes queues B has cached: B's transaction, push, timer, group pop and streams cycle right after")
	txn := func(txid string) answer {
		return p.do("POST", b.url+"/api/v1/transaction",
			fmt.Sprintf(`{"operations":[{"type":"push","items":[{"queue":"stale","partition":"p","transactionId":%q}]}]}`, txid))
	}
	deleted := func(q string) {
		if ans := p.do("DELETE", a.url+"/api/v1/resources/queues/"+q, ""); ans.code != 200 {
			p.fatalf("delete %s through A: %s", q, ans)
		}
	}
	if ans := txn("warm"); !strings.Contains(string(ans.body), `"success":true`) {
		p.fatalf("transaction before the delete: %s", ans)
	}
	deleted("stale")
	if ans := txn("after-delete"); ans.code != 200 || !strings.Contains(string(ans.body), `"success":true`) {
		p.failf("B's transaction into a queue A deleted and it recreates: %s", ans)
	}
	deleted("stale")
	if ans := p.pushItems(b.url, item("stale", "p", "push-after-delete")); ans.code != 201 || pushStatus(ans) != "queued" {
		p.failf("B's push into a queue A deleted: %s", ans)
	}
	deleted("stale")
	p.timerAfterDelete(b)
	p.groupAfterDelete(a, b)
	p.cycleAfterDelete(a, b)
}

// cycleAfterDelete: a streams cycle on B pushing into a sink queue A
// deleted must commit at once.
func (p *probe) cycleAfterDelete(a, b *broker) {
	src := p.pushItems(b.url, item("src", "p", "src-1"))
	var pushed []struct {
		PartitionID string `json:"partitionId"`
	}
	if src.code != 201 || json.Unmarshal(src.body, &pushed) != nil || len(pushed) != 1 {
		p.fatalf("push to the source: %s", src)
	}
	reg := p.do("POST", b.url+"/streams/v1/queries", `{"name":"attack-q","source_queue":"src","sink_queue":"sink","config_hash":"h1"}`)
	var q struct {
		QueryID string `json:"query_id"`
	}
	if reg.code != 200 || json.Unmarshal(reg.body, &q) != nil || q.QueryID == "" {
		p.fatalf("register a streams query: %s", reg)
	}
	cycle := func(txid string) answer {
		return p.do("POST", b.url+"/streams/v1/cycle", fmt.Sprintf(`{"query_id":%q,"partition_id":%q,"ack":null,"push_items":[{"queue":"sink","partition":"p","transactionId":%q}]}`,
			q.QueryID, pushed[0].PartitionID, txid))
	}
	if ans := cycle("sink-warm"); !strings.Contains(string(ans.body), `"success":true`) {
		p.fatalf("streams cycle before the delete: %s", ans)
	}
	if ans := p.do("DELETE", a.url+"/api/v1/resources/queues/sink", ""); ans.code != 200 {
		p.fatalf("delete sink through A: %s", ans)
	}
	if ans := cycle("sink-after-delete"); ans.code != 200 || !strings.Contains(string(ans.body), `"success":true`) {
		p.failf("B's streams cycle into a sink A deleted: %s", ans)
	}
}

// timerAfterDelete: a timer due at once into a queue B had cached before
// A deleted it must fire within 10 s (a stale partition id made it wait
// out its claim's 30 s lease).
func (p *probe) timerAfterDelete(b *broker) {
	body := `[{"op":"schedule","queue":"stale","timerKey":"tk","partition":"p","txn":"timer-after-delete","delayMs":0}]`
	if ans := p.do("POST", b.url+"/api/v1/timers", body); ans.code != 200 {
		p.failf("timer schedule on B: %s", ans)
		return
	}
	fired := eventually(10*time.Second, func() bool {
		ans := p.do("GET", b.url+"/api/v1/pop/queue/stale?batch=10&autoAck=true", "")
		return ans.code == 200 && strings.Contains(string(ans.body), "timer-after-delete")
	})
	if !fired {
		p.failf("a timer due at once into a queue A deleted had not fired on B after 10 s")
	}
}

// groupAfterDelete: a consumer group A deletes must get messages on B at
// once.
func (p *probe) groupAfterDelete(a, b *broker) {
	if ans := p.pushItems(b.url, item("grouped", "p", "g1")); ans.code != 201 {
		p.fatalf("push: %s", ans)
	}
	if ans := p.do("GET", b.url+"/api/v1/pop/queue/grouped?consumerGroup=gx&autoAck=true", ""); ans.code != 200 {
		p.fatalf("group pop before the delete: %s", ans)
	}
	if ans := p.do("DELETE", a.url+"/api/v1/consumer-groups/gx", ""); ans.code != 200 {
		p.fatalf("delete group through A: %s", ans)
	}
	if ans := p.pushItems(b.url, item("grouped", "p", "g2")); ans.code != 201 {
		p.fatalf("push: %s", ans)
	}
	got := eventually(5*time.Second, func() bool {
		return p.do("GET", b.url+"/api/v1/pop/queue/grouped?consumerGroup=gx&autoAck=true", "").code == 200
	})
	if !got {
		p.failf("a consumer group A deleted gets nothing on B for 5 s")
	}
}

// probeAutoAckLeaves (item 3): an autoAck pop whose claim waits on a lock
// while its client leaves must not consume the message.
func probeAutoAckLeaves(p *probe) {
	db := p.database()
	b := p.start(db, filepath.Join(p.t.TempDir(), "spool"))
	hold, watch := p.conn(db), p.conn(db)
	if ans := p.pushItems(b.url, item("aa", "p", "m1")); ans.code != 201 {
		p.fatalf("push: %s", ans)
	}
	if ans := p.do("GET", b.url+"/api/v1/pop/queue/aa?autoAck=true", ""); ans.code != 200 {
		p.fatalf("warm pop: %s", ans)
	}
	if ans := p.pushItems(b.url, item("aa", "p", "m2")); ans.code != 201 {
		p.fatalf("push: %s", ans)
	}
	p.triedf("autoAck pop held on a table lock, client gone, lock released; then a plain pop")
	release := p.holdRow(hold, `LOCK TABLE queen.messages IN ACCESS EXCLUSIVE MODE`)
	ctx, cancel := context.WithCancel(context.Background())
	left := inBackground(func() answer { return p.doCtx(ctx, "GET", b.url+"/api/v1/pop/queue/aa?autoAck=true&batch=5", nil) })
	p.waitBlocked(watch, "the autoAck pop")
	cancel()
	<-left
	time.Sleep(300 * time.Millisecond) // the broker sees the client gone
	release()
	eventually(15*time.Second, func() bool { return lockWaiters(watch) == 0 })
	got := eventually(10*time.Second, func() bool {
		ans := p.do("GET", b.url+"/api/v1/pop/queue/aa?batch=5", "")
		return ans.code == 200 && strings.Contains(string(ans.body), `"m2"`)
	})
	if !got {
		p.failf("m2, claimed by an autoAck pop whose client left, never popped again: consumed with nobody receiving it")
	}
}
