package httpapi

import (
	"time"

	"github.com/queen-go/queen/queen/outages"
)

// databaseRecord is the answering broker's record of its database
// (queen/outages), in GET /api/v1/status/buffers: the server its pool is
// connected to, whether writes pause now, and the pauses and server
// changes it saw since it started (in memory: a restart forgets them).
// Server addresses are an admin's, as the mesh's links are.
type databaseRecord struct {
	ServerID       string         `json:"serverId"`       // the broker answering
	RecordingSince string         `json:"recordingSince"` // its start
	Server         *string        `json:"server"`         // host:port; null before the first connection, or not an admin
	ServerSince    *string        `json:"serverSince"`
	Writable       bool           `json:"writable"` // neither read-only nor unavailable, as last seen
	ReadOnly       bool           `json:"readOnly"`
	Unavailable    bool           `json:"unavailable"` // seen by the spool's drain; false without a spool
	Paused         *writesPause   `json:"paused"`      // writes pause now
	LastPause      *writesPause   `json:"lastPause"`   // the newest ended pause: a failover, a restart
	Pauses         []writesPause  `json:"pauses"`      // ended, newest first, at most outages.Keep
	ServerChanges  []serverChange `json:"serverChanges"`
}

// writesPause is a time this broker's writes paused: what it saw
// (read-only, unavailable), from, to (null while it lasts) and how long.
type writesPause struct {
	Kinds         []string `json:"kinds"`
	From          string   `json:"from"`
	To            *string  `json:"to"`
	PausedMs      int64    `json:"pausedMs"` // until now while it lasts
	ServerBefore  *string  `json:"serverBefore"`
	ServerAfter   *string  `json:"serverAfter"`
	ServerChanged bool     `json:"serverChanged"` // the pool came back on another server
}

// serverChange is the pool connecting to another server; DuringPause:
// while writes paused (a failover), not a reconnect.
type serverChange struct {
	At          string  `json:"at"`
	From        *string `json:"from"`
	To          *string `json:"to"`
	DuringPause bool    `json:"duringPause"`
}

func newDatabaseRecord(self string, v outages.View, now time.Time, admin bool) *databaseRecord {
	addr := func(s string) *string {
		if !admin || s == "" {
			return nil
		}
		return &s
	}
	d := &databaseRecord{ServerID: self, RecordingSince: msStamp(v.Since), Server: addr(v.Server),
		Writable: !v.ReadOnly && !v.Unavailable && v.Server != "", ReadOnly: v.ReadOnly, Unavailable: v.Unavailable,
		Pauses: make([]writesPause, 0, len(v.Periods)), ServerChanges: []serverChange{}}
	if !v.ServerSince.IsZero() {
		d.ServerSince = msStampOrNull(&v.ServerSince)
	}
	pause := func(p outages.Period) writesPause {
		w := writesPause{Kinds: p.Kinds, From: msStamp(p.From), ServerBefore: addr(p.ServerBefore), ServerAfter: addr(p.ServerAfter),
			ServerChanged: p.ServerAfter != "" && p.ServerAfter != p.ServerBefore}
		end := now
		if !p.To.IsZero() {
			w.To, end = msStampOrNull(&p.To), p.To
		}
		w.PausedMs = end.Sub(p.From).Milliseconds()
		return w
	}
	if v.Open != nil {
		p := pause(*v.Open)
		d.Paused = &p
	}
	for i := len(v.Periods) - 1; i >= 0; i-- {
		d.Pauses = append(d.Pauses, pause(v.Periods[i]))
	}
	if len(d.Pauses) > 0 {
		d.LastPause = &d.Pauses[0]
	}
	for i := len(v.Changes) - 1; i >= 0; i-- {
		c := v.Changes[i]
		d.ServerChanges = append(d.ServerChanges, serverChange{At: msStamp(c.At), From: addr(c.From), To: addr(c.To), DuringPause: c.DuringPause})
	}
	return d
}
