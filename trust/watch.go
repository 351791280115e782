package trust

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/internal/filemode"
)

// DefaultWatchInterval is how often a [Watcher] polls when given no
// interval.
const DefaultWatchInterval = time.Second

// cheapCompareSize is the file size up to which a Watcher re-reads the file
// on every poll and compares its bytes, even when size, mtime and inode are
// unchanged: that catches an in-place edit within the filesystem's mtime
// granularity. Larger files are re-read only when their status changes.
const cheapCompareSize = 64 << 10

// Watcher polls a trust file and reports changes, so a node picks up edits
// without a restart. Create one with [NewWatcher] and call [Watcher.Run].
//
// Each poll stats the file; if its size, mtime or identity (device and
// inode) changed, or it is small enough to read cheaply, the Watcher reads
// it and compares the bytes with the last read. Changed bytes are parsed
// and reported through onChange:
//
//   - a valid list that differs from the last one reported (or from the
//     list given to NewWatcher) as onChange(list, nil);
//   - an invalid file, or one that cannot be read, as onChange(nil, err);
//     the caller should keep using its previous list. The same error is
//     not reported twice in a row;
//   - the first valid list after an error, even if it equals the last good
//     one, so the caller learns that the problem is fixed.
//
// Every poll also checks the file's owner and mode as [Load] does, so a
// file another user owns or may write is reported as an error (wrapping
// [ErrUnsafeFile]) even when its bytes did not change.
//
// A missing file counts as an empty list, as with [LoadOrEmpty]. Edits
// that only change formatting or row order are not reported.
//
// Reload is safe for concurrent use; Run may be active at most once at a
// time. onChange runs on Run's goroutine, one call at a time; it should
// return promptly and must not call Run.
type Watcher struct {
	path     string
	interval time.Duration
	onChange func(*List, error)
	reload   chan struct{} // 1-buffered: a pending reload request
	running  atomic.Bool
	files    filemode.Checker // the owner and mode rules; the current user's

	// State owned by the goroutine inside Run.
	last    *List       // last list reported, or the initial one
	lastErr string      // message of the last error reported, "" after a good list
	read    bool        // whether the fields below describe a read
	missing bool        // the file did not exist at the last read
	info    fs.FileInfo // status at the last read
	sum     [sha256.Size]byte
}

// racyWindow: a file modified this recently may still be changing within
// one mtime tick, so its unchanged status proves nothing yet.
const racyWindow = 2 * time.Second

// NewWatcher returns a Watcher for the trust file at path. current is the
// list the caller is using now (typically from [LoadOrEmpty]; nil means
// empty): the Watcher reports only departures from it, so an edit made
// between loading and starting Run is not lost. An interval <= 0 means
// [DefaultWatchInterval]. onChange must not be nil.
func NewWatcher(path string, current *List, interval time.Duration, onChange func(*List, error)) *Watcher {
	if onChange == nil {
		panic("bug: trust.NewWatcher with nil onChange")
	}
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	return &Watcher{
		path:     path,
		interval: interval,
		onChange: onChange,
		reload:   make(chan struct{}, 1),
		last:     current,
		files:    filemode.Current(),
	}
}

// Run checks the file once at once, then every interval and whenever
// [Watcher.Reload] asks, until ctx is done. It starts no goroutines and
// returns nil once ctx is done; it returns an error at once if another
// Run on w is active.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("trust: Watcher.Run is already running")
	}
	defer w.running.Store(false)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	if ctx.Err() == nil {
		w.check(false)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.check(false)
		case <-w.reload:
			w.check(true)
		}
	}
}

// Reload asks Run to read the file now and to report the result even if
// nothing changed (so a SIGHUP always gets an answer). It never blocks;
// requests made while one is pending merge into it, and a request made
// while Run is not active is served when Run starts.
func (w *Watcher) Reload() {
	select {
	case w.reload <- struct{}{}:
	default:
	}
}

// check polls the file once. force reports the outcome even if unchanged.
func (w *Watcher) check(force bool) {
	st, err := os.Lstat(w.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !force && w.read && w.missing {
			return
		}
		w.read, w.missing, w.info = true, true, nil
		empty, _ := New()
		w.deliver(empty, nil, force)
		return
	case err != nil:
		w.read = false
		w.deliver(nil, fmt.Errorf("trust: %w", err), force)
		return
	}
	// The owner and mode are checked on every poll, so a chmod or chown
	// that leaves size and mtime alone is seen too.
	if err := checkFile(w.path, w.files.FileInfo(w.path, st)); err != nil {
		w.read = false
		w.deliver(nil, err, force)
		return
	}
	// A large file whose status has not changed is not re-read — unless
	// the last read failed (it may have caught a write half-done within
	// the same mtime tick) or was too recent to trust the mtime.
	if !force && w.read && !w.missing && w.lastErr == "" && sameStatus(w.info, st) && st.Size() > cheapCompareSize &&
		time.Since(st.ModTime()) > racyWindow {
		return
	}
	data, st, err := readFile(w.files, w.path)
	if errors.Is(err, fs.ErrNotExist) {
		// Removed since the stat; the next poll sees it missing.
		w.read = false
		return
	}
	if err != nil {
		w.read = false
		w.deliver(nil, err, force)
		return
	}
	sum := sha256.Sum256(data)
	unchanged := w.read && !w.missing && sum == w.sum
	w.read, w.missing, w.info, w.sum = true, false, st, sum
	if unchanged && !force {
		return
	}
	l, err := parse(w.path, data)
	w.deliver(l, err, force)
}

// deliver reports a list or an error if it is news (or force is set).
func (w *Watcher) deliver(l *List, err error, force bool) {
	if err != nil {
		msg := err.Error()
		if force || msg != w.lastErr {
			w.lastErr = msg
			w.onChange(nil, err)
		}
		return
	}
	if force || w.lastErr != "" || !l.Equal(w.last) {
		w.last, w.lastErr = l, ""
		w.onChange(l, nil)
	}
}

// sameStatus reports whether two stats of the file look identical: same
// file (device and inode), size and mtime.
func sameStatus(a, b fs.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
