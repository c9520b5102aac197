package store

import (
	"context"
	"fmt"
)

// Encryption at rest: the payloads of queues with encryptionEnabled are
// stored sealed (queen/crypt), so the database does not see them. Reads
// answer them as stored (crypt.Payload); whoever hands them to a client
// opens them (crypt.Cipher.Reveal): queen/consume for pops, queen/httpapi
// for the message and DLQ listings.

// queueEncryptedSQL reads whether tenant $1's queue $2 encrypts.
const queueEncryptedSQL = `SELECT encryption_enabled FROM queen.queues WHERE tenant_id = $1 AND name = $2`

// queueEncrypted reports whether the tenant's queue asks for encryption
// (false for a queue that does not exist), cached like the names. It is a
// hint that saves a second round trip: appendSQL reads the queue's setting
// itself and refuses an unsealed row into an encrypting queue, which is
// then sealed and appended again (appendSealed).
func (s *Store) queueEncrypted(ctx context.Context, q querier, tenant, queue string) (bool, error) {
	// Configure forgets it, and delete and a mesh hint through
	// queen/names (ForgetSealHint).
	k := sealKey{tenant: tenant, queue: queue}
	if v, ok := s.sealed.Get(k); ok {
		return v == "t", nil
	}
	var on bool
	rows, err := q.Query(ctx, queueEncryptedSQL, tenant, queue)
	if err != nil {
		return false, err
	}
	for rows.Next() {
		if err := rows.Scan(&on); err != nil {
			rows.Close()
			return false, err
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	s.sealed.Put(k, map[bool]string{true: "t", false: "f"}[on])
	return on, nil
}

// sealKey names a queue in the encryption hint: "t" when it has
// encryptionEnabled, "f" when not.
type sealKey struct{ tenant, queue string }

// ForgetSealHint drops the cached encryption setting of a queue: it was
// deleted, or another broker configured or deleted it.
func (s *Store) ForgetSealHint(tenant, queue string) {
	s.sealed.Delete(sealKey{tenant: tenant, queue: queue})
}

// sealRows makes each row's payload what its queue stores, sealing or
// opening it at most once. A sealed payload (spooled with a key) must open
// with a configured key, or the write is refused for good (RefusedError:
// the drain quarantines it); it is stored opened, and sealed again under the
// current key when its queue encrypts (never an envelope inside an
// envelope). A plain payload is sealed when its queue encrypts. Whether a queue encrypts comes from the cached
// hint; appendSQL has the last word (appendSealed). Without a key nothing
// is sealed or opened: a sealed payload is stored sealed as it came.
func (s *Store) sealRows(ctx context.Context, tenant string, items []PushItem, rows []AppendRow) error {
	if s.cipher == nil {
		return nil
	}
	for i, it := range items {
		on, err := s.queueEncrypted(ctx, s.pool, tenant, it.Queue)
		if err != nil {
			return err
		}
		p := rows[i].payload
		switch {
		case p.Sealed():
			plain, err := s.cipher.OpenPayload(p)
			if err != nil {
				return &RefusedError{Reason: fmt.Sprintf("%s/%s %s: a spooled payload opens with no configured key (was QUEEN_ENCRYPTION_KEY changed without keeping the old one in QUEEN_ENCRYPTION_KEYS_PREVIOUS?)",
					it.Queue, it.Partition, it.TransactionID), Err: err}
			}
			// Sealed again under the current key when the queue
			// encrypts, so a key rotation finishes: nothing stays
			// sealed under a retired key once the spool drained.
			rows[i].payload = plain
			if on {
				if rows[i].payload, err = s.cipher.SealPayload(plain); err != nil {
					return err
				}
			}
		case on:
			if rows[i].payload, err = s.cipher.SealPayload(p); err != nil {
				return err
			}
		}
	}
	return nil
}
