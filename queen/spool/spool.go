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
// A record that fails its checksum with data after it is corruption, not a
// torn tail: the records after it are read on and stored, and the damaged
// bytes go to <dir>/failed/<name>.corrupt with a reason line each (see
// record.go). A file is never deleted while it holds a record that was
// neither stored nor quarantined.
//
// A failure of the spool's own filesystem (a file that cannot be read,
// renamed or removed) is the spool's, never the database's: it does not
// make the spool unhealthy (which would send every push to that same disk),
// and the drain backs off instead of replaying the same file again.
//
// The directory is the broker's alone: Open takes an exclusive lock on
// <dir>/LOCK for the process's life, so a second broker on the same
// directory refuses to start, naming the holder; the directory is 0700 and
// every file in it 0600.
//
// The spool is node-local and unreplicated: a broker drains only its own
// directory, there is no size cap and no maximum age, and replay is
// idempotent only as far back as deduplication reaches (the message rows).
package spool

import (
	"bytes"
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
	"time"

	"github.com/queen-go/queen/queen/canary"
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
	// Holder says who this spool belongs to (server id, listen address),
	// for the error a second broker on the same directory gets; the lock
	// adds the pid, host and start time.
	Holder string
	// OnHealth, when set, is told each time the database's observed
	// health flips (the broker's outage record).
	OnHealth func(healthy bool)
}

// ErrLocked: another broker (or another Spool in this process) holds the
// directory.
var ErrLocked = errors.New("spool: directory in use by another broker")

// Spool is one broker's buffer directory.
type Spool struct {
	o Options

	mu          sync.Mutex
	active      File
	activeName  string
	activeCount int
	seq         int
	// unfinalized are closed .tmp files a rename to .buf failed for (the
	// filesystem refused); each Finalize retries them.
	unfinalized []string
	lock        io.Closer // the directory's lock; nil without a Locker
	closed      bool

	pending atomic.Int64 // events written and not yet replayed
	healthy atomic.Bool  // false from a database failure until a replay or ping succeeds
	paused  atomic.Bool  // push maintenance: the drain waits
}

// Open locks dir, prepares it (and dir/failed) private to this user,
// finalizes any .tmp left by a crash, and counts the events waiting to
// replay. The lock is taken before any file is touched: a .tmp another
// live broker is appending to is never finalized under it.
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
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	s := &Spool{o: o}
	s.healthy.Store(true)
	if err := o.FS.MkdirAll(o.Dir); err != nil {
		return nil, fmt.Errorf("spool %s: %w", o.Dir, err)
	}
	if l, ok := o.FS.(Locker); ok && !canary.On("spool-lock-off") {
		lock, err := l.Lock(o.Dir, s.holder())
		if err != nil {
			return nil, err
		}
		s.lock = lock
	}
	if err := s.recover(); err != nil {
		s.unlock()
		return nil, err
	}
	return s, nil
}

// holder is what the lock file says about this spool's process.
func (s *Spool) holder() string {
	host, _ := os.Hostname()
	h := fmt.Sprintf("pid=%d host=%s started=%s", os.Getpid(), host, s.o.Clock.Now().UTC().Format(time.RFC3339))
	if s.o.Holder != "" {
		h += " " + s.o.Holder
	}
	return h
}

// recover runs at Open, under the lock: failed/ is made, files left by a
// crash are finalized or removed, and the sequence and pending count pick
// up from what is on disk.
func (s *Spool) recover() error {
	o := s.o
	if err := o.FS.MkdirAll(s.FailedDir()); err != nil {
		return fmt.Errorf("spool %s: %w", s.FailedDir(), err)
	}
	names, err := o.FS.List(o.Dir)
	if err != nil {
		return fmt.Errorf("spool %s: %w", o.Dir, err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".tmp") {
			if err := o.FS.Rename(name, strings.TrimSuffix(name, ".tmp")+".buf"); err != nil {
				return fmt.Errorf("spool finalize leftover %s: %w", name, err)
			}
			o.Log.Info("spool: finalized a file left by a previous run", "file", name)
		}
		if strings.HasSuffix(name, ".split") {
			// A rewrite cut short by a crash: the .buf beside it is whole.
			if err := o.FS.Remove(name); err != nil {
				return fmt.Errorf("spool remove leftover %s: %w", name, err)
			}
		}
	}
	if err := o.FS.SyncDir(o.Dir); err != nil {
		return fmt.Errorf("spool sync dir %s: %w", o.Dir, err)
	}
	files, err := s.Buffers()
	if err != nil {
		return err
	}
	// New files continue the sequence of the names already there, so replay
	// order (by name) is write order whatever the wall clock does; the
	// quarantined ones count too, so a new file never takes the name of
	// one in failed/.
	failed, _ := o.FS.List(s.FailedDir())
	for _, f := range append(failed, files...) {
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
	return nil
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
	if s.closed {
		return fmt.Errorf("spool %s: closed", s.o.Dir)
	}
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
	// The name is taken first: abandoning the file forgets it, and the
	// error (which the push answers with) must say which file failed.
	name := s.activeName
	if _, err := s.active.Write(buf); err != nil {
		s.abandonLocked()
		return fmt.Errorf("spool append %s: %w", name, err)
	}
	if err := s.active.Sync(); err != nil {
		s.abandonLocked()
		return fmt.Errorf("spool sync %s: %w", name, err)
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

// finalizeLocked closes the active file and renames it, and any file an
// earlier rename failed for, to .buf. A file whose rename fails stays .tmp
// (its records are safe) and is retried by the next Finalize, so a
// filesystem that refused for a while does not strand it until a restart.
func (s *Spool) finalizeLocked() error {
	if s.active != nil {
		_ = s.active.Close()
		s.unfinalized = append(s.unfinalized, s.activeName)
		s.active, s.activeName, s.activeCount = nil, "", 0
	}
	if len(s.unfinalized) == 0 {
		return nil
	}
	var errs []error
	left := s.unfinalized[:0]
	for _, name := range s.unfinalized {
		if err := s.o.FS.Rename(name, strings.TrimSuffix(name, ".tmp")+".buf"); err != nil {
			left = append(left, name)
			errs = append(errs, fmt.Errorf("spool finalize %s: %w", name, err))
		}
	}
	renamed := len(left) < len(s.unfinalized)
	s.unfinalized = left
	if renamed {
		if err := s.o.FS.SyncDir(s.o.Dir); err != nil {
			errs = append(errs, fmt.Errorf("spool sync dir %s: %w", s.o.Dir, err))
		}
	}
	return errors.Join(errs...)
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

// scanned is what reading one spool file found.
type scanned struct {
	events  int      // intact events, each passed to fn
	torn    bool     // it ended in a record cut short, which was dropped
	tornAt  int64    // where that record started
	damaged []damage // bytes holding no intact event: to quarantine
}

// scan decodes a file's events one at a time, in order, calling fn for
// each; memory is one record, whatever the file's size. Damaged records
// (and records that do not decode) are skipped and reported, never the end
// of the file; a torn tail is. An error is the file's opening or reading
// failing, or fn's.
func (s *Spool) scan(name string, fn func(Event) error) (scanned, error) {
	var sc scanned
	r, err := s.o.FS.Open(name)
	if err != nil {
		return sc, fmt.Errorf("spool open %s: %w", name, err)
	}
	defer r.Close()
	ra, size, err := randomAccess(r)
	if err != nil {
		return sc, fmt.Errorf("spool read %s: %w", name, err)
	}
	rr := newRecordReader(ra, size)
	for {
		rec, off, err := rr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return sc, fmt.Errorf("spool read %s: %w", name, err)
		}
		var e Event
		if err := json.Unmarshal(rec, &e); err != nil {
			rr.reject(off, headerLen+int64(len(rec)), fmt.Sprintf("record at offset %d does not decode: %v", off, err))
			continue
		}
		if fn != nil {
			if err := fn(e); err != nil {
				return sc, err
			}
		}
		sc.events++
	}
	sc.torn, sc.tornAt, sc.damaged = rr.torn, rr.tornAt, rr.damaged
	return sc, nil
}

// randomAccess gives the reader the random access resynchronising needs:
// the file itself when it has it (OSFS, and the fault FS over it), else its
// bytes read into memory.
func randomAccess(r io.Reader) (io.ReaderAt, int64, error) {
	if f, ok := r.(interface {
		io.ReaderAt
		Stat() (fs.FileInfo, error)
	}); ok {
		fi, err := f.Stat()
		if err != nil {
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
	data, err := io.ReadAll(r)
	return bytes.NewReader(data), int64(len(data)), err
}

// count is the number of intact events in a file (0 if it cannot be read).
func (s *Spool) count(name string) int {
	sc, _ := s.scan(name, nil)
	return sc.events
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
	return s.writeFileFrom(name, bytes.NewReader(data))
}

// writeFileFrom is writeFile for content streamed from r.
func (s *Spool) writeFileFrom(name string, r io.Reader) error {
	if err := s.o.FS.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool remove leftover %s: %w", name, err)
	}
	f, err := s.o.FS.Create(name)
	if err != nil {
		return fmt.Errorf("spool create %s: %w", name, err)
	}
	_, werr := io.Copy(f, r)
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
	if err := s.o.FS.SyncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("spool sync dir %s (after writing %s): %w", filepath.Dir(name), name, err)
	}
	return nil
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
	if err := s.o.FS.SyncDir(s.o.Dir); err != nil {
		return fmt.Errorf("spool sync dir %s (after rewriting %s): %w", s.o.Dir, name, err)
	}
	return nil
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
// record, why PostgreSQL refused it (or, beside a .corrupt file, what was
// damaged where).
const reasonsSuffix = ".reasons.jsonl"

// corruptSuffix names the file in failed/ that holds a spool file's
// damaged bytes, raw and in file order.
const corruptSuffix = ".corrupt"

// quarantineDamage copies a file's damaged bytes to failed/<stem>.corrupt
// and writes a reasons line per damaged run (what was wrong, at which
// offset of the original file, how many bytes), durably: only then may the
// file be removed or rewritten without them.
func (s *Spool) quarantineDamage(name string, dmg []damage) (string, error) {
	dst := filepath.Join(s.FailedDir(), strings.TrimSuffix(filepath.Base(name), ".buf")+corruptSuffix)
	r, err := s.o.FS.Open(name)
	if err != nil {
		return dst, fmt.Errorf("spool open %s: %w", name, err)
	}
	defer r.Close()
	ra, _, err := randomAccess(r)
	if err != nil {
		return dst, fmt.Errorf("spool read %s: %w", name, err)
	}
	parts := make([]io.Reader, len(dmg))
	var why []byte
	for i, d := range dmg {
		parts[i] = io.NewSectionReader(ra, d.Offset, d.Length)
		line, err := json.Marshal(Rejected{Reason: fmt.Sprintf("%s (%d bytes of %s)", d.Reason, d.Length, filepath.Base(name))})
		if err != nil {
			return dst, err
		}
		why = append(append(why, line...), '\n')
	}
	if err := s.writeFileFrom(dst, io.MultiReader(parts...)); err != nil {
		return dst, err
	}
	return dst, s.writeFile(dst+reasonsSuffix, why)
}

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
		if s.o.OnHealth != nil {
			s.o.OnHealth(ok)
		}
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

// Close finalizes the active file and releases the directory's lock; the
// spool takes no more appends.
func (s *Spool) Close() error {
	err := s.Finalize()
	s.unlock()
	return err
}

// Abandon lets the spool go as a killed process would: the active file is
// closed but stays .tmp (the next Open finalizes it), and the lock is
// released. For Broker.Crash and a failed start.
func (s *Spool) Abandon() {
	s.mu.Lock()
	if s.active != nil {
		_ = s.active.Close()
		s.active, s.activeName, s.activeCount = nil, "", 0
	}
	s.mu.Unlock()
	s.unlock()
}

// unlock releases the directory's lock (once) and refuses later appends.
func (s *Spool) unlock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.lock != nil {
		_ = s.lock.Close()
		s.lock = nil
	}
}

// QuarantinedFile is a file the drain set aside in failed/ (its name
// there): a spool file with what PostgreSQL refused in it, or a .corrupt
// file of damaged bytes with what was wrong where (the reasons file the
// drain wrote beside it).
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
		q := QuarantinedFile{Name: filepath.Base(name), Reasons: []Rejected{}}
		// List returns full paths: the reasons file is beside name.
		if f, err := s.o.FS.Open(strings.TrimSuffix(name, ".buf") + reasonsSuffix); err == nil {
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
