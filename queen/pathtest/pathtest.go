// Package pathtest wires the paths over the store as a broker does (a name
// cache per broker, the push path, the claimer) for the tests of the
// packages that compose them: queen/txn, queen/streams, queen/sweeper. It
// pushes and pops in the default tenant and fails the test on any error.
package pathtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// Tenant is the tenant every helper here works in.
const Tenant = config.DefaultTenant

// Push puts items in through a push path of n, as the broker pushes
// (through a write policy of its own, without a key), and answers their
// results.
func Push(t testing.TB, n *names.Names, items ...store.PushItem) []store.PushResult {
	t.Helper()
	p := pushpath.New(pushpath.Options{Store: n.Store(), Retry: storetest.Retry(n.Store()), Names: n, IDs: ids.NewSource(clock.Real{}, nil)})
	out, err := p.Push(context.Background(), Tenant, "", items)
	if err != nil || len(out.Results) != len(items) {
		t.Fatalf("push %+v: %+v %v", items, out, err)
	}
	return out.Results
}

// TwoBrokers are two stores on one fresh database, each with its own name
// cache, kept for an hour: only a stale retry makes one see what the
// other changed.
func TwoBrokers(t testing.TB) (a, b *names.Names) {
	t.Helper()
	pool := storetest.Pool(t)
	o := store.Options{IDs: ids.NewSource(clock.Real{}, nil)}
	n := names.Options{TTL: time.Hour}
	return names.New(store.New(pool, o), n), names.New(store.New(pool, o), n)
}

// RecreatedElsewhere warms a's cache with queue q, then deletes it through
// b and creates it again there with a push (b's own cache forgets at its
// delete, as a local delete does). Issue 28 item 12: without the mesh, a
// learns nothing of b's delete.
func RecreatedElsewhere(t testing.TB, a, b *names.Names, q string) {
	t.Helper()
	Push(t, a, store.PushItem{Queue: q, Payload: crypt.Plain(json.RawMessage(`"warm"`))})
	if ok, err := b.DeleteQueue(context.Background(), Tenant, q); err != nil || !ok {
		t.Fatalf("delete through b: %v %v", ok, err)
	}
	Push(t, b, store.PushItem{Queue: q, Payload: crypt.Plain(json.RawMessage(`"again"`))})
}

// PopAll pops, auto-acknowledged, up to 100 messages of q's queue-mode
// group through n.
func PopAll(t testing.TB, n *names.Names, q string) []consume.Message {
	t.Helper()
	c := consume.NewClaimer(n.Store(), consume.ClaimerOptions{Names: n})
	res, err := c.Claim(context.Background(), consume.PopRequest{Tenant: Tenant, Queue: q, Batch: 100, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.Messages
}
