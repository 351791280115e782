package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// A read-only open shows what a writer committed (also while the writer
// still has the database open), refuses every write, and changes nothing
// in the file.
func TestReadOnly(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), "meerkat.db")
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a read-only open created the file: %v", err)
	}
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		mustAdmit(t, w, rec(1, uint64(i)))
	}
	if _, err := w.Ack(1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Outbox().Add(outbox.Entry{ID: [16]byte{9}, Kind: "message", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}

	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustList(t, r, 0, 0); len(got) != 2 || got[0].Seq != 2 {
		t.Fatalf("read-only List: %+v", got)
	}
	if n := mustLen(t, r); n != 2 {
		t.Fatalf("read-only Len = %d", n)
	}
	if n, err := r.CountKinds(rec(1, 0).Kind); err != nil || n != 2 {
		t.Fatalf("read-only CountKinds = %d, %v", n, err)
	}
	if es, err := r.Outbox().Entries(); err != nil || len(es) != 1 {
		t.Fatalf("read-only outbox: %v, %v", es, err)
	}
	if _, err := r.Admit(context.Background(), rec(2, 1)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Admit on a read-only store: %v", err)
	}
	if _, err := r.Ack(2); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Ack on a read-only store: %v", err)
	}
	if _, err := r.Outbox().Add(outbox.Entry{ID: [16]byte{8}, Kind: "message"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("outbox Add on a read-only store: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	mustList(t, r, 0, 0)
	r.Close()
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only open changed the database file")
	}
}

// SQLite answers "unable to open database file" both for a file it
// cannot open and for a -shm it cannot create beside a database it could
// read: the error says which, when the directory is the reason.
func TestOpenErrorReadOnlyDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := writableDir(dir); err != nil {
		t.Fatalf("writableDir of a fresh temporary directory: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("writableDir left %v behind", left)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(dir, "missing"), notDir} {
		if err := writableDir(d); err == nil {
			t.Errorf("writableDir(%s) = nil, want its reason", d)
		}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "open", Path: dir, Err: syscall.EACCES}, true},
		{syscall.EROFS, true},
		{syscall.ENOENT, false},
		{syscall.ENOTDIR, false},
		{nil, false},
	} {
		if got := readOnlyDir(tc.err); got != tc.want {
			t.Errorf("readOnlyDir(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// A real SQLITE_CANTOPEN, from a database in a directory that is not
	// there.
	path := filepath.Join(dir, "missing", "meerkat.db")
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cantOpen := db.Ping()
	if cantOpen == nil {
		t.Fatal("opening a database in a missing directory succeeded")
	}
	// The directory is missing, not read-only: nothing said of writing.
	if got := openError(path, cantOpen); strings.Contains(got.Error(), "directory") || errors.Is(got, ErrDamaged) {
		t.Errorf("openError in a missing directory: %v", got)
	}
	// The same code where the directory can be written says nothing of it.
	if got := openError(filepath.Join(dir, "meerkat.db"), cantOpen).Error(); strings.Contains(got, "directory") {
		t.Errorf("openError with a writable directory: %s", got)
	}
}
