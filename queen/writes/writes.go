// Package writes is what a write does to rows before and around the append
// statement (store.AppendRows), which every write runs through: a live push
// and a replay (queen/pushpath), a transaction (queen/txn), a streams cycle
// (queen/streams), a timer's schedule and fire (queen/httpapi, queen/txn,
// queen/sweeper) and a DLQ retry. The store holds the statements only; the
// composition root (package queen) builds one Policy per broker and hands
// it to every path that writes, and its encryption hint to queen/names,
// which forgets it with a queue's names.
//
//   - Sealing: a payload is sealed before the append when its queue
//     encrypts, as a cached hint says (QUEEN_CACHE_REFRESH_INTERVAL_MS,
//     forgotten on a configure or delete). appendSQL reads the setting itself
//     and, when the hint was stale (encryption turned on from another
//     broker), writes nothing and names the rows to seal: they are sealed
//     and the whole append runs again. Without a key that is a refusal.
//   - In-batch dedup: the second copy of a (partition, transactionId) in one
//     append is not sent to the statement; it answers duplicate of the
//     first (the dedup-off canary answers it queued instead).
package writes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/ttlcache"
)

// Options configure the write policy.
type Options struct {
	// Cipher seals the payloads of queues with encryptionEnabled
	// (QUEEN_ENCRYPTION_KEY); nil: nothing is sealed or opened, and a row
	// appendSQL finds unsealed for a queue that encrypts is refused.
	Cipher *crypt.Cipher
	// Clock ages the encryption hint; nil means the wall clock.
	Clock clock.Clock
	// TTL bounds how long a cached encryption setting is trusted
	// (QUEEN_CACHE_REFRESH_INTERVAL_MS, as queen/names' entries). Zero
	// means 60 s.
	TTL time.Duration
}

// New is the write policy over st, one per broker: every path that
// appends through st shares it, so a forgotten hint is forgotten for all.
func New(st *store.Store, o Options) *Policy {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.TTL <= 0 {
		o.TTL = 60 * time.Second
	}
	return &Policy{st: st, cipher: o.Cipher, hints: ttlcache.New[sealKey](o.Clock, o.TTL)}
}

// Policy is the write policy over one store. It is safe for concurrent use.
type Policy struct {
	st     *store.Store
	cipher *crypt.Cipher
	// hints caches whether a queue encrypts (queueEncrypted).
	hints *ttlcache.Cache[sealKey]
}

// sealKey names a queue in the encryption hint: "t" when it has
// encryptionEnabled, "f" when not.
type sealKey struct{ tenant, queue string }

// queueEncrypted reports whether the tenant's queue asks for encryption
// (false for a queue that does not exist), cached like the names. It is a
// hint that saves a second round trip: appendSQL reads the queue's setting
// itself and refuses an unsealed row into an encrypting queue, which is
// then sealed and appended again (appendSealing).
func (w *Policy) queueEncrypted(ctx context.Context, q store.Executor, tenant, queue string) (bool, error) {
	k := sealKey{tenant: tenant, queue: queue}
	if v, ok := w.hints.Get(k); ok {
		return v == "t", nil
	}
	on, err := w.st.QueueEncrypted(ctx, q, store.QueueEncryptedParams{Tenant: tenant, Queue: queue})
	if err != nil {
		return false, err
	}
	w.hints.Put(k, map[bool]string{true: "t", false: "f"}[on])
	return on, nil
}

// ForgetSealHint drops the cached encryption setting of a queue: it was
// configured or deleted, here or through another broker (queen/names'
// Configure, DeleteQueue and ForgetQueue, the last on a mesh hint, call it
// through names.Options.SealHints).
func (w *Policy) ForgetSealHint(tenant, queue string) {
	w.hints.Delete(sealKey{tenant: tenant, queue: queue})
}

// SealRows makes each row's payload what its queue stores, sealing or
// opening it at most once. A sealed payload (spooled with a key) must open
// with a configured key, or the write is refused for good (RefusedError:
// the drain quarantines it); it is stored opened, and sealed again under the
// current key when its queue encrypts (never an envelope inside an
// envelope). A plain payload is sealed when its queue encrypts. Whether a
// queue encrypts comes from the cached hint; appendSQL has the last word
// (appendSealing). Without a key nothing is sealed or opened: a sealed
// payload is stored sealed as it came.
func (w *Policy) SealRows(ctx context.Context, tenant string, items []store.PushItem, rows []store.AppendRow) error {
	if w.cipher == nil {
		return nil
	}
	for i, it := range items {
		on, err := w.queueEncrypted(ctx, w.st.Pool(), tenant, it.Queue)
		if err != nil {
			return err
		}
		p, err := w.sealOne(it, rows[i].Payload(), on)
		if err != nil {
			return err
		}
		rows[i] = rows[i].WithPayload(p)
	}
	return nil
}

// sealOne is what item it's payload p is stored as, its queue encrypting
// or not (on).
func (w *Policy) sealOne(it store.PushItem, p crypt.Payload, on bool) (crypt.Payload, error) {
	switch {
	case p.Sealed():
		plain, err := w.cipher.OpenPayload(p)
		if err != nil {
			return p, &store.RefusedError{Reason: fmt.Sprintf("%s/%s %s: a spooled payload opens with no configured key (was QUEEN_ENCRYPTION_KEY changed without keeping the old one in QUEEN_ENCRYPTION_KEYS_PREVIOUS?)",
				it.Queue, it.Partition, it.TransactionID), Err: err}
		}
		// Sealed again under the current key when the queue encrypts, so
		// a key rotation finishes: nothing stays sealed under a retired
		// key once the spool drained.
		if on {
			return w.cipher.SealPayload(plain)
		}
		return plain, nil
	case on:
		return w.cipher.SealPayload(p)
	}
	return p, nil
}

// SealTimer seals a timer's payload at schedule time when its queue asks
// for encryption, so it is never at rest in the clear; the fire stores it
// sealed as it is.
func (w *Policy) SealTimer(ctx context.Context, q store.Executor, tenant, queue string, payload json.RawMessage) (json.RawMessage, bool, error) {
	if w.cipher == nil {
		return payload, false, nil
	}
	on, err := w.queueEncrypted(ctx, q, tenant, queue)
	if err != nil || !on {
		return payload, false, err
	}
	sealed, err := w.cipher.Seal(payload)
	return sealed, err == nil, err
}

// Append runs the append over rows that may repeat a (partition,
// transactionId) pair: a repeat is answered as a duplicate of the first.
func (w *Policy) Append(ctx context.Context, q store.Executor, rows []store.AppendRow, lockWait string) ([]store.AppendOut, error) {
	type key struct{ pid, txid string }
	first := make(map[key]int, len(rows))
	alias := make([]int, len(rows))
	uniq := make([]store.AppendRow, 0, len(rows))
	for i, r := range rows {
		k := key{r.PartitionID(), r.TransactionID()}
		if j, ok := first[k]; ok {
			alias[i] = j
			continue
		}
		first[k] = len(uniq)
		alias[i] = len(uniq)
		uniq = append(uniq, r)
	}
	res, err := w.appendSealing(ctx, q, uniq, lockWait)
	if err != nil {
		return nil, err
	}
	out := make([]store.AppendOut, len(rows))
	taken := make([]bool, len(uniq))
	for i := range rows {
		j := alias[i]
		out[i] = res[j]
		switch {
		case taken[j] && canary.On("dedup-off"):
			out[i] = store.QueuedAs(rows[i].ID())
		case taken[j]:
			out[i] = out[i].AsDuplicate()
		}
		taken[j] = true
	}
	return out, nil
}

// appendSealing runs the append statement over distinct rows; when it found
// rows to seal (it wrote nothing) they are sealed and it runs again.
func (w *Policy) appendSealing(ctx context.Context, q store.Executor, rows []store.AppendRow, lockWait string) ([]store.AppendOut, error) {
	out, err := w.st.AppendRows(ctx, q, store.AppendRowsParams{Rows: rows, LockWait: lockWait})
	if err != nil {
		return nil, err
	}
	var unsealed []int
	for i, o := range out {
		if o.NeedsSeal() {
			unsealed = append(unsealed, i)
		}
	}
	if len(unsealed) > 0 {
		return w.appendSealed(ctx, q, rows, unsealed, lockWait)
	}
	if canary.On("dedup-off") {
		for i := range out {
			out[i] = store.QueuedAs(rows[i].ID())
		}
	}
	return out, nil
}

// appendSealed seals the rows appendSQL found unsealed for a queue that
// encrypts (the hint that decides sealing up front was stale: encryption was
// turned on from another broker) and appends the whole batch again; the first
// statement wrote nothing. A broker without a key cannot: the write is
// refused, never stored in the clear.
func (w *Policy) appendSealed(ctx context.Context, q store.Executor, rows []store.AppendRow, idx []int, lockWait string) ([]store.AppendOut, error) {
	if w.cipher == nil {
		return nil, unsealedRefused(rows[idx[0]])
	}
	again := append([]store.AppendRow(nil), rows...)
	for _, i := range idx {
		sealed, err := w.cipher.SealPayload(rows[i].Payload())
		if err != nil {
			return nil, err
		}
		again[i] = again[i].WithPayload(sealed)
	}
	w.hints.Clear()
	return w.appendSealing(ctx, q, again, lockWait)
}

// unsealedRefused is the refusal of a row appendSQL found unsealed for a
// queue that encrypts, by a broker that holds no key: it is never stored in
// the clear.
func unsealedRefused(r store.AppendRow) error {
	return &store.RefusedError{Reason: fmt.Sprintf("partition %s (transactionId %s): the queue has encryptionEnabled and this broker has no QUEEN_ENCRYPTION_KEY",
		r.PartitionID(), r.TransactionID())}
}
