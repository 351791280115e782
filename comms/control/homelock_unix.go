//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package control

import (
	"errors"
	"os"
	"syscall"
)

// errHomeLocked means another process holds the home's lock.
var errHomeLocked = errors.New("control: the home is locked by another process")

// lockHome takes the exclusive lock on the home directory dir that the
// process serving the home holds (flock(2) on the directory itself, so
// nothing is left behind). It fails at once with errHomeLocked if another
// process holds it. The kernel releases the lock when the process exits,
// however it exits, so a killed server never leaves the home locked.
// unlock releases it.
func lockHome(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errHomeLocked
		}
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}
