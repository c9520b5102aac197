package storetest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// The dockertest fallback either starts a working server or says plainly
// that no Docker engine answers (as on these machines): never a hang and
// never a silent skip.
func TestDockerFallbackAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, purge, err := dockerPostgres(ctx)
	if err != nil {
		if !strings.Contains(err.Error(), "no Docker engine answers") {
			t.Fatalf("unexpected dockertest failure: %v", err)
		}
		t.Logf("as expected here: %v", err)
		return
	}
	defer purge()
	if dsn == "" {
		t.Fatal("a started container must come with a DSN")
	}
}

func TestEachTestGetsItsOwnDatabase(t *testing.T) {
	a, b := DSN(t), DSN(t)
	if a == b {
		t.Fatal("two calls returned the same database")
	}
}
