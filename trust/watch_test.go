package trust

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

type event struct {
	l   *List
	err error
}

// recorder collects onChange calls.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) onChange(l *List, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{l, err})
}

// take returns and forgets the events so far.
func (r *recorder) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// writeInPlace overwrites path without replacing it (same inode), as some
// editors do.
func writeInPlace(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes data to path through a rename, like an editor that
// saves atomically.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func wantList(t *testing.T, ev []event, want *List) {
	t.Helper()
	if len(ev) != 1 || ev[0].err != nil || ev[0].l == nil || !ev[0].l.Equal(want) {
		t.Fatalf("events %+v, want one list %+v", ev, want.Peers())
	}
}

func wantError(t *testing.T, ev []event, target error) {
	t.Helper()
	if len(ev) != 1 || ev[0].l != nil || !errors.Is(ev[0].err, target) {
		t.Fatalf("events %+v, want one error wrapping %v", ev, target)
	}
}

func wantNone(t *testing.T, ev []event) {
	t.Helper()
	if len(ev) != 0 {
		t.Fatalf("events %+v, want none", ev)
	}
}

// TestWatcherCheck drives the poll step directly, so each expectation is
// exact and independent of timing.
func TestWatcherCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l1 := mustNew(t, peer(t, "alice", 1, "tcp://h:1", ""))
	if err := l1.Save(path); err != nil {
		t.Fatal(err)
	}
	var r recorder
	w := NewWatcher(path, l1, 0, r.onChange)
	if w.interval != DefaultWatchInterval {
		t.Errorf("interval %v, want the default", w.interval)
	}

	w.check(false)
	wantNone(t, r.take()) // the file holds the list the caller has

	w.check(true)
	wantList(t, r.take(), l1) // forced: reported although unchanged

	l2, _ := l1.With(peer(t, "bob", 2, "tcp://h:2", ""))
	if err := l2.Save(path); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	wantList(t, r.take(), l2)
	w.check(false)
	wantNone(t, r.take())

	// Only formatting and order change: nothing to report.
	replaceFile(t, path, withKeys(`{"peers":[{"addr":"tcp://h:2","pubkey":"@2","name":"bob"},{"name":"alice","pubkey":"@1","addr":"tcp://h:1"}]}`))
	w.check(false)
	wantNone(t, r.take())

	// An invalid edit is reported once, as an error that names the row.
	bad := withKeys(`{"peers":[{"name":"alice","pubkey":"@1","addr":"tcp://h:1"},{"name":"bob","pubkey":"@1","addr":"tcp://h:2"}]}`)
	replaceFile(t, path, bad)
	w.check(false)
	ev := r.take()
	wantError(t, ev, ErrDuplicateKey)
	if msg := ev[0].err.Error(); !strings.Contains(msg, path+`: peers[1] ("bob")`) {
		t.Errorf("error does not name the file and row: %s", msg)
	}
	w.check(false)
	wantNone(t, r.take())
	w.check(true)
	wantError(t, r.take(), ErrDuplicateKey) // forced: reported again

	// Fixing it back to the last good list is still news.
	if err := l2.Save(path); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	wantList(t, r.take(), l2)

	// Removing the file empties the list, once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	wantList(t, r.take(), nil)
	w.check(false)
	wantNone(t, r.take())

	// An unsafe file is an error.
	if err := os.WriteFile(path, []byte(`{"peers":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	wantError(t, r.take(), ErrUnsafeFile)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	wantList(t, r.take(), nil) // error cleared, list still empty
}

// An in-place edit that keeps the size, inode and mtime is still seen in a
// small file, because small files are compared byte for byte.
func TestWatcherSeesSameSizeInPlaceEdit(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	doc := `{"peers":[{"name":"alice","pubkey":"@1","addr":"tcp://h:1"}]}`
	if err := os.WriteFile(path, []byte(withKeys(doc)), 0o600); err != nil {
		t.Fatal(err)
	}
	st0, _ := os.Stat(path)
	var r recorder
	w := NewWatcher(path, nil, time.Hour, r.onChange)
	w.check(false)
	wantList(t, r.take(), mustNew(t, peer(t, "alice", 1, "tcp://h:1", "")))

	writeInPlace(t, path, withKeys(strings.Replace(doc, "alice", "alicf", 1)))
	if err := os.Chtimes(path, st0.ModTime(), st0.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st1, _ := os.Stat(path); !sameStatus(st0, st1) {
		t.Fatal("test setup: status changed")
	}
	w.check(false)
	wantList(t, r.take(), mustNew(t, peer(t, "alicf", 1, "tcp://h:1", "")))
}

// A large file is re-read only when its status changes.
func TestWatcherLargeFileUsesStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	pad := strings.Repeat("x", cheapCompareSize)
	doc := func(name string) string {
		return withKeys(`{"peers":[{"name":"` + name + `","pubkey":"@1","addr":"tcp://h:1","meta":{"pad":"` + pad + `"}}]}`)
	}
	if err := os.WriteFile(path, []byte(doc("alice")), 0o600); err != nil {
		t.Fatal(err)
	}
	// An mtime well in the past: a recent one would be re-read anyway
	// (racyWindow).
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	st0, _ := os.Stat(path)
	var r recorder
	w := NewWatcher(path, nil, time.Hour, r.onChange)
	w.check(false)
	if ev := r.take(); len(ev) != 1 || ev[0].err != nil {
		t.Fatalf("first check: %+v", ev)
	}

	writeInPlace(t, path, doc("alicf"))
	if err := os.Chtimes(path, st0.ModTime(), st0.ModTime()); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	wantNone(t, r.take()) // the documented limit: old status unchanged, not read

	later := st0.ModTime().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	w.check(false)
	ev := r.take()
	if len(ev) != 1 || ev[0].l == nil {
		t.Fatalf("after an mtime change: %+v", ev)
	}
	if _, ok := ev[0].l.ByName("alicf"); !ok {
		t.Errorf("after an mtime change the list is %+v", ev[0].l.Peers())
	}
}

// startWatcher runs w.Run in a goroutine and stops it (checking that Run
// returns nil) when stop is called or the test ends; after that, at the
// end of the test, no goroutine started since may be left.
func startWatcher(t *testing.T, w *Watcher) (stop func()) {
	t.Helper()
	testutil.CheckGoroutines(t) // registered before stop, so it runs after it
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestWatchRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l1 := mustNew(t, peer(t, "alice", 1, "tcp://h:1", ""))
	if err := l1.Save(path); err != nil {
		t.Fatal(err)
	}
	var r recorder
	w := NewWatcher(path, l1, 10*time.Millisecond, r.onChange)
	stop := startWatcher(t, w)

	l2, _ := l1.With(peer(t, "bob", 2, "tcp://h:2", ""))
	if err := l2.Save(path); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the edit", func() bool { return r.len() > 0 })
	wantList(t, r.take(), l2)

	replaceFile(t, path, `{"peers":[{"name":"carol"}]}`)
	testutil.WaitFor(t, 5*time.Second, "the invalid edit", func() bool { return r.len() > 0 })
	wantError(t, r.take(), ErrMissingField)

	l3, _ := l2.With(peer(t, "carol", 3, "tcp://h:3", ""))
	if err := l3.Save(path); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the fix", func() bool { return r.len() > 0 })
	wantList(t, r.take(), l3)

	stop()
	// After Run has returned, edits go unreported.
	if err := l1.Save(path); err != nil {
		t.Fatal(err)
	}
	w.Reload()
	time.Sleep(50 * time.Millisecond) // not a timing assertion: nothing may arrive at all
	wantNone(t, r.take())
}

func TestWatchReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l1 := mustNew(t, peer(t, "alice", 1, "tcp://h:1", ""))
	if err := l1.Save(path); err != nil {
		t.Fatal(err)
	}
	var r recorder
	// Polls are an hour apart, so only Reload can report anything.
	w := NewWatcher(path, l1, time.Hour, r.onChange)
	startWatcher(t, w)

	w.Reload()
	testutil.WaitFor(t, 5*time.Second, "the reload", func() bool { return r.len() > 0 })
	wantList(t, r.take(), l1)

	l2, _ := l1.With(peer(t, "bob", 2, "tcp://h:2", ""))
	if err := l2.Save(path); err != nil {
		t.Fatal(err)
	}
	w.Reload()
	testutil.WaitFor(t, 5*time.Second, "the reload after an edit", func() bool { return r.len() > 0 })
	wantList(t, r.take(), l2)
}

func TestWatchReloadNeverBlocks(t *testing.T) {
	w := NewWatcher(filepath.Join(t.TempDir(), FileName), nil, time.Hour, func(*List, error) {})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			w.Reload() // no Run: all but the first must be dropped, not block
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Reload blocked without a running watcher")
	}
}

func TestWatchRunOnlyOnce(t *testing.T) {
	var r recorder
	w := NewWatcher(filepath.Join(t.TempDir(), FileName), nil, time.Hour, r.onChange)
	startWatcher(t, w)
	testutil.WaitFor(t, 5*time.Second, "Run to start", w.running.Load)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Run(ctx); err == nil {
		t.Error("a second concurrent Run returned nil")
	}
}

func TestWatchRunCancelledBeforeStart(t *testing.T) {
	var r recorder
	w := NewWatcher(filepath.Join(t.TempDir(), FileName), mustNew(t, peer(t, "a", 1, "tcp://h:1", "")), time.Hour, r.onChange)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run = %v", err)
	}
	wantNone(t, r.take())
}
