package control

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/meerkatd/meerkatd/comms/node"
)

// LockFileName is the lock a process serving a home holds.
const LockFileName = "node.lock"

// lockHome takes the home's serving lock, an advisory lock the kernel
// drops when the process exits however it exits; ErrServing if another
// process holds it. The returned function releases it.
func lockHome(h *node.Home) (func(), error) {
	f, err := os.OpenFile(filepath.Join(h.Dir, LockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrServing, h.Dir)
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}
