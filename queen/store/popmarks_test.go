package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// newMarkingStore is a store that tries to mark on every empty pop (no
// throttle), so a test sees each mark it provokes.
func newMarkingStore(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool := storetest.Pool(t)
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	claimerFor(s, consume.ClaimerOptions{PopMarkEvery: -1})
	return s, pool
}

// consumedQueue grows a queue of parts partitions with one message each,
// subscribes group and moves its cursors past them, as if it had consumed
// everything, and returns the queue's id.
func consumedQueue(t *testing.T, s *store.Store, pool *pgxpool.Pool, queue, group string, parts int) string {
	t.Helper()
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: queue}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, queue, parts, 1, 0)
	if _, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: queue, Group: group, Batch: 1, AutoAck: true}); err != nil {
		t.Fatal(err)
	}
	var qid string
	if err := pool.QueryRow(ctx, `
		WITH q AS (SELECT id FROM queen.queues WHERE tenant_id = $1 AND name = $2)
		UPDATE queen.partition_consumers pc SET last_consumed_seq = p.last_seq
		FROM queen.partitions p, q WHERE p.id = pc.partition_id AND pc.queue_id = q.id AND pc.consumer_group = $3
		RETURNING q.id::text`, tenant, queue, group).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE queen.partition_consumers`); err != nil {
		t.Fatal(err)
	}
	return qid
}

// An empty wildcard pop of a fully consumed group reads a mark, not the
// group's cursor rows: with 2,000 consumed partitions the pop after the
// first empty one touches a handful of blocks. Before, every empty pop
// walked all 2,000 cursor rows and their partitions.
func TestEmptyWildcardPopReadsNoCursorRow(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	const parts = 2000
	qid := consumedQueue(t, s, pool, "marks-cost", "g", parts)
	pop := func() int64 {
		blocks, rows := buffers(t, pool, store.WildcardPopSQL, qid, "g", 1, 1, "00000000-0000-7000-8000-000000000001", 0, true, nil, int64(1<<62), nil)
		if rows != 0 {
			t.Fatalf("the empty queue delivered %d rows", rows)
		}
		return blocks
	}
	unmarked := pop()
	res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "marks-cost", Group: "g", Batch: 1, AutoAck: true})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("pop: %v %d messages", err, len(res.Messages))
	}
	marked := pop()
	t.Logf("empty wildcard pop over %d consumed partitions: %d blocks unmarked, %d marked", parts, unmarked, marked)
	if unmarked < parts/10 {
		t.Fatalf("the unmarked pop touched only %d blocks: the test no longer grows what it measures", unmarked)
	}
	if marked > 20 {
		t.Errorf("the marked empty pop touched %d blocks (unmarked: %d)", marked, unmarked)
	}
}

// Every write that can end "fully consumed" clears the mark, so the next
// pop finds what it wrote at once: a push to an old partition, a push that
// creates a partition, a seek back, the SQL surface's push.
func TestPopMarksAreClearedByEveryWriter(t *testing.T) {
	t.Parallel()
	s, pool := newMarkingStore(t)
	ctx := context.Background()
	consumedQueue(t, s, pool, "marks-writers", "g", 20)
	popAll := func() []string {
		t.Helper()
		var got []string
		for {
			res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "marks-writers", Group: "g", Batch: 100, AutoAck: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Messages) == 0 {
				return got
			}
			for _, m := range res.Messages {
				got = append(got, m.TransactionID)
			}
		}
	}
	marked := func(when string) {
		t.Helper()
		var empty bool
		if err := pool.QueryRow(ctx, `SELECT m.groups ? 'g' FROM queen.pop_marks m JOIN queen.queues q ON q.id = m.queue_id
			WHERE q.name = 'marks-writers'`).Scan(&empty); err != nil || !empty {
			t.Fatalf("%s: no mark stands (%v)", when, err)
		}
	}
	if got := popAll(); len(got) != 0 {
		t.Fatalf("the consumed queue delivered %v", got)
	}
	marked("after the empty pop")
	for _, w := range []struct {
		name  string
		write func() error
		want  int
	}{
		{"a push to an old partition", func() error {
			_, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "marks-writers", Partition: "p7", TransactionID: "old-p"}}, "")
			return err
		}, 1},
		{"a push creating a partition", func() error {
			_, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "marks-writers", Partition: "new", TransactionID: "new-p"}}, "")
			return err
		}, 1},
		{"a seek to the start", func() error {
			epoch := time.Unix(0, 0)
			_, _, err := s.Seek(ctx, tenant, "g", "marks-writers", nil, false, &epoch)
			return err
		}, 22},
		{"the SQL surface's push", func() error {
			_, err := pool.Exec(ctx, `SELECT queen.push_messages_v3(jsonb_build_array(jsonb_build_object(
				'queue', 'marks-writers', 'partition', 'p3', 'transactionId', 'sql-p', 'payload', '{}'::jsonb)))`)
			return err
		}, 1},
	} {
		if err := w.write(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if got := popAll(); len(got) != w.want {
			t.Errorf("after %s the next pops delivered %d messages %v, want %d", w.name, len(got), got, w.want)
		}
		marked("after " + w.name)
	}
	if _, err := namesOf(s).DeleteQueue(ctx, tenant, "marks-writers"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.pop_marks m WHERE NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.id = m.queue_id)`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d marks outlived their queue (%v)", left, err)
	}
}

// A mark never hides a committed push, however the set, the check and the
// writers interleave: two producers push with pauses between (so a push
// can land between a pop's scan and its mark, and no other push comes to
// clear the mark soon after), while three consumers, a group each, pop
// their group until empty, over and over, and must each have received
// every push answered before their round began. Without the check, or
// without the set's advisory lock, a push committing between a pop's scan
// and its mark stays hidden, and a consumer comes back short.
func TestPopMarksNeverHideACommittedPush(t *testing.T) {
	t.Parallel()
	s, _ := newMarkingStore(t)
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "marks-race"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var answered []string
	done := make(chan struct{})
	var pushers, consumers sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 2 {
		pushers.Add(1)
		go func() {
			defer pushers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 200 {
				txid := fmt.Sprintf("w%d-%d", w, i)
				part := fmt.Sprintf("p%d", rng.IntN(6))
				if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "marks-race", Partition: part, TransactionID: txid}}, ""); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				answered = append(answered, txid)
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
			}
		}()
	}
	for c := range 3 {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			group := fmt.Sprintf("g%d", c)
			got := map[string]bool{}
			for round := 0; ; round++ {
				select {
				case <-done:
					return
				default:
				}
				mu.Lock()
				before := append([]string(nil), answered...)
				mu.Unlock()
				for {
					res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "marks-race", Group: group, Batch: 1000, AutoAck: true,
						SubscriptionMode: "all"})
					if err != nil {
						errs <- err
						return
					}
					if len(res.Messages) == 0 {
						break
					}
					for _, m := range res.Messages {
						got[m.TransactionID] = true
					}
				}
				for _, id := range before {
					if !got[id] {
						errs <- fmt.Errorf("group %s popped the queue empty in round %d without %s, answered before the round began", group, round, id)
						return
					}
				}
			}
		}()
	}
	pushers.Wait()
	close(done)
	consumers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
