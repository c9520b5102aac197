package writes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
	"github.com/queen-go/queen/queen/writes"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const tenant = config.DefaultTenant

// broker is a store with its write policy and its name cache wired as
// package queen wires them: the cache forgets the policy's hints.
func broker(t *testing.T, c *crypt.Cipher) (*store.Store, *writes.Policy, *names.Names) {
	t.Helper()
	st := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	w := writes.New(st, writes.Options{Cipher: c})
	return st, w, names.New(st, names.Options{SealHints: w})
}

// rows resolves and builds the rows of items as a push does.
func rows(t *testing.T, n *names.Names, w *writes.Policy, items ...store.PushItem) []store.AppendRow {
	t.Helper()
	ctx := context.Background()
	pids, err := n.PushPartitions(ctx, tenant, items)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.BuildRows(ctx, tenant, items, pids, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func plain(s string) crypt.Payload { return crypt.Plain(json.RawMessage(s)) }

// A repeated (partition, transactionId) in one append is not sent to the
// statement: it answers duplicate of the first, with the first's id.
func TestARepeatInOneAppendAnswersDuplicateOfTheFirst(t *testing.T) {
	st, w, n := broker(t, nil)
	r := rows(t, n, w, store.PushItem{Queue: "q", TransactionID: "same", Payload: plain(`1`)},
		store.PushItem{Queue: "q", TransactionID: "same", Payload: plain(`2`)})
	out, err := w.Append(context.Background(), st.Pool(), r, "")
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Queued() || out[1].Queued() || out[1].MessageID() != out[0].MessageID() {
		t.Fatalf("outcomes: %+v", out)
	}
}

// Encryption turned on with the hint cached "off": through the name cache
// that forgets the hint (names.Options.SealHints), the next rows are
// sealed before the append.
func TestConfigureThroughTheNamesForgetsTheHint(t *testing.T) {
	c, err := crypt.New(strings.Repeat("3c", 32))
	if err != nil {
		t.Fatal(err)
	}
	_, w, n := broker(t, c)
	if r := rows(t, n, w, store.PushItem{Queue: "enc", Payload: plain(`1`)}); r[0].Payload().Sealed() {
		t.Fatal("sealed for a queue that does not encrypt")
	}
	on := true
	if _, err := n.Configure(context.Background(), store.ConfigureInput{Tenant: tenant, Queue: "enc",
		Patch: store.OptionPatch{EncryptionEnabled: &on}}); err != nil {
		t.Fatal(err)
	}
	if r := rows(t, n, w, store.PushItem{Queue: "enc", Payload: plain(`2`)}); !r[0].Payload().Sealed() {
		t.Fatal("the configure left the hint cached: the row was built unsealed")
	}
}

// A broker without a key never stores a row in the clear for a queue that
// encrypts: the append refuses it, whatever the hint said.
func TestWithoutAKeyAnUnsealedRowIsRefused(t *testing.T) {
	st, w, n := broker(t, nil)
	on := true
	if _, err := n.Configure(context.Background(), store.ConfigureInput{Tenant: tenant, Queue: "enc",
		Patch: store.OptionPatch{EncryptionEnabled: &on}}); err != nil {
		t.Fatal(err)
	}
	r := rows(t, n, w, store.PushItem{Queue: "enc", Payload: plain(`1`)})
	_, err := w.Append(context.Background(), st.Pool(), r, "")
	var refused *store.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "no QUEEN_ENCRYPTION_KEY") {
		t.Fatalf("append of an unsealed row into an encrypting queue: %v", err)
	}
}
