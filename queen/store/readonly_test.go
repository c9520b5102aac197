package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestReadOnlyServerIsAnOutage: the address points at a server that
// refuses writes (a standby, during a failover). A push fails as an outage
// (transient, unavailable: the broker spools it), never as bad data; the
// session that met it is closed; Ping names it; and once the address
// points at a writable server again the very next push commits: no
// read-only session was kept in the pool.
func TestReadOnlyServerIsAnOutage(t *testing.T) {
	t.Parallel()
	pc, err := pgxpool.ParseConfig(storetest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", pc.ConnConfig.Host, pc.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	pc.ConnConfig.Host, pc.ConnConfig.Port = "127.0.0.1", uint16(proxy.Port())
	watch := &store.ReadOnlyWatch{}
	pc.ConnConfig.OnPgError = watch.OnPgError
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), ReadOnly: watch})
	push := func(txid string) error {
		_, err := pushItems(ctx, s, config.DefaultTenant, []store.PushItem{{Queue: "ro", TransactionID: txid}}, "")
		return err
	}
	if err := push("before"); err != nil {
		t.Fatal(err)
	}
	proxy.SetReadOnly(true)
	// The move cut the pooled sessions: the first tries may only meet a
	// closed connection; the next reach the read-only server.
	for i := 0; i < 5; i++ {
		if err = push("during"); err == nil {
			t.Fatal("a push committed on a read-only server")
		}
		if store.ReadOnly(err) {
			break
		}
	}
	if !store.ReadOnly(err) || store.Classify(err) != store.Transient || !store.Unavailable(err) {
		t.Fatalf("a read-only refusal is not an outage: readOnly=%v class=%v unavailable=%v: %v",
			store.ReadOnly(err), store.Classify(err), store.Unavailable(err), err)
	}
	if !watch.ReadOnly() || watch.Refused() == 0 {
		t.Fatalf("the watch missed it: readOnly=%v refused=%d", watch.ReadOnly(), watch.Refused())
	}
	proxy.SetReadOnly(false)
	if err := push("after"); err != nil {
		t.Fatalf("the first push after the server took writes again: %v", err)
	}
	// Ping names a read-only server (after the cut, once it reaches it)
	// and closes the session it found, as a refused write does.
	proxy.SetReadOnly(true)
	for i := 0; i < 5; i++ {
		if err = s.Ping(ctx); errors.Is(err, store.ErrReadOnly) {
			break
		}
	}
	if !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("ping on a read-only server: %v", err)
	}
	// Reads alone fill the pool with read-only sessions (a read never
	// meets 25006). Once the server takes writes, the first ping that
	// sees it starts the pool over: no write meets one of them.
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = pool.Exec(ctx, `SELECT pg_sleep(0.05)`)
		}()
	}
	wg.Wait()
	proxy.SetReadOnly(false)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping once writable: %v", err)
	}
	for i := 0; i < 10; i++ {
		if err := push(fmt.Sprint("after-ping-", i)); err != nil {
			t.Fatalf("push %d after the ping found the server writable: %v", i, err)
		}
	}
	if err := s.Ping(ctx); err != nil || watch.ReadOnly() {
		t.Fatalf("ping after: %v, still read-only: %v", err, watch.ReadOnly())
	}
}
