//go:build unix

package trust

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/filemode"
)

// Found in review: another user replaced trusted_peers.json with
// their own 0644 file and the node reloaded it and trusted their key. The
// Watcher is given a Checker for a uid other than the file's owner, which
// is what a file written by another user looks like (a test cannot chown
// unless it runs as root).
func TestWatcherRefusesAnotherUsersFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	mine := mustNew(t, peer(t, "alice", 1, "tcp://h:1", ""))
	if err := mine.Save(path); err != nil {
		t.Fatal(err)
	}
	var r recorder
	w := NewWatcher(path, mine, time.Hour, r.onChange)
	w.check(false)
	wantNone(t, r.take())

	// "Their" file: readable by all, writable by none but its owner.
	theirs := mustNew(t, peer(t, "mallory", 2, "tcp://h:2", ""))
	if err := theirs.Save(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	w.files = filemode.Checker{UID: os.Getuid() + 4242}
	w.check(false)
	ev := r.take()
	wantError(t, ev, ErrUnsafeFile)
	if !errors.Is(ev[0].err, filemode.ErrUnsafe) || !strings.Contains(ev[0].err.Error(), "not you") {
		t.Errorf("error %q does not say whose the file is", ev[0].err)
	}
	w.check(true) // a SIGHUP gets the same answer, and no list
	wantError(t, r.take(), ErrUnsafeFile)

	// Once the file is the node user's again, the new list is taken.
	w.files = filemode.Current()
	w.check(false)
	wantList(t, r.take(), theirs)
}

// A group-writable trust file is refused at reload, even when its bytes
// do not change (a chmod alone), and the caller keeps its previous list.
func TestWatcherRefusesGroupWritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	mine := mustNew(t, peer(t, "alice", 1, "tcp://h:1", ""))
	if err := mine.Save(path); err != nil {
		t.Fatal(err)
	}
	var r recorder
	w := NewWatcher(path, mine, time.Hour, r.onChange)
	w.check(false)
	wantNone(t, r.take())
	if err := os.Chmod(path, 0o664); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	ev := r.take()
	wantError(t, ev, ErrUnsafeFile)
	if want := "fix with: chmod 600 " + path; !strings.Contains(ev[0].err.Error(), want) {
		t.Errorf("error %q does not give the fix %q", ev[0].err, want)
	}
}

// A trust file that is a symbolic link is refused: the node reads only
// its own regular files (and Save would replace the link anyway).
func TestLoadRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere.json")
	if err := mustNew(t).Save(target); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrUnsafeFile) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Load(symlink) = %v, want ErrUnsafeFile", err)
	}
}
