package httpapi

import (
	"fmt"
	"strings"
	"time"
)

// instantLayouts are the timestamp forms Queen's brokers accept, since they
// hand the string to PostgreSQL's timestamptz input: RFC 3339, a space for
// the T, a zone as Z, ±hh:mm, ±hhmm or ±hh, or no zone at all (UTC here;
// Python's datetime.isoformat() of a naive datetime gives one), and a bare
// date (its midnight, UTC).
var instantLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999Z07",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04",
	"2006-01-02",
}

// parseInstant reads a timestamp in any of instantLayouts.
func parseInstant(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if len(v) > 10 && v[10] == ' ' {
		v = v[:10] + "T" + v[11:]
	}
	for _, layout := range instantLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a timestamp (RFC 3339, e.g. 2025-11-10T10:00:00Z)", v)
}
