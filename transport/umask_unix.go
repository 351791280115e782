//go:build unix

package transport

import (
	"sync"
	"syscall"
)

// umaskMu serialises withPrivateUmask: the umask belongs to the whole
// process, so two listeners must not restore each other's.
var umaskMu sync.Mutex

// withPrivateUmask runs f with the process umask at 0077, so that a file
// f creates (a socket, whose mode comes only from the umask) is created
// open to its owner alone. Files and directories other goroutines (or
// child processes started meanwhile) create come out closed to others
// too, but keep their owner's bits: 0177 would leave a directory made
// meanwhile without its search bit and a binary built meanwhile without
// its execute bit.
func withPrivateUmask(f func() error) error {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	return f()
}
