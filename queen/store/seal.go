package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// Encryption at rest: the payloads of queues with encryptionEnabled are
// stored sealed (queen/crypt) and opened on every read, so clients see
// plaintext and the database does not.

// queueEncrypted reports whether the tenant's queue asks for encryption
// (false for a queue that does not exist), cached like the names. It is a
// hint that saves a second round trip: appendSQL reads the queue's setting
// itself and refuses an unsealed row into an encrypting queue, which is
// then sealed and appended again (appendSealed).
func (s *Store) queueEncrypted(ctx context.Context, q querier, tenant, queue string) (bool, error) {
	// Cached with the queue's names, so configure and delete forget it.
	k := subName{tenant: tenant, queue: queue}
	if v, ok := lookup(s.cache, s.cache.sealed, k); ok {
		return v == "t", nil
	}
	var on bool
	rows, err := q.Query(ctx, `SELECT encryption_enabled FROM queen.queues WHERE tenant_id = $1 AND name = $2`, tenant, queue)
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
	store(s.cache, s.cache.sealed, k, map[bool]string{true: "t", false: "f"}[on])
	return on, nil
}

// sealRows opens items spooled sealed, then seals the rows of encrypted
// queues. Without a key nothing is sealed, and a sealed spooled item is
// stored sealed as it came.
func (s *Store) sealRows(ctx context.Context, tenant string, items []PushItem, rows []appendRow) error {
	for i, it := range items {
		if !it.Sealed {
			continue
		}
		if s.cipher == nil {
			rows[i].encrypted = true
			continue
		}
		plain, err := s.cipher.Open([]byte(rows[i].payload))
		if err != nil {
			return &RefusedError{Reason: fmt.Sprintf("%s/%s %s: a spooled payload opens with no configured key (was QUEEN_ENCRYPTION_KEY changed without keeping the old one in QUEEN_ENCRYPTION_KEYS_PREVIOUS?)",
				it.Queue, it.Partition, it.TransactionID), Err: err}
		}
		rows[i].payload = string(plain)
	}
	if s.cipher == nil {
		return nil
	}
	for i, it := range items {
		on, err := s.queueEncrypted(ctx, s.pool, tenant, it.Queue)
		if err != nil {
			return err
		}
		if !on {
			continue
		}
		sealed, err := s.cipher.Seal([]byte(rows[i].payload))
		if err != nil {
			return err
		}
		rows[i].payload, rows[i].encrypted = string(sealed), true
	}
	return nil
}

// openPayload is what a reader sees of a stored payload: the plaintext of
// a sealed one when the key opens it, else the payload as stored.
func (s *Store) openPayload(payload []byte, sealed bool) json.RawMessage {
	if payload == nil {
		return json.RawMessage("null")
	}
	if !sealed || s.cipher == nil {
		return payload
	}
	plain, err := s.cipher.Open(payload)
	if err != nil {
		return payload
	}
	return plain
}
