package spool

import (
	"io"
	"os"
	"path/filepath"
	"sort"
)

// FS is the small filesystem surface the spool needs; it is a seam so the
// simulator can inject ENOSPC, EIO, torn writes and the loss of unsynced
// data on a crash.
type FS interface {
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

// File is an open spool file.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
	Name() string
}

// OSFS is the real filesystem.
type OSFS struct{}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

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
	return os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
