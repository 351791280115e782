package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A missing database is made whole: no temporary file is left, and
// opens racing to make it share one database.
func TestOpenCreatesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inbox.db")
	const n = 6
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(path, Options{}) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
		defer stores[i].Close()
		if stores[i].ID() != stores[0].ID() {
			t.Errorf("open %d has database %s, open 0 has %s", i, stores[i].ID(), stores[0].ID())
		}
	}
	if _, err := stores[0].Admit(context.Background(), rec(1, 1)); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got, err := ro.Len(); err != nil || got != 1 {
		t.Errorf("a later open sees %d items, %v; want the one admitted", got, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".new-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A -wal file left without its database is not replayed into a new one:
// Open and Check refuse it, saying what to do, and leave it.
func TestOpenRefusesOrphanWAL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inbox.db")
	s := fill(t, path, 200)
	wal, err := os.ReadFile(path + "-wal") // while open: the log holds the admissions
	if err != nil || len(wal) == 0 {
		t.Fatalf("no log to copy: %d bytes, %v", len(wal), err)
	}
	s.Close()
	os.Remove(path)
	os.Remove(path + "-shm")
	if err := os.WriteFile(path+"-wal", wal, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := openErr(path, Options{}); !errors.Is(err, ErrOrphanWAL) || !strings.Contains(err.Error(), "move the -wal") {
		t.Fatalf("Open with an orphan -wal: %v, want ErrOrphanWAL", err)
	}
	if err := Check(path, true); !errors.Is(err, ErrOrphanWAL) {
		t.Errorf("Check with an orphan -wal: %v", err)
	}
	if err := openErr(path, Options{ReadOnly: true}); !errors.Is(err, ErrOrphanWAL) {
		t.Errorf("read-only Open with an orphan -wal: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a database was made: %v", err)
	}
	if b, _ := os.ReadFile(path + "-wal"); len(b) != len(wal) {
		t.Errorf("the -wal file was changed: %d bytes, was %d", len(b), len(wal))
	}
	// Moved aside, as the error says: a new, empty store.
	os.Remove(path + "-wal")
	s2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, _ := s2.Len(); n != 0 {
		t.Errorf("new store holds %d items", n)
	}
}

// On a file system without hard links the new database is renamed
// into place.
func TestCreateWithoutHardLinks(t *testing.T) {
	link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	t.Cleanup(func() { link = os.Link })
	dir := t.TempDir()
	path := filepath.Join(dir, "inbox.db")
	fill(t, path, 1).Close()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("database after a rename: %v, %v", fi, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".new-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A create that crashed leaves its temporary file: the next Open
// removes one older than a minute, not a younger one (a create running
// now), in a directory whose name glob would misread.
func TestCreateRemovesStaleLeftovers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a[b]*?")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "inbox.db")
	stale, fresh := path+".new-0000000000000001", path+".new-0000000000000002"
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale leftover is still there: %v", err)
	}
	// Also when the database exists (a create that crashed after
	// linking left a second name of it).
	if err := os.Link(path, stale); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover beside an existing database is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a young temporary file was removed: %v", err)
	}
}

// An empty database file is what a copy or restore cut short leaves:
// refused, read only or not, and left as it is, where it used to become
// a new empty store (the duplicate filter too).
func TestOpenRefusesEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inbox.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		if err := openErr(path, Options{ReadOnly: ro}); !errors.Is(err, ErrEmptyFile) || !strings.Contains(err.Error(), "backup") {
			t.Errorf("Open (read only %v) of an empty file: %v, want ErrEmptyFile with the fix", ro, err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file was changed: %v %v", fi, err)
	}
}

// A file that is not a database, or whose pages are damaged, is refused
// as damaged, saying what to do.
func TestOpenDamaged(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not a database ", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	// A real database with its pages past the first overwritten.
	broken := filepath.Join(dir, "broken.db")
	fill(t, broken, 300).Close()
	b, err := os.ReadFile(broken)
	if err != nil || len(b) < 8192 {
		t.Fatalf("database of %d bytes, %v", len(b), err)
	}
	for i := 4096; i < len(b); i++ {
		b[i] = 0x5a
	}
	if err := os.WriteFile(broken, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notDB, broken} {
		for _, ro := range []bool{false, true} {
			if err := openErr(p, Options{ReadOnly: ro}); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "backup") {
				t.Errorf("Open (read only %v) of %s: %v, want ErrDamaged with the fix", ro, filepath.Base(p), err)
			}
		}
		if err := Check(p, true); !errors.Is(err, ErrDamaged) {
			t.Errorf("Check of %s: %v, want ErrDamaged", filepath.Base(p), err)
		}
	}
}

// Check passes a sound database and a missing one, and finds pages deep
// in the file overwritten.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	if err := Check(filepath.Join(dir, "missing.db"), true); err != nil {
		t.Errorf("Check of a missing database: %v", err)
	}
	path := filepath.Join(dir, "inbox.db")
	fill(t, path, 2000).Close()
	for _, thorough := range []bool{true, false} {
		if err := Check(path, thorough); err != nil {
			t.Fatalf("Check (thorough %v) of a sound database: %v", thorough, err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Garble the second half of the file, page by page after the first
	// quarter of each, so that page headers survive in places.
	for p := len(b) / 2 / 4096 * 4096; p+4096 <= len(b); p += 4096 {
		for i := p + 1024; i < p+4096; i++ {
			b[i] = 0xa5
		}
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(path, true); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "backup") {
		t.Errorf("Check of a database damaged deep in the file: %v, want ErrDamaged with the fix", err)
	}
}

// fill opens (creating) the store at path and admits n records to it;
// the caller closes it.
func fill(t *testing.T, path string, n uint64) *Store {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.Admit(context.Background(), rec(1, i)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// openErr is the error of Open(path, opts), which is to fail: a store it
// opens all the same is closed.
func openErr(path string, opts Options) error {
	s, err := Open(path, opts)
	if err == nil {
		s.Close()
	}
	return err
}
