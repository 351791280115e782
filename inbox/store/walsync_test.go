package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// syncHook replaces a store's WAL sync until the test ends: each sync
// reports the file it was given on entered and returns what release
// sends (nil releases with success).
type syncHook struct {
	entered chan *os.File
	release chan error
}

func hookSync(t *testing.T, s *Store) *syncHook {
	h := &syncHook{entered: make(chan *os.File, 16), release: make(chan error, 16)}
	s.syncMu.Lock()
	s.wal.syncFn = func(f *os.File) error {
		h.entered <- f
		return <-h.release
	}
	s.syncMu.Unlock()
	t.Cleanup(func() { // before the store's Close, which may sync
		s.syncMu.Lock()
		s.wal.syncFn = nil
		s.syncMu.Unlock()
	})
	return h
}

// waitEntered waits for the next sync to begin and returns its file.
func (h *syncHook) waitEntered(t *testing.T) *os.File {
	t.Helper()
	select {
	case f := <-h.entered:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no sync of the WAL began")
		return nil
	}
}

// An admission is reported only once the WAL holding it is synced: Wait
// syncs it, and does not return while the sync runs.
func TestWaitSyncsWAL(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	h := hookSync(t, s)
	p := s.AdmitAsync(rec(1, 1), queueWait)
	waited := make(chan error, 1)
	go func() {
		_, err := p.Wait()
		waited <- err
	}()
	f := h.waitEntered(t)
	if f.Name() != path+"-wal" {
		t.Fatalf("synced %s, want %s", f.Name(), path+"-wal")
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) while its sync ran", err)
	default:
	}
	h.release <- nil
	if err := <-waited; err != nil {
		t.Fatalf("Wait = %v", err)
	}
	// A synchronous write syncs too.
	done := make(chan error, 1)
	go func() {
		_, err := s.Admit(context.Background(), rec(1, 2))
		done <- err
	}()
	h.waitEntered(t)
	h.release <- nil
	if err := <-done; err != nil {
		t.Fatalf("Admit = %v", err)
	}
}

// A reader syncs what its query saw before it returns it: an item whose
// batch committed but is not yet synced is not listed before the sync.
func TestReaderSyncsFirst(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	mustAdmit(t, s, rec(1, 1))
	h := hookSync(t, s)
	if recs, err := s.List(0, 0); err != nil || len(recs) != 1 {
		t.Fatalf("List = %d records, %v; want 1", len(recs), err)
	}
	select {
	case <-h.entered:
		t.Fatal("List synced with nothing committed since the last sync")
	default:
	}
	committed := s.committed.Load()
	p := s.AdmitAsync(rec(1, 2), queueWait)
	testutil.WaitFor(t, 10*time.Second, "the batch to commit", func() bool { return s.committed.Load() > committed })
	listed := make(chan int, 1)
	go func() {
		recs, err := s.List(0, 0)
		if err != nil {
			t.Errorf("List: %v", err)
		}
		listed <- len(recs)
	}()
	select {
	case n := <-listed:
		t.Fatalf("List returned %d records without syncing the WAL", n)
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("List neither synced nor returned")
	}
	h.release <- nil
	if n := <-listed; n != 2 {
		t.Fatalf("List = %d records, want 2", n)
	}
	if dup, err := p.Wait(); dup || err != nil { // synced by List's sync: no second one
		t.Fatalf("Wait = %v, %v", dup, err)
	}
	select {
	case <-h.entered:
		t.Fatal("Wait synced again after a sync that began after its batch")
	default:
	}
}

// A sync that fails stops the store's writes for good, with an error
// that says what to do: what the disk holds is then unknown.
func TestSyncFailureStopsWrites(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	mustAdmit(t, s, rec(1, 1))
	h := hookSync(t, s)
	h.release <- syscall.EIO
	_, err := s.Admit(context.Background(), rec(1, 2))
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("Admit with the sync failing = %v, want EIO and what to do", err)
	}
	<-h.entered
	// Later writes fail at once, without a sync.
	if _, err := s.Admit(context.Background(), rec(1, 3)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Admit after a failed sync = %v, want EIO", err)
	}
	if p := s.AdmitAsync(rec(1, 4), queueWait); !p.Ready() {
		t.Fatal("an admission refused at once is not Ready")
	} else if _, err := p.Wait(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("AdmitAsync after a failed sync = %v, want EIO", err)
	}
	if err := s.Writable(context.Background()); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Writable = %v, want EIO", err)
	}
	// Item 2 committed and was never synced: a reader does not return it.
	if recs, err := s.List(0, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("List = %d records, %v; want EIO", len(recs), err)
	}
	select {
	case <-h.entered:
		t.Fatal("a sync ran after the failed one")
	default:
	}	// Close says so too: the last batches were never synced.
	if err := s.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close = %v, want EIO", err)
	}
}

// walFile syncs the file at its path: a new one SQLite made after
// removing the old, and nothing when there is none.
func TestWALFileFollowsThePath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inbox.db-wal")
	var synced []os.FileInfo
	w := walFile{path: path, syncFn: func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		synced = append(synced, fi)
		return nil
	}}
	defer w.close()
	write := func(name string) os.FileInfo {
		if err := os.WriteFile(name, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	first := write(path)
	for range 2 {
		if err := w.sync(); err != nil {
			t.Fatal(err)
		}
	}
	next := write(path + ".new")
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if err := w.sync(); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 3 || !os.SameFile(synced[0], first) || !os.SameFile(synced[1], first) || !os.SameFile(synced[2], next) {
		t.Fatalf("synced %d files, want the first twice, then the one that replaced it", len(synced))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.sync(); err != nil || len(synced) != 3 || w.f != nil {
		t.Fatalf("sync with no file = %v (%d syncs, file held %v); want nil, none, none", err, len(synced), w.f != nil)
	}
	w.closed = true
	write(path)
	if err := w.sync(); !errors.Is(err, ErrClosed) || len(synced) != 3 {
		t.Fatalf("sync after close = %v (%d syncs), want ErrClosed and none", err, len(synced))
	}
}
