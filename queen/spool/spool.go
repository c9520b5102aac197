// Package spool is the on-disk buffer that keeps pushes alive while
// PostgreSQL is unreachable, and the drain that replays them exactly once
// when it is back.
//
// A push that cannot commit is appended to the active file
// (<dir>/<stamp>.tmp) and synced before the broker answers "buffered". The
// active file is finalized (renamed to .buf) when it reaches
// FILE_BUFFER_EVENTS_PER_FILE events and at every drain cycle; finalized
// files replay oldest first. Each event keeps its original transactionId,
// so an event that had in fact committed comes back duplicate and writes
// nothing, and the tenant resolved at push time (omitted for the default
// tenant). A batch PostgreSQL refuses is split record by record: the records
// it stores are dropped from the file, and the refused ones, after five
// failed attempts, move to <dir>/failed with a <name>.reasons.jsonl line each
// (SQLSTATE and message). A replay holds at most one batch per partition and
// DefaultReplayBytes of payload in memory, whatever the file's size.
//
// The spool is node-local and unreplicated: a broker drains only its own
// directory, there is no size cap and no maximum age, and replay is
// idempotent only as far back as deduplication reaches (the message rows).
package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

// DefaultTenant is omitted from events, so a single-tenant broker writes
// files without any tenant field.
const DefaultTenant = store.DefaultTenant

// Event is one buffered push item.
type Event struct {
	Tenant        string `json:"tenant,omitempty"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	TraceID       string `json:"traceId,omitempty"`
	// ProducerSub is the JWT sub the push was stamped with.
	ProducerSub string `json:"producerSub,omitempty"`
	// Encrypted: Payload is an envelope sealed with QUEEN_ENCRYPTION_KEY.
	Encrypted bool            `json:"encrypted,omitempty"`
	Payload   json.RawMessage `json:"payload"`
}

// Body is the event's payload as one value: sealed when Encrypted says so.
func (e Event) Body() crypt.Payload { return crypt.Stored(e.Payload, e.Encrypted) }

// SetBody stores p in the event, an empty one as JSON null.
func (e *Event) SetBody(p crypt.Payload) {
	e.Payload, e.Encrypted = p.Raw(), p.Sealed()
	if len(e.Payload) == 0 {
		e.Payload = json.RawMessage("null")
	}
}

// TenantOrDefault is the tenant an event replays under.
func (e Event) TenantOrDefault() string {
	if e.Tenant == "" {
		return DefaultTenant
	}
	return e.Tenant
}

// Options configure a Spool.
type Options struct {
	Dir           string
	FS            FS
	Clock         clock.Clock
	EventsPerFile int
	Log           *slog.Logger
}

// Spool is one broker's buffer directory.
type Spool struct {
	o Options

	mu          sync.Mutex
	active      File
	activeName  string
	activeCount int
	seq         int

	pending atomic.Int64 // events written and not yet replayed
	healthy atomic.Bool  // false from a database failure until a replay or ping succeeds
	paused  atomic.Bool  // push maintenance: the drain waits
}

// Open prepares dir (and dir/failed), finalizes any .tmp left by a crash,
// and counts the events waiting to replay.
func Open(o Options) (*Spool, error) {
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.EventsPerFile < 1 {
		o.EventsPerFile = 10000
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Spool{o: o}
	s.healthy.Store(true)
	if err := o.FS.MkdirAll(s.FailedDir()); err != nil {
		return nil, fmt.Errorf("spool %s: %w", o.Dir, err)
	}
	names, err := o.FS.List(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", o.Dir, err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".tmp") {
			if err := o.FS.Rename(name, strings.TrimSuffix(name, ".tmp")+".buf"); err != nil {
				return nil, fmt.Errorf("spool finalize leftover %s: %w", name, err)
			}
			o.Log.Info("spool: finalized a file left by a previous run", "file", name)
		}
		if strings.HasSuffix(name, ".split") {
			// A rewrite cut short by a crash: the .buf beside it is whole.
			if err := o.FS.Remove(name); err != nil {
				return nil, fmt.Errorf("spool remove leftover %s: %w", name, err)
			}
		}
	}
	if err := o.FS.SyncDir(o.Dir); err != nil {
		return nil, fmt.Errorf("spool sync dir %s: %w", o.Dir, err)
	}
	files, err := s.Buffers()
	if err != nil {
		return nil, err
	}
	// New files continue the sequence of the names already there, so replay
	// order (by name) is write order whatever the wall clock does.
	for _, f := range files {
		if n := fileSeq(f); n > s.seq {
			s.seq = n
		}
	}
	for _, f := range files {
		s.pending.Add(int64(s.count(f)))
	}
	if n := s.pending.Load(); n > 0 {
		o.Log.Info("spool: events waiting to replay", "events", n, "files", len(files))
	}
	return s, nil
}

// fileSeq is the number a spool file's name starts with: the write
// sequence ("00000000000000000042.buf"), or, for files written before
// names were sequences, the creation time in nanoseconds
// ("<nanos>-<n>.buf"), which new sequence numbers continue after.
func fileSeq(name string) int {
	base := filepath.Base(name)
	if i := strings.IndexAny(base, "-."); i > 0 {
		base = base[:i]
	}
	n, _ := strconv.Atoi(base)
	return n
}

// Dir is the spool directory.
func (s *Spool) Dir() string { return s.o.Dir }

// FailedDir holds quarantined files.
func (s *Spool) FailedDir() string { return filepath.Join(s.o.Dir, "failed") }

// Append writes events as one write and syncs, so a "buffered" answer is
// durable. After a failed write or sync the active file is abandoned (it is
// finalized with whatever intact records it holds) and the next append
// starts a new one, so a torn record can only ever be a file's tail.
func (s *Spool) Append(events []Event) error {
	buf, err := Encode(events)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		s.seq++
		name := filepath.Join(s.o.Dir, fmt.Sprintf("%020d.tmp", s.seq))
		f, err := s.o.FS.Create(name)
		if err != nil {
			return fmt.Errorf("spool create %s: %w", name, err)
		}
		if err := s.o.FS.SyncDir(s.o.Dir); err != nil {
			_ = f.Close()
			_ = s.o.FS.Remove(name)
			return fmt.Errorf("spool sync dir %s: %w", s.o.Dir, err)
		}
		s.active, s.activeName, s.activeCount = f, name, 0
	}
	if _, err := s.active.Write(buf); err != nil {
		s.abandonLocked()
		return fmt.Errorf("spool append %s: %w", s.activeName, err)
	}
	if err := s.active.Sync(); err != nil {
		s.abandonLocked()
		return fmt.Errorf("spool sync %s: %w", s.activeName, err)
	}
	s.activeCount += len(events)
	s.pending.Add(int64(len(events)))
	if s.activeCount >= s.o.EventsPerFile {
		return s.finalizeLocked()
	}
	return nil
}

// abandonLocked closes the active file after a failed write; it is
// finalized like any other so its intact records still replay.
func (s *Spool) abandonLocked() {
	_ = s.finalizeLocked()
}

// Finalize makes the active file drainable.
func (s *Spool) Finalize() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finalizeLocked()
}

func (s *Spool) finalizeLocked() error {
	if s.active == nil {
		return nil
	}
	f, name := s.active, s.activeName
	s.active, s.activeName, s.activeCount = nil, "", 0
	_ = f.Close()
	if err := s.o.FS.Rename(name, strings.TrimSuffix(name, ".tmp")+".buf"); err != nil {
		return fmt.Errorf("spool finalize %s: %w", name, err)
	}
	if err := s.o.FS.SyncDir(s.o.Dir); err != nil {
		return fmt.Errorf("spool sync dir %s: %w", s.o.Dir, err)
	}
	return nil
}

// Buffers lists finalized files, oldest first.
func (s *Spool) Buffers() ([]string, error) {
	names, err := s.o.FS.List(s.o.Dir)
	if err != nil {
		return nil, fmt.Errorf("spool list %s: %w", s.o.Dir, err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".buf") {
			out = append(out, n)
		}
	}
	return out, nil
}

// scan decodes a file's events one at a time, in order, calling fn for
// each; memory is one record, whatever the file's size. A torn tail ends the
// file (torn=true); an unreadable file or an undecodable record is an error,
// as is any error fn returns.
func (s *Spool) scan(name string, fn func(Event) error) (n int, torn bool, err error) {
	r, err := s.o.FS.Open(name)
	if err != nil {
		return 0, false, fmt.Errorf("spool open %s: %w", name, err)
	}
	defer r.Close()
	rr := newRecordReader(r)
	for {
		rec, err := rr.next()
		if err == io.EOF {
			return n, rr.torn, nil
		}
		if err != nil {
			return n, false, fmt.Errorf("spool read %s: %w", name, err)
		}
		var e Event
		if err := json.Unmarshal(rec, &e); err != nil {
			return n, false, fmt.Errorf("spool decode %s record %d: %w", name, n, err)
		}
		if fn != nil {
			if err := fn(e); err != nil {
				return n, false, err
			}
		}
		n++
	}
}

// count is the number of intact events in a file (0 if it cannot be read).
func (s *Spool) count(name string) int {
	n, _, _ := s.scan(name, nil)
	return n
}

// Encode is the bytes Append writes for events: one record each, the
// default tenant omitted. Fault injection uses it to plant records.
func Encode(events []Event) ([]byte, error) {
	var buf []byte
	for _, e := range events {
		if e.Tenant == DefaultTenant {
			e.Tenant = ""
		}
		raw, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("spool encode: %w", err)
		}
		buf = appendRecord(buf, raw)
	}
	return buf, nil
}

// writeFile writes data to a new file name durably: created fresh (a
// leftover of a crash is removed first), synced, closed, directory synced.
func (s *Spool) writeFile(name string, data []byte) error {
	if err := s.o.FS.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool remove leftover %s: %w", name, err)
	}
	f, err := s.o.FS.Create(name)
	if err != nil {
		return fmt.Errorf("spool create %s: %w", name, err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = s.o.FS.Remove(name)
		return fmt.Errorf("spool write %s: %w", name, werr)
	}
	return s.o.FS.SyncDir(filepath.Dir(name))
}

// rewrite replaces a finalized file by one holding only events (the records
// a replay could not store), atomically: the new content is written beside
// it as .split and renamed over it, so a crash leaves either whole file.
func (s *Spool) rewrite(name string, events []Event) error {
	data, err := Encode(events)
	if err != nil {
		return err
	}
	tmp := strings.TrimSuffix(name, ".buf") + ".split"
	if err := s.writeFile(tmp, data); err != nil {
		return err
	}
	if err := s.o.FS.Rename(tmp, name); err != nil {
		return fmt.Errorf("spool rewrite %s: %w", name, err)
	}
	return s.o.FS.SyncDir(s.o.Dir)
}

// Pending is the number of events waiting to replay, as counted by appends
// and replays. Records the counter never saw (intact records of a write
// that failed, a record planted by a test) can make it drift; the drain
// resets it whenever nothing is left on disk. Waiting reads the files.
func (s *Spool) Pending() int64 { return max(s.pending.Load(), 0) }

// Waiting counts the intact events on disk that have yet to replay, in
// every finalized file and the active one, by reading them all.
func (s *Spool) Waiting() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.o.FS.List(s.o.Dir)
	if err != nil {
		return 0, fmt.Errorf("spool list %s: %w", s.o.Dir, err)
	}
	var n int64
	for _, name := range names {
		if strings.HasSuffix(name, ".buf") || strings.HasSuffix(name, ".tmp") {
			n += int64(s.count(name))
		}
	}
	return n, nil
}

// settle resets the pending count when nothing waits on disk (no finalized
// file, no active one), so a drifted counter does not outlive its files.
func (s *Spool) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != nil {
		return
	}
	if files, err := s.Buffers(); err == nil && len(files) == 0 {
		s.pending.Store(0)
	}
}

// reasonsSuffix names the file beside a quarantined one that says, per
// record, why PostgreSQL refused it.
const reasonsSuffix = ".reasons.jsonl"

// Failed counts quarantined files.
func (s *Spool) Failed() int {
	names, err := s.o.FS.List(s.FailedDir())
	if err != nil {
		return 0
	}
	n := 0
	for _, name := range names {
		if !strings.HasSuffix(name, reasonsSuffix) {
			n++
		}
	}
	return n
}

// FailedBytes sums the sizes of quarantined files (OS filesystem only).
func (s *Spool) FailedBytes() int64 {
	names, _ := s.o.FS.List(s.FailedDir())
	var n int64
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Healthy is the push path's hint: false from a database failure until the
// drain sees the database answer again. While false, pushes go straight to
// the spool instead of waiting out a timeout each.
func (s *Spool) Healthy() bool { return s.healthy.Load() }

// SetHealthy records the database's state as last observed.
func (s *Spool) SetHealthy(ok bool) {
	if s.healthy.Swap(ok) != ok {
		s.o.Log.Warn("spool: database health changed", "healthy", ok)
	}
}

// Paused reports whether the drain is paused (push maintenance).
func (s *Spool) Paused() bool { return s.paused.Load() }

// SetPaused pauses or resumes the drain; resuming finalizes the active file
// so everything buffered during the pause replays.
func (s *Spool) SetPaused(p bool) error {
	s.paused.Store(p)
	if !p {
		return s.Finalize()
	}
	return nil
}

// Close finalizes the active file.
func (s *Spool) Close() error { return s.Finalize() }

// QuarantinedFile is a spool file the drain set aside, with what
// PostgreSQL refused in it (the reasons file the drain wrote beside it).
type QuarantinedFile struct {
	Name    string     `json:"name"`
	Reasons []Rejected `json:"reasons"`
}

// maxReasonsShown bounds the reasons read per quarantined file.
const maxReasonsShown = 100

// Quarantined lists the quarantined files, oldest first, each with up to
// maxReasonsShown reasons.
func (s *Spool) Quarantined() ([]QuarantinedFile, error) {
	names, err := s.o.FS.List(s.FailedDir())
	if err != nil {
		return nil, err
	}
	out := []QuarantinedFile{}
	for _, name := range names {
		if strings.HasSuffix(name, reasonsSuffix) {
			continue
		}
		q := QuarantinedFile{Name: name, Reasons: []Rejected{}}
		if f, err := s.o.FS.Open(filepath.Join(s.FailedDir(), strings.TrimSuffix(name, ".buf")+reasonsSuffix)); err == nil {
			dec := json.NewDecoder(f)
			for len(q.Reasons) < maxReasonsShown {
				var r Rejected
				if dec.Decode(&r) != nil {
					break
				}
				q.Reasons = append(q.Reasons, r)
			}
			_ = f.Close()
		}
		out = append(out, q)
	}
	return out, nil
}
