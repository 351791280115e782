// Package filelock serialises the read-modify-write edits of a file
// between processes: an exclusive flock on a lock file beside it.
package filelock

import (
	"os"
	"syscall"
)

// Lock takes the exclusive lock of path (flock on path+".lock", created
// with mode 0600), waiting while another process holds it, and returns
// the function that releases it. Editors do not take it: it orders the
// edits of processes that do.
func Lock(path string) (unlock func(), err error) {
	lf, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		lf.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
		lf.Close()
	}, nil
}
