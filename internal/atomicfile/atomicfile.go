package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// createAttempts bounds the search for an unused temporary name. A clash
// needs another file with the same random 64-bit suffix, so in practice the
// first name is free.
const createAttempts = 100

// WriteFile atomically replaces path with a file holding data and having
// mode perm (permission bits only), as the package doc describes. Errors
// name path and wrap the underlying error.
func WriteFile(path string, data []byte, perm fs.FileMode) (err error) {
	if perm&^fs.ModePerm != 0 {
		return fmt.Errorf("write %s: mode %v is not only permission bits", path, perm)
	}
	dir := filepath.Dir(path)
	f, err := createTemp(dir, "."+filepath.Base(path)+".tmp", perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	// The umask may have narrowed perm; widen it back to exactly perm now,
	// while the file is still empty, never after data is in it.
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Mode().Perm() != perm {
		if err = f.Chmod(perm); err != nil {
			return err
		}
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// From here on the temporary file is gone: an error must not remove
	// anything, and only says that the rename may not be durable.
	if serr := syncDir(dir); serr != nil {
		return fmt.Errorf("write %s: replaced, but the directory was not synced: %w", path, serr)
	}
	return nil
}

// createTemp creates a new file in dir named prefix plus a random suffix,
// with O_EXCL and mode perm (less the umask). Unlike os.CreateTemp, which
// always uses 0600, the mode is the caller's from the first moment.
func createTemp(dir, prefix string, perm fs.FileMode) (*os.File, error) {
	for range createAttempts {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("create temporary file in %s: %d names taken", dir, createAttempts)
}

// syncDir syncs the directory dir, so that a rename inside it survives a
// crash. Filesystems that cannot sync directories say so with EINVAL or
// ENOTSUP; that is not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	return err
}
