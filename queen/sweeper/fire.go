package sweeper

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
)

// FiredTimer is one timer whose message is now stored (or was already:
// Duplicate, when its txn was pushed before).
type FiredTimer struct {
	store.ClaimedTimer
	PartitionID string
	Duplicate   bool
}

// FireTimers turns claimed timers into messages in one transaction: it
// deletes the rows still held by token and pushes one message each under
// its txn and promised message id. A timer no longer held is skipped.
// Nothing is delivered twice: the delete and the push commit together. A
// timer into a partition whose cached id went stale (deleted through
// another broker) fires at once, resolved afresh (names.Retry), not
// after its claim's lease. It uses only s.Store, s.Names and s.Cipher.
func (s *Sweeper) FireTimers(ctx context.Context, token string, claimed []store.ClaimedTimer) ([]FiredTimer, error) {
	if len(claimed) == 0 {
		return nil, nil
	}
	return names.Retry(s.Names, func() ([]FiredTimer, error) { return s.fireOnce(ctx, token, claimed) })
}

// fireOnce is one attempt of FireTimers: the timers' rows resolved before
// the transaction, then in it the delete of the claims still held and the
// append of those timers' rows.
func (s *Sweeper) fireOnce(ctx context.Context, token string, claimed []store.ClaimedTimer) ([]FiredTimer, error) {
	rows, err := s.Names.TimerRows(ctx, s.sealedTwice(claimed))
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.Store.Bound(ctx)
	defer cancel()
	var fired []FiredTimer
	err = pgx.BeginFunc(ctx, s.Store.Pool(), func(tx pgx.Tx) error {
		held, err := s.Store.DeleteClaimedTimers(ctx, tx, token, claimed)
		if err != nil {
			return err
		}
		var push []store.AppendRow
		var which []int
		for i := range claimed {
			if held[i] {
				push = append(push, rows[i])
				which = append(which, i)
			}
		}
		if len(push) == 0 {
			return nil
		}
		outs, err := s.Writes.AppendFiredInTx(ctx, tx, push)
		if err != nil {
			return err
		}
		for k, o := range outs {
			fired = append(fired, FiredTimer{ClaimedTimer: claimed[which[k]], PartitionID: push[k].PartitionID(), Duplicate: !o.Queued()})
		}
		return nil
	})
	// A failed COMMIT answers the timers it carried beside its error, as
	// the fire did inside queen/store: kept so behaviour does not move.
	return fired, err
}

// sealedTwice is claimed as the timer-seals-twice canary fires it, the
// planted bug: a sealed payload read as plain and sealed again, so a pop
// opens it only once. Without that canary (or a cipher) it is claimed.
func (s *Sweeper) sealedTwice(claimed []store.ClaimedTimer) []store.ClaimedTimer {
	if !canary.On("timer-seals-twice") || s.Cipher == nil {
		return claimed
	}
	out := append([]store.ClaimedTimer(nil), claimed...)
	for i, c := range out {
		if !c.Payload.Sealed() {
			continue
		}
		if again, err := s.Cipher.SealPayload(crypt.Plain(c.Payload.Raw())); err == nil {
			out[i].Payload = again
		}
	}
	return out
}
