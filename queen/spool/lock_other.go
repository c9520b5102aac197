//go:build !unix

package spool

import "io"

// Lock implements Locker where flock(2) does not exist: no lock is taken
// (queen is built and supported on Unix only).
func (OSFS) Lock(dir, holder string) (io.Closer, error) { return io.NopCloser(nil), nil }
