package faults

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/queen-go/queen/queen/spool"
)

// ErrNoSpace and ErrIO are the errors a FaultyFS injects.
var (
	ErrNoSpace = &os.PathError{Op: "write", Path: "(injected)", Err: syscall.ENOSPC}
	ErrIO      = &os.PathError{Op: "write", Path: "(injected)", Err: syscall.EIO}
)

// FaultyFS wraps a spool.FS and fails operations on demand. It also tracks
// how much of each file was synced, so Crash can drop what was not, as a
// power loss would.
type FaultyFS struct {
	Base spool.FS

	mu      sync.Mutex
	pending map[string][]fault // op -> queued faults
	synced  map[string]int64   // file -> bytes known durable
	written map[string]int64   // file -> bytes written
	fired   map[string]int
	inject  [][]byte // bytes the next appends to active files carry
	// corrupt is how many more finalized files get a record damaged;
	// corrupted are the records damaged so far, not yet taken.
	corrupt   int
	corrupted []CorruptRecord
}

// CorruptRecord is a record CorruptNextFinalized damaged: which file, its
// index there, and the event it held before the damage.
type CorruptRecord struct {
	File  string
	Index int
	Event spool.Event
}

type fault struct {
	err  error
	torn bool
}

// NewFaultyFS wraps base.
func NewFaultyFS(base spool.FS) *FaultyFS {
	return &FaultyFS{Base: base, pending: map[string][]fault{}, synced: map[string]int64{},
		written: map[string]int64{}, fired: map[string]int{}}
}

// FailNext makes the next count calls of op (create, write, sync, rename,
// remove, open, list) return err.
func (f *FaultyFS) FailNext(op string, err error, count int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < count; i++ {
		f.pending[op] = append(f.pending[op], fault{err: err})
	}
}

// TearNextWrite makes the next write store only half its bytes and fail
// with EIO.
func (f *FaultyFS) TearNextWrite() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending["write"] = append(f.pending["write"], fault{err: ErrIO, torn: true})
}

// InjectNextAppend makes the next write to an active spool file (.tmp)
// carry data before its own bytes, as if one more record had been written
// just ahead of them: a way to put a record beside real clients' records.
func (f *FaultyFS) InjectNextAppend(data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inject = append(f.inject, data)
}

// takeInjection returns the bytes to add to a write to name, if any.
func (f *FaultyFS) takeInjection(name string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.inject) == 0 || !strings.HasSuffix(name, ".tmp") {
		return nil
	}
	data := f.inject[0]
	f.inject = f.inject[1:]
	f.fired["spool.injected"]++
	return data
}

// Fired reports the injected faults by name (spool.enospc, spool.eio,
// spool.torn, spool.lost-unsynced, spool.injected, spool.corrupted).
func (f *FaultyFS) Fired() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.fired {
		out[k] = v
	}
	return out
}

func (f *FaultyFS) take(op string) (fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.pending[op]
	if len(q) == 0 {
		return fault{}, false
	}
	f.pending[op] = q[1:]
	name := "spool.eio"
	switch {
	case q[0].torn:
		name = "spool.torn"
	case errors.Is(q[0].err, syscall.ENOSPC):
		name = "spool.enospc"
	}
	f.fired[name]++
	return q[0], true
}

// Crash truncates every written file to its last synced length.
func (f *FaultyFS) Crash() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, n := range f.written {
		if n > f.synced[name] {
			if err := os.Truncate(name, f.synced[name]); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			f.fired["spool.lost-unsynced"]++
		}
	}
	f.written = map[string]int64{}
	f.synced = map[string]int64{}
	return nil
}

// MkdirAll implements spool.FS.
func (f *FaultyFS) MkdirAll(dir string) error { return f.Base.MkdirAll(dir) }

// SyncDir implements spool.FS.
func (f *FaultyFS) SyncDir(dir string) error { return f.Base.SyncDir(dir) }

// Create implements spool.FS.
func (f *FaultyFS) Create(name string) (spool.File, error) {
	if ft, ok := f.take("create"); ok {
		return nil, ft.err
	}
	file, err := f.Base.Create(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if _, tracked := f.written[name]; !tracked {
		// Bytes already on disk before we watched are taken as durable.
		if fi, err := os.Stat(name); err == nil {
			f.written[name], f.synced[name] = fi.Size(), fi.Size()
		}
	}
	f.mu.Unlock()
	return &faultyFile{File: file, fs: f}, nil
}

// Open implements spool.FS.
func (f *FaultyFS) Open(name string) (io.ReadCloser, error) {
	if ft, ok := f.take("open"); ok {
		return nil, ft.err
	}
	return f.Base.Open(name)
}

// Rename implements spool.FS.
func (f *FaultyFS) Rename(oldName, newName string) error {
	if ft, ok := f.take("rename"); ok {
		return ft.err
	}
	if err := f.Base.Rename(oldName, newName); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.written[oldName]; ok {
		f.written[newName], f.synced[newName] = n, f.synced[oldName]
		delete(f.written, oldName)
		delete(f.synced, oldName)
	}
	if f.corrupt > 0 && strings.HasSuffix(oldName, ".tmp") && strings.HasSuffix(newName, ".buf") {
		// Damaged as it becomes drainable, so no drain can read it
		// before the damage: the disk rotted while it waited.
		if rec, ok := corruptRecord(newName); ok {
			f.corrupt--
			f.corrupted = append(f.corrupted, rec)
			f.fired["spool.corrupted"]++
		}
	}
	return nil
}

// CorruptNextFinalized arms the next n finalizations (an active .tmp file
// renamed to .buf) of a file holding two intact records or more: one bit
// of one record's payload is flipped, a record with at least one more
// after it, so its checksum fails with data behind it (corruption, not a
// torn tail). n = 0 disarms.
func (f *FaultyFS) CorruptNextFinalized(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.corrupt = n
}

// TakeCorrupted returns the records damaged since the last call.
func (f *FaultyFS) TakeCorrupted() []CorruptRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.corrupted
	f.corrupted = nil
	return out
}

// corruptRecord flips a bit in the last payload byte of the middle record
// of name (spool record format: u32 length | u32 CRC-32C | payload), when
// it has two intact records or more.
func corruptRecord(name string) (CorruptRecord, bool) {
	raw, err := os.ReadFile(name)
	if err != nil {
		return CorruptRecord{}, false
	}
	type span struct{ start, end int }
	var recs []span
	for off := 0; off+8 <= len(raw); {
		size := int(binary.BigEndian.Uint32(raw[off : off+4]))
		if size > len(raw)-off-8 || crc32.Checksum(raw[off+8:off+8+size], crc32.MakeTable(crc32.Castagnoli)) != binary.BigEndian.Uint32(raw[off+4:off+8]) {
			break
		}
		recs = append(recs, span{off + 8, off + 8 + size})
		off += 8 + size
	}
	if len(recs) < 2 {
		return CorruptRecord{}, false
	}
	i := (len(recs) - 1) / 2
	rec := CorruptRecord{File: name, Index: i}
	if json.Unmarshal(raw[recs[i].start:recs[i].end], &rec.Event) != nil || recs[i].end == recs[i].start {
		return CorruptRecord{}, false
	}
	raw[recs[i].end-1] ^= 0x04
	if err := os.WriteFile(name, raw, 0o600); err != nil {
		return CorruptRecord{}, false
	}
	return rec, true
}

// Remove implements spool.FS.
func (f *FaultyFS) Remove(name string) error {
	if ft, ok := f.take("remove"); ok {
		return ft.err
	}
	return f.Base.Remove(name)
}

// List implements spool.FS.
func (f *FaultyFS) List(dir string) ([]string, error) {
	if ft, ok := f.take("list"); ok {
		return nil, ft.err
	}
	return f.Base.List(dir)
}

type faultyFile struct {
	spool.File
	fs *FaultyFS
}

func (ff *faultyFile) Write(p []byte) (int, error) {
	if ft, ok := ff.fs.take("write"); ok {
		if !ft.torn {
			return 0, ft.err
		}
		n, _ := ff.File.Write(p[:len(p)/2])
		ff.count(int64(n))
		return n, ft.err
	}
	if extra := ff.fs.takeInjection(ff.Name()); extra != nil {
		n, err := ff.File.Write(append(extra, p...))
		ff.count(int64(n))
		return max(n-len(extra), 0), err
	}
	n, err := ff.File.Write(p)
	ff.count(int64(n))
	return n, err
}

func (ff *faultyFile) count(n int64) {
	ff.fs.mu.Lock()
	ff.fs.written[ff.Name()] += n
	ff.fs.mu.Unlock()
}

func (ff *faultyFile) Sync() error {
	if ft, ok := ff.fs.take("sync"); ok {
		return ft.err
	}
	if err := ff.File.Sync(); err != nil {
		return err
	}
	ff.fs.mu.Lock()
	ff.fs.synced[ff.Name()] = ff.fs.written[ff.Name()]
	ff.fs.mu.Unlock()
	return nil
}
