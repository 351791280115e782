package filemode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrUnsafe is what every refusal of this package matches (errors.Is).
var ErrUnsafe = errors.New("filemode: unsafe file or directory")

// Error is a refusal: the file or directory at Path, and what is wrong with
// it, ending with how to fix it. It matches [ErrUnsafe].
type Error struct {
	Path   string
	Reason string // the whole message, naming Path
}

func (e *Error) Error() string { return e.Reason }

// Unwrap returns ErrUnsafe.
func (e *Error) Unwrap() error { return ErrUnsafe }

// unsafe returns an *Error for path; format's first verb is path.
func unsafe(path, format string, args ...any) error {
	return &Error{Path: path, Reason: fmt.Sprintf(format, append([]any{path}, args...)...)}
}

// Checker checks files against the rules of the package doc. Its zero
// value expects the files to belong to root; use [Current] for the user
// running the process.
type Checker struct {
	// UID is the user that must own the files and directories checked.
	UID int
}

// Current returns the Checker for the user running this process.
func Current() Checker { return Checker{UID: os.Getuid()} }

// File checks the file at path with [Checker.File] for the current user.
func File(path string) error { return Current().File(path) }

// Dir checks the directory at path with [Checker.Dir] for the current
// user.
func Dir(path string) error { return Current().Dir(path) }

// Above checks the directories above a home to be created at path with
// [Checker.Above] for the current user.
func Above(path string) error { return Current().Above(path) }

// File checks the file at path without following a symbolic link. A
// missing file is an error that matches fs.ErrNotExist.
func (c Checker) File(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return c.FileInfo(path, fi)
}

// FileInfo checks fi, the status of the file at path (from Lstat, or from
// Stat of a file already open).
func (c Checker) FileInfo(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return unsafe(path, "%s is a symbolic link; the node reads only its own regular files: replace the link with a copy of the file it points to")
	case !fi.Mode().IsRegular():
		return unsafe(path, "%s is not a regular file (%s); move it out of the way", fi.Mode().Type())
	}
	if err := c.owner(path, fi); err != nil {
		return err
	}
	if writableByOthers(fi) {
		return unsafe(path, "%s is writable by group or others (mode %#o), who could change what this node does, holds or trusts; fix with: chmod 600 %s", fi.Mode().Perm(), path)
	}
	return nil
}

// Tighten narrows the file at path to mode 0600 if group or others have
// any permission on it; a missing file is not an error. It does not
// follow a symbolic link (call [Checker.File] first to refuse one).
func Tighten(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || !hasPermBits || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, fi.Mode().Perm()&0o700); err != nil {
		return fmt.Errorf("narrow %s to 0600: %w", path, err)
	}
	return nil
}

func writableByOthers(fi fs.FileInfo) bool {
	return hasPermBits && fi.Mode().Perm()&0o022 != 0
}

// owner refuses fi unless c.UID owns it.
func (c Checker) owner(path string, fi fs.FileInfo) error {
	uid, ok := ownerOf(fi)
	if !ok || uid == c.UID {
		return nil
	}
	return unsafe(path, "%s is owned by uid %d, not you (uid %d); move it away, or fix with: chown %d %s", uid, c.UID, c.UID, path)
}
