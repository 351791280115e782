package trust

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meerkatd/meerkatd/internal/atomicfile"
	"github.com/meerkatd/meerkatd/internal/filelock"
	"github.com/meerkatd/meerkatd/internal/filemode"
)

// FileName is the usual name of the trust file inside a node's home.
const FileName = "trusted_peers.json"

// Load reads and validates the trust file at path, with the rules of
// [Parse]; row errors name path. A missing file is an error that matches
// fs.ErrNotExist (see [LoadOrEmpty]). Load refuses a file larger than
// [MaxFileSize] ([ErrTooLarge]), and one that is not a regular file (a
// symbolic link included), that another user owns or that group or others
// may write ([ErrUnsafeFile], with the rules of internal/filemode):
// whoever can write the trust file decides whom this node trusts (the
// rule of sshd's StrictModes for authorized_keys).
func Load(path string) (*List, error) {
	data, _, err := readFile(filemode.Current(), path)
	if err != nil {
		return nil, err
	}
	return parse(path, data)
}

// LoadOrEmpty is [Load], except that a missing file gives an empty list
// and no error: a node with no trust file trusts nobody.
func LoadOrEmpty(path string) (*List, error) {
	l, err := Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return New()
	}
	return l, err
}

// readFile reads path, refusing files c refuses and oversized files. It
// returns the file's status as of opening it.
func readFile(c filemode.Checker, path string) ([]byte, fs.FileInfo, error) {
	// Check before opening (opening a FIFO would block, a link is not
	// followed), then check the file opened, which may have been swapped
	// in between.
	if err := checkFile(path, c.File(path)); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("trust: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("trust: %w", err)
	}
	if err := checkFile(path, c.FileInfo(path, st)); err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("trust: read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, nil, fmt.Errorf("%w: %s is over %d bytes (4 MiB)", ErrTooLarge, path, MaxFileSize)
	}
	return data, st, nil
}

// checkFile turns an error of a filemode check into this package's.
func checkFile(path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, filemode.ErrUnsafe):
		return fmt.Errorf("%w: %w", ErrUnsafeFile, err)
	default:
		return fmt.Errorf("trust: %w", err)
	}
}

// Save writes the list to path in the trust-file form (indented, peers in
// list order), atomically with [atomicfile.WriteFile]: through a synced
// temporary file in the same directory, renamed over path, then a sync of
// the directory. The file has
// mode 0600; a missing parent directory is created with mode 0700. A nil
// list saves as {"peers": []}. Save refuses to write more than
// [MaxFileSize] bytes, so that what it writes always loads.
func (l *List) Save(path string) error {
	data, err := l.encode("  ")
	if err != nil {
		return err
	}
	if len(data) > MaxFileSize {
		return fmt.Errorf("%w: the list encodes to %d bytes, the limit is %d (4 MiB)", ErrTooLarge, len(data), MaxFileSize)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	return nil
}

// Update changes the list stored at path under an exclusive lock (flock on
// path+".lock"): it loads the file (empty if missing), applies change and
// saves the result atomically. Concurrent Updates — two `meerkatd peers`
// commands, say — therefore never lose each other's changes. (Editors do
// not take the lock; a hand edit racing an Update can still be lost.) It
// returns the saved list, or change's error with nothing written.
func Update(path string, change func(*List) (*List, error)) (*List, error) {
	unlock, err := filelock.Lock(path)
	if err != nil {
		return nil, fmt.Errorf("trust: lock %s: %w", path, err)
	}
	defer unlock()
	cur, err := LoadOrEmpty(path)
	if err != nil {
		return nil, err
	}
	next, err := change(cur)
	if err != nil {
		return nil, err
	}
	if err := next.Save(path); err != nil {
		return nil, err
	}
	return next, nil
}
