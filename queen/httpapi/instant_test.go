package httpapi

import (
	"testing"
	"time"
)

// Timestamps as clients send them: Python's isoformat() of a naive
// datetime has no zone (UTC here, as PostgreSQL reads it in a UTC
// session), and a space may stand for the T.
func TestParseInstantTakesWhatPostgreSQLTakes(t *testing.T) {
	want := time.Date(2025, 11, 10, 10, 0, 0, 0, time.UTC)
	for _, v := range []string{
		"2025-11-10T10:00:00Z", "2025-11-10T11:00:00+01:00", "2025-11-10T11:00:00+0100", "2025-11-10T11:00:00+01",
		"2025-11-10T10:00:00", "2025-11-10 10:00:00", "2025-11-10 10:00:00.000000", " 2025-11-10T10:00 ", "2025-11-10T10:00Z", "2025-11-10T11:00+01:00",
	} {
		got, err := parseInstant(v)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", v, got, err, want)
		}
	}
	if got, err := parseInstant("2025-11-10"); err != nil || !got.Equal(want.Add(-10*time.Hour)) {
		t.Errorf("a bare date: %v %v", got, err)
	}
	for _, v := range []string{"", "yesterday", "10:00", "2025-13-01T00:00:00Z", "1731232800000"} {
		if _, err := parseInstant(v); err == nil {
			t.Errorf("%q was taken as a timestamp", v)
		}
	}
}
