//go:build unix

package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Lock implements Locker with flock(2) on dir/LOCK. The kernel drops the
// lock when the process dies, however it dies, so a lock is never stale;
// the file's content (who holds it) is rewritten by each new holder.
func (OSFS) Lock(dir, holder string) (io.Closer, error) {
	name := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		// A read-only directory: a lock on the existing file still
		// excludes another broker.
		var rerr error
		if f, rerr = os.Open(name); rerr != nil {
			return nil, fmt.Errorf("spool lock %s: %w", name, err)
		}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		who, _ := io.ReadAll(io.LimitReader(f, 1024))
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			h := strings.TrimSpace(string(who))
			if h == "" {
				h = "holder unknown"
			}
			return nil, fmt.Errorf("%w: %s is held by %s; each broker needs a FILE_BUFFER_DIR of its own", ErrLocked, name, h)
		}
		return nil, fmt.Errorf("spool lock %s: %w", name, err)
	}
	// Best effort: a read-only file keeps the old holder's line.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(holder+"\n"), 0)
		_ = f.Sync()
	}
	return f, nil
}
