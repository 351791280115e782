//go:build unix

package audit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openFile opens path with flag, refusing anything but a regular file
// without a race between checking and opening: O_NOFOLLOW fails on a
// symbolic link, O_NONBLOCK keeps a FIFO from blocking the open, and the
// type is checked on the opened descriptor. (O_NONBLOCK has no effect on
// the regular files that pass.)
func openFile(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("open %s (a symbolic link): %w", path, ErrNotRegular)
	}
	if errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.EISDIR) { // ENXIO: a FIFO without a reader, or a socket
		return nil, fmt.Errorf("open %s: %w", path, ErrNotRegular)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s (%s): %w", path, typeName(fi.Mode()), ErrNotRegular)
	}
	return f, nil
}
