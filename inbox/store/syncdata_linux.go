package store

import (
	"os"
	"syscall"
)

// syncData is fdatasync: the file's data and what reading it back needs
// (its size), not its times.
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
