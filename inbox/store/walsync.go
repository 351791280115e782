package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SQLite commits with synchronous=NORMAL: a transaction's pages go to
// the WAL without an fsync, and the committer goes on to the next batch.
// The store syncs the WAL itself, on the goroutine that waits for a
// result: Pending.Wait and do sync (or wait for a sync begun after the
// batch committed) before they return a success. So nothing is
// acknowledged before it is on disk, as with synchronous=FULL, and one
// sync still covers every batch committed before it began; but the
// committer does not wait for the disk between batches, and the sync
// costs no hand-off to another goroutine.
//
// What SQLite still syncs itself under NORMAL: the WAL's header whenever
// it starts the log over, the WAL before a checkpoint copies it into the
// database, and the database after. A batch is visible to readers once it
// commits, before its sync: the readers that could return an item or an
// acknowledgement a power loss would take back sync first (awaitSynced).
// (A read-only Store in another process knows nothing of the syncs: it
// may see a batch in the millisecond before its sync.)

// errSyncFailed explains a failed sync of the WAL: after it, what the
// disk holds of the batches written since the last sync is unknown, and
// a later sync that succeeds would not say otherwise.
const errSyncFailed = "the disk did not confirm a write, so the store takes no more writes; restart once the disk is sound (SQLite then recovers what the disk holds)"

// synced reports whether a sync begun after after has completed.
func (s *Store) synced(after uint64) bool { return s.syncDone.Load() > after }

// syncSince returns once a sync of the WAL begun after after (a
// syncStarted value) has completed, syncing it here if none has. Syncs
// are one at a time: a caller that waited for another's may find it
// begun late enough. A failure is for good: every later request fails
// with the same error (sendable).
func (s *Store) syncSince(after uint64) error {
	if s.synced(after) {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if p := s.syncErr.Load(); p != nil {
		return *p
	}
	if s.synced(after) {
		return nil
	}
	covers := s.committed.Load() // their frames are written
	n := s.syncStarted.Add(1)
	if err := s.wal.sync(); err != nil {
		err = fmt.Errorf("store: sync %s: %w (%s)", filepath.Base(s.wal.path), err, errSyncFailed)
		s.syncErr.Store(&err)
		return err
	}
	s.syncedTo.Store(covers)
	s.syncDone.Store(n)
	return nil
}

// awaitSynced makes sure that what a reader's query saw is on disk. A
// reader calls it after its query and before it returns what it read:
// any batch its query saw began committing before this, so it is counted
// in committing as loaded here (runBatch counts a batch before it
// commits), and its frames were written before it was visible.
func (s *Store) awaitSynced() error {
	if s.syncedTo.Load() >= s.committing.Load() {
		return nil // nothing committed since the last sync: the usual case
	}
	return s.syncSince(s.syncStarted.Load())
}

// closeWAL syncs what the last batches wrote, if a sync has not, for the
// Waits not yet called, and closes the WAL file; it returns the sync's
// error. Close calls it once commitLoop is done.
func (s *Store) closeWAL() error {
	var err error
	if s.syncedTo.Load() < s.committed.Load() {
		err = s.syncSince(s.syncStarted.Load())
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.wal.close()
	s.wal.closed = true
	return err
}

// walFile is the database's -wal file, opened for syncing. SQLite keeps
// the file while any connection to the database is open and may remove
// it when the last one closes, after checkpointing it into the database
// (with a sync); a new one is made by the next connection. So sync checks
// that the file it holds is still the one at the path, and opens the one
// there if not.
type walFile struct {
	path   string
	f      *os.File
	fi     os.FileInfo
	closed bool
	syncFn func(*os.File) error // nil: syncData (tests replace it)
}

// sync makes what was written to the WAL so far durable.
func (w *walFile) sync() error {
	if w.closed {
		return ErrClosed
	}
	fi, err := os.Stat(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		// Removed when the last connection closed, which checkpointed
		// it into the database and synced that first.
		w.close()
		return nil
	}
	if err != nil {
		return err
	}
	if w.f == nil || !os.SameFile(fi, w.fi) {
		w.close()
		f, err := os.Open(w.path)
		if err != nil {
			return err
		}
		if w.fi, err = f.Stat(); err != nil {
			f.Close()
			return err
		}
		w.f = f
	}
	if w.syncFn != nil {
		return w.syncFn(w.f)
	}
	return syncData(w.f)
}

func (w *walFile) close() {
	if w.f != nil {
		w.f.Close()
		w.f, w.fi = nil, nil
	}
}
