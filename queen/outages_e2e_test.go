package queen_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// databaseRecord is status/buffers' database object, as the failover page
// reads it.
type databaseRecord struct {
	ServerID, Server   string
	Writable, ReadOnly bool
	Paused, LastPause  *writesPause
	Pauses             []writesPause
	ServerChanges      []json.RawMessage
}

type writesPause struct {
	Kinds                     []string
	From                      string
	To                        *string
	PausedMs                  int64
	ServerBefore, ServerAfter string
	ServerChanged             bool
}

func databaseOf(t *testing.T, base string) databaseRecord {
	t.Helper()
	_, body := do(t, "GET", base+"/api/v1/status/buffers", "", "")
	var st struct{ Database *databaseRecord }
	if err := json.Unmarshal(body, &st); err != nil || st.Database == nil {
		t.Fatalf("status/buffers has no database record: %v %s", err, body)
	}
	return *st.Database
}

// TestFailoverRecordSeesAReadOnlyPeriod: the broker's address points at a
// read-only server for a while. GET /api/v1/status/buffers says, from the
// broker's own record, the server it is connected to, that writes pause
// while it lasts, and afterwards the pause (read-only, from, to, how long,
// the same server before and after).
func TestFailoverRecordSeesAReadOnlyPeriod(t *testing.T) {
	b, proxy := brokerBehindProxy(t)
	base := "http://" + b.Addr()
	server := fmt.Sprintf("127.0.0.1:%d", proxy.Port())
	if d := databaseOf(t, base); d.Server != server || !d.Writable || d.Paused != nil || d.LastPause != nil || len(d.Pauses) != 0 || d.ServerID == "" {
		t.Fatalf("before: %+v", d)
	}
	proxy.SetReadOnly(true)
	time.Sleep(1100 * time.Millisecond) // past pgxpool's idle ping, as in TestReadOnlyDatabaseIsAnOutage
	if s := pushOne(t, base, tenantA, "fo-during"); s != "buffered" {
		t.Fatalf("push to a read-only database answered %s", s)
	}
	d := databaseOf(t, base)
	if d.Writable || !d.ReadOnly || d.Paused == nil || !slices.Contains(d.Paused.Kinds, "read-only") || d.Paused.To != nil {
		t.Fatalf("while read-only: %+v %+v", d, d.Paused)
	}
	time.Sleep(300 * time.Millisecond)
	proxy.SetReadOnly(false)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if d = databaseOf(t, base); d.Paused == nil && d.Writable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes still paused once writable: %+v %+v", d, d.Paused)
		}
	}
	p := d.LastPause
	if p == nil || len(d.Pauses) != 1 || !slices.Contains(p.Kinds, "read-only") || p.To == nil || p.PausedMs < 300 ||
		p.ServerBefore != server || p.ServerAfter != server || p.ServerChanged {
		t.Fatalf("after: %+v %+v", d, p)
	}
	t.Logf("writes paused %d ms (%v)", p.PausedMs, p.Kinds)
}
