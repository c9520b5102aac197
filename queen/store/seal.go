package store

import (
	"context"
	"encoding/json"

	"github.com/queen-go/queen/queen/crypt"
)

// Encryption at rest: the payloads of queues with encryptionEnabled are
// stored sealed (queen/crypt) and opened on every read, so clients see
// plaintext and the database does not. Sealing on the way in is the write
// policy's (WritePolicy, queen/pushpath); the store reads the setting
// (QueueEncrypted) and appendSQL refuses an unsealed row into an
// encrypting queue.

// queueEncryptedSQL reads whether tenant $1's queue $2 encrypts.
const queueEncryptedSQL = `SELECT encryption_enabled FROM queen.queues WHERE tenant_id = $1 AND name = $2`

// QueueEncryptedParams are queueEncryptedSQL's arguments, $1 and $2.
type QueueEncryptedParams struct {
	Tenant, Queue string
}

// QueueEncrypted runs queueEncryptedSQL on q: whether the tenant's queue
// asks for encryption (false for a queue that does not exist). It caches
// nothing; the write policy (WritePolicy, queen/pushpath) keeps it as a
// hint, and appendSQL has the last word.
func (s *Store) QueueEncrypted(ctx context.Context, q Executor, p QueueEncryptedParams) (bool, error) {
	var on bool
	rows, err := q.Query(ctx, queueEncryptedSQL, p.Tenant, p.Queue)
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
	return on, nil
}

// openPayload is what a reader sees of a stored payload: the plaintext of
// a sealed one when a configured key opens it, else the payload as stored.
func (s *Store) openPayload(p crypt.Payload) json.RawMessage {
	if p.Raw() == nil {
		return json.RawMessage("null")
	}
	if s.cipher == nil {
		return p.Raw()
	}
	plain, err := s.cipher.OpenPayload(p)
	if err != nil {
		return p.Raw()
	}
	return plain.Raw()
}
