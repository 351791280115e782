//go:build unix

package transport

import (
	"sync"
	"syscall"
)

// umaskMu serialises withPrivateUmask: the umask belongs to the whole
// process, so two listeners must not restore each other's.
var umaskMu sync.Mutex

// withPrivateUmask runs f with the process umask at 0177, so that a file
// f creates (a socket, whose mode comes only from the umask) is created
// readable and writable by its owner alone. Files other goroutines create
// meanwhile come out stricter, never looser.
func withPrivateUmask(f func() error) error {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return f()
}
