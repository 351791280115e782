//go:build !unix

package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// openFile opens path with flag, refusing anything but a regular file.
// Without O_NOFOLLOW the check is made before and after opening; a file
// swapped in between is caught by comparing the two.
func openFile(path string, flag int) (*os.File, error) {
	before, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		before = nil
	case err != nil:
		return nil, err
	case !before.Mode().IsRegular():
		return nil, fmt.Errorf("open %s (%s): %w", path, typeName(before.Mode()), ErrNotRegular)
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() || (before != nil && !os.SameFile(before, fi)) {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, ErrNotRegular)
	}
	return f, nil
}
