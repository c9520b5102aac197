package store

import (
	"context"
)

// Encryption at rest: the payloads of queues with encryptionEnabled are
// stored sealed (queen/crypt), so the database does not see them. Sealing
// on the way in is the write policy's (queen/writes): the
// store reads the setting (QueueEncrypted), and appendSQL refuses an
// unsealed row into an encrypting queue. Reads answer payloads as stored
// (crypt.Payload); whoever hands them to a client opens them
// (crypt.Cipher.Reveal): queen/consume for pops, queen/httpapi for the
// message and DLQ listings.

// queueEncryptedSQL reads whether tenant $1's queue $2 encrypts.
const queueEncryptedSQL = `SELECT encryption_enabled FROM queen.queues WHERE tenant_id = $1 AND name = $2`

// QueueEncryptedParams are queueEncryptedSQL's arguments, $1 and $2.
type QueueEncryptedParams struct {
	Tenant, Queue string
}

// QueueEncrypted runs queueEncryptedSQL on q: whether the tenant's queue
// asks for encryption (false for a queue that does not exist). It caches
// nothing; the write policy (queen/writes) keeps it as a
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
