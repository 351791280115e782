//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package node

import (
	"errors"
	"os"
	"syscall"
)

// LockHome takes the exclusive lock on the home directory dir that the
// process serving the home holds while it serves (comms/control's
// ServeHome), and that keygen takes while it writes: flock(2) on the
// directory itself, so nothing is left behind by a killed process. It fails at once with
// ErrHomeServed if another process (or another descriptor of this one)
// holds it, and with an error matching fs.ErrNotExist if dir does not
// exist. unlock releases it.
func LockHome(dir string) (unlock func(), err error) {
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
			return nil, ErrHomeServed
		}
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}
