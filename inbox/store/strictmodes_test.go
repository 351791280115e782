//go:build unix

package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/internal/filemode"
)

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func wantMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s: mode %v, want %v", filepath.Base(path), fi.Mode().Perm(), want)
	}
}

// Found in review: an existing 0644 meerkat.db was not tightened,
// and its WAL and SHM files inherit the mode. Open narrows all three.
func TestOpenTightensDatabaseFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meerkat.db")
	first := reopen(t, path, Options{}) // holds the -wal and -shm open
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, p, 0o600)
		chmod(t, p, 0o644)
	}
	reopen(t, path, Options{})
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, p, 0o600)
	}
	first.Close()

	// A 0644 database without -wal and -shm: they are created 0600.
	fresh := filepath.Join(t.TempDir(), "meerkat.db")
	reopen(t, fresh, Options{}).Close()
	for _, p := range []string{fresh + "-wal", fresh + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	chmod(t, fresh, 0o644)
	reopen(t, fresh, Options{})
	for _, p := range []string{fresh, fresh + "-wal", fresh + "-shm"} {
		wantMode(t, p, 0o600)
	}
}

// A database file others may write is refused, not narrowed: someone else
// may already have changed it. So is a symbolic link.
func TestOpenRefusesUnsafeDatabaseFiles(t *testing.T) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		t.Run("group-writable"+suffix, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "meerkat.db")
			s := reopen(t, path, Options{})
			chmod(t, path+suffix, 0o664)
			for _, ro := range []bool{false, true} {
				_, err := Open(path, Options{ReadOnly: ro})
				if !errors.Is(err, filemode.ErrUnsafe) || !strings.Contains(err.Error(), "fix with: chmod 600 "+path+suffix) {
					t.Fatalf("Open(ReadOnly: %v) = %v, want ErrUnsafe with the chmod fix", ro, err)
				}
			}
			s.Close()
		})
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere.db")
	reopen(t, target, Options{}).Close()
	link := filepath.Join(dir, "meerkat.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link, Options{}); !errors.Is(err, filemode.ErrUnsafe) {
		t.Fatalf("Open(symlink) = %v, want ErrUnsafe", err)
	}
}
