package sweeper

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/store"
)

// TestOnlyDataErrorsArePoison: a timer is charged an attempt only when
// PostgreSQL refused its message for what it holds; a read-only server in a
// failover, a migration's missing column or a broker without the key must
// not mark every due timer failed.
func TestOnlyDataErrorsArePoison(t *testing.T) {
	for code, want := range map[string]bool{"54000": true, "22003": true, "23505": true, "22021": true,
		"25006": false, "42703": false, "57014": false, "08006": false, "40001": false} {
		if got := poisonous(&pgconn.PgError{Code: code}); got != want {
			t.Errorf("SQLSTATE %s: poisonous %v, want %v", code, got, want)
		}
	}
	if poisonous(&store.RefusedError{Reason: "no key"}) || poisonous(errors.New("connection reset")) {
		t.Error("a broker's own refusal or a connection error counted as the timer's fault")
	}
}
