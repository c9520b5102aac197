package spool

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FS is the small filesystem surface the spool needs; it is a seam so the
// simulator can inject ENOSPC, EIO, torn writes and the loss of unsynced
// data on a crash.
type FS interface {
	// MkdirAll creates dir, private to the broker's user.
	MkdirAll(dir string) error
	// Create opens name for appending, creating it if needed.
	Create(name string) (File, error)
	Open(name string) (io.ReadCloser, error)
	Rename(oldName, newName string) error
	Remove(name string) error
	// List returns the names of the regular files in dir, sorted.
	List(dir string) ([]string, error)
	// SyncDir makes dir's entries durable: a file just created or
	// renamed there survives a power loss.
	SyncDir(dir string) error
}

// Locker is an optional FS capability: Lock takes an exclusive lock on dir,
// held until the returned Closer is closed (or the process dies), and
// fails at once with an error wrapping ErrLocked, naming the holder, when
// another process or another Spool of this one holds it. holder is what
// the lock records about its taker for that error. An FS without it gets
// no lock: the bare fault FS (faults.FaultyFS) of the unit tests; the
// simulator gives its brokers the OS lock over it.
type Locker interface {
	Lock(dir, holder string) (io.Closer, error)
}

// LockFile is the file in the spool directory whose lock a broker holds for
// its life; it holds the holder's pid, host, start time and address.
const LockFile = "LOCK"

// File is an open spool file.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
	Name() string
}

// Modes: the spool holds pushes not yet committed and the reasons of
// quarantined ones, readable by the broker's user only, as PostgreSQL's
// data directory.
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// OSFS is the real filesystem.
type OSFS struct{}

// MkdirAll implements FS. A directory that already exists (made by an
// older broker, 0755 with 0644 files) is tightened to 0700 and its files to
// 0600, so an upgrade does not leave buffered payloads readable; but only a
// directory holding nothing but the spool's own entries: one shared with
// other files (FILE_BUFFER_DIR=/tmp) is refused rather than changed.
func (OSFS) MkdirAll(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != dirMode {
		for _, e := range entries {
			if !spoolEntry(e.Name(), e.IsDir()) {
				return fmt.Errorf("%s is open to other users (mode %04o) and holds %q, which is not the spool's: give the spool a directory of its own, or make this one 0700",
					dir, fi.Mode().Perm(), e.Name())
			}
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !spoolEntry(e.Name(), false) {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(filepath.Join(dir, e.Name()), fileMode); err != nil {
				return err
			}
		}
	}
	return nil
}

// spoolEntry reports whether a directory entry is one the spool makes.
func spoolEntry(name string, dir bool) bool {
	if dir {
		return name == "failed"
	}
	if name == LockFile {
		return true
	}
	for _, suffix := range []string{".tmp", ".buf", ".split", reasonsSuffix, corruptSuffix} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Create implements FS.
func (OSFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, fileMode)
}

// Open implements FS.
func (OSFS) Open(name string) (io.ReadCloser, error) { return os.Open(name) }

// Rename implements FS.
func (OSFS) Rename(oldName, newName string) error { return os.Rename(oldName, newName) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// List implements FS.
func (OSFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}
