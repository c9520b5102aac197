package storetest

import (
	"context"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/combine"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/writes"
)

// Retry is the contention retry a broker wires into its push path and ack
// combiner (package queen's contentionRetry), over st, on the wall clock:
// the one place the tests of the paths over the store get it from.
func Retry(st *store.Store) combine.Retry {
	jitter := ids.NewSource(clock.Real{}, nil)
	return combine.Retry{Bound: st.Bound, Jitter: jitter.Jitter, Contention: store.Contention, LockTimedOut: store.LockTimedOut,
		Wait: func(ctx context.Context, d time.Duration) { clock.Sleep(ctx, clock.Real{}, d) }}
}

// Writes is the write policy a broker wires over st (queen/writes: sealing
// with cipher when its queue encrypts, nil: no key; the in-batch dedup),
// for the tests that append through the paths over the store: the store
// itself holds no policy.
func Writes(st *store.Store, cipher *crypt.Cipher) *writes.Policy {
	return writes.New(st, writes.Options{Cipher: cipher})
}
