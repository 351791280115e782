package filemode

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Dir checks the directory at path and the directories above it. path
// itself may be reached through a symbolic link: the directory it names
// is checked, then each parent of its resolved path up to the root.
func (c Checker) Dir(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return unsafe(path, "%s is not a directory")
	}
	if err := c.owner(path, fi); err != nil {
		return err
	}
	if writableByOthers(fi) {
		return unsafe(path, "%s is writable by group or others (mode %#o), who could replace the files in it; fix with: chmod 700 %s", fi.Mode().Perm(), path)
	}
	if !hasPermBits {
		return nil
	}
	real, err := resolve(path)
	if err != nil {
		return err
	}
	return c.upFrom(filepath.Dir(real), path)
}

// Above checks, for a home about to be created at path, the directories
// above it that exist: the nearest one (through symbolic links) and each
// parent of its resolved path up to the root, as [Checker.Dir] checks the
// directories above an existing home.
func (c Checker) Above(path string) error {
	if !hasPermBits {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	p := filepath.Dir(abs)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			return err
		}
		p = filepath.Dir(p)
	}
	real, err := resolve(p)
	if err != nil {
		return err
	}
	return c.upFrom(real, path)
}

// resolve is path's absolute form, symbolic links resolved.
func resolve(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	return filepath.Abs(real)
}

// upFrom checks dir, a resolved directory above home, and each directory
// above it up to the root ([Checker.parent]).
func (c Checker) upFrom(dir, home string) error {
	for p := dir; ; p = filepath.Dir(p) {
		if err := c.parent(p, home); err != nil {
			return err
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// parent checks p, a directory above home: owned by c.UID or root, and
// writable by group or others only if sticky.
func (c Checker) parent(p, home string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if uid, ok := ownerOf(fi); ok && uid != c.UID && uid != 0 {
		return unsafe(p, "%s, above the node home %s, is owned by uid %d, who could replace the home; move the home to a directory of your own",
			home, uid)
	}
	if writableByOthers(fi) && fi.Mode()&fs.ModeSticky == 0 {
		return unsafe(p, "%s, above the node home %s, is writable by group or others (mode %#o), who could replace the home; fix with: chmod go-w %s (or move the home)",
			home, fi.Mode().Perm(), p)
	}
	return nil
}
