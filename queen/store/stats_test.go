package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// A flush retried after a lost answer counts once; two brokers' minutes
// add up; the leader samples the gauges, folds the per-broker rows into
// one without changing the sums, and prunes what is past retention.
func TestRecordedMinutesFoldAndPrune(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "st", TransactionID: "1"}, {Queue: "st", TransactionID: "2"}}, ""); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Minute)
	old := now.Add(-20 * time.Minute)
	row := func(at time.Time, n int64) []store.QueueMinute {
		return []store.QueueMinute{{Minute: at, Tenant: tenant, Queue: "st", PushRequests: 1, PushMessages: n, LagSumMs: 10 * n, LagCount: n, LagMaxMs: n},
			{Minute: at, Tenant: tenant, Queue: "deleted-since", PushMessages: 9}}
	}
	broker := func(at time.Time) []store.BrokerMinute {
		return []store.BrokerMinute{{Minute: at, Hostname: "h", Port: 1, Requests: 3, Gauges: []byte(`{"memory":{"rss_bytes":{"avg":1,"min":1,"max":1,"last":1}}}`)}}
	}
	for i := 0; i < 2; i++ { // the retry
		if err := s.RecordMinutes(ctx, "b1", row(old, 5), broker(old)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordMinutes(ctx, "b2", row(old, 7), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordMinutes(ctx, "b1", row(now.Add(-time.Minute), 1), broker(now.Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	read := func(when string, want int64) []store.QueueBucket {
		t.Helper()
		bs, err := s.QueueBuckets(ctx, store.StatsFilter{Tenant: tenant, From: old.Add(-time.Hour), To: now.Add(time.Minute), BucketMinutes: 1})
		if err != nil {
			t.Fatal(err)
		}
		var pushed int64
		for _, b := range bs {
			pushed += b.PushMessages
		}
		if pushed != want {
			t.Fatalf("%s: %d pushed in the buckets %+v, want %d", when, pushed, bs, want)
		}
		return bs
	}
	bs := read("recorded", 13)
	if len(bs) != 2 || bs[0].LagMaxMs != 7 || bs[0].LagSumMs != 120 || bs[0].PushRequests != 2 {
		t.Fatalf("two brokers' minute: %+v", bs)
	}
	lead, ok, err := s.TryLeader(ctx, store.StatsLock)
	if err != nil || !ok {
		t.Fatalf("leader: %v %v", ok, err)
	}
	defer lead.Release()
	res, err := lead.StatsPass(ctx, now.Add(-time.Minute), now.Add(-10*time.Minute), now.Add(-time.Hour))
	if err != nil || res.Sampled != 1 || res.Folded != 1 {
		t.Fatalf("pass: %+v %v", res, err)
	}
	bs = read("folded", 13)
	if bs[1].Partitions != 1 || bs[1].Pending != 2 {
		t.Fatalf("sampled gauges: %+v", bs[1])
	}
	var perBroker int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.stats_queue_minutes WHERE minute = $1`, old).Scan(&perBroker); err != nil || perBroker != 1 {
		t.Fatalf("%d rows left for the folded minute (%v)", perBroker, err)
	}
	if res, err = lead.StatsPass(ctx, now.Add(-time.Minute), now.Add(-10*time.Minute), now.Add(-5*time.Minute)); err != nil || res.Pruned != 2 {
		t.Fatalf("prune: %+v %v", res, err)
	}
	read("pruned", 1)
	bm, err := s.BrokerMinutes(ctx, "", old.Add(-time.Hour), now.Add(time.Minute))
	if err != nil || len(bm) != 1 || bm[0].Broker != "b1" || bm[0].Requests != 3 {
		t.Fatalf("broker minutes: %+v %v", bm, err)
	}
}
