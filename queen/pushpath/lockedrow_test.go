package pushpath_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestPushersOfALockedRowLeaveTheSlotsFree: issue 28 item 8, through the
// admission slots. A partition row held locked by an outside session and
// many more callers pushing into it than the arbiter has slots: a push to
// another queue still answers while the row stays locked. Before, each
// caller waiting on the row kept its slot for the whole wait, and once the
// slots were gone every push of the broker queued behind them.
func TestPushersOfALockedRowLeaveTheSlotsFree(t *testing.T) {
	pool := storetest.Pool(t)
	st := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), TxTimeout: 60 * time.Second})
	p := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st), Arbiter: admission.New(4, 0.05), IDs: ids.NewSource(clock.Real{}, nil), Log: quiet})
	ctx := context.Background()
	push := func(ctx context.Context, queue string) error {
		out, err := p.Push(ctx, config.DefaultTenant, "", []store.PushItem{{Queue: queue, Payload: crypt.Plain([]byte(`1`))}})
		if err == nil && len(out.Results) != 1 {
			err = fmt.Errorf("push to %s: %+v", queue, out)
		}
		return err
	}
	for _, q := range []string{"locked", "free"} {
		if err := push(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'locked' FOR UPDATE OF p`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = push(ctx, "locked") }()
	}
	time.Sleep(time.Second) // they all reach the row and wait on it
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for i := range 5 {
		if err := push(bounded, "free"); err != nil {
			t.Fatalf("push %d to another queue while 24 callers wait on a locked row: %v", i, err)
		}
	}
	_ = tx.Rollback(ctx)
	wg.Wait()
}
