package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for zero [Options] fields.
const (
	// DefaultMaxBytes is the size at which the log is rotated.
	DefaultMaxBytes = 64 << 20
	// DefaultQueueLen is the queue length. A slot holds a Record by value
	// (about 200 bytes, allocated up front), so the default costs about
	// 0.8 MiB and absorbs a disk stall of a quarter second at 16k
	// envelopes/s; longer stalls drop rows, counted in a "dropped" row.
	DefaultQueueLen = 4096
	// DefaultFlushInterval is how long the writer lets a burst of
	// records gather before it writes them: the longest a recorded row
	// waits to reach the file (Close writes at once).
	DefaultFlushInterval = 20 * time.Millisecond
)

const (
	// flushSize makes the writer flush before the queue runs empty once
	// this much is buffered.
	flushSize = 64 << 10
	// keepBufSize is the largest buffer the writer keeps between flushes;
	// one grown for a huge body is given back.
	keepBufSize = 256 << 10
)

// Options are a Log's knobs; the zero value of each field means its
// default.
type Options struct {
	// Bodies records envelope bodies ([Record.Body]); without it (the
	// default, the `[audit] bodies = true` config key) bodies are
	// stripped before they are queued.
	Bodies bool
	// MaxBytes rotates the file before a row would make it larger: it is
	// renamed to path+".1", replacing an older one.
	MaxBytes int64
	// QueueLen is the number of records that may wait for the writer;
	// beyond it records are dropped and counted.
	QueueLen int
	// FlushInterval is how long the writer lets records gather before it
	// writes them: the longest a row waits to reach the file.
	FlushInterval time.Duration
	// Logger receives write and rotation errors; nil discards them.
	Logger *slog.Logger

	// Test hooks, unexported so only this package's tests set them.
	afterReceive func()                    // writer: called after taking each record off the queue
	wrapFile     func(io.Writer) io.Writer // writer: wraps each file it opens
	reopenEvery  time.Duration             // writer: overrides reopenInterval
}

// Stats are a Log's counters since Open. Once Close has returned,
// Written+Dropped is the number of Record calls.
type Stats struct {
	Written uint64 // records whose row was written to the file (flushed)
	Dropped uint64 // records not written: queue full, after Close, or lost to a write error
	Bytes   uint64 // bytes written to the file, "dropped" rows included
}

// Log is an open audit log. It is safe for concurrent use. A nil *Log is a
// valid, disabled log: its methods do nothing. The zero Log is not usable;
// use [Open].
type Log struct {
	bodies bool
	q      chan Record
	hurry  chan struct{} // Record: the queue is filling, write now (1 slot)
	done   chan struct{} // closed when writeLoop has returned

	// mu makes closing q atomic with respect to Record's send: Record
	// holds it shared around a non-blocking send, Close exclusively to
	// set closed and close q. So no record is sent on a closed channel
	// and none lands in q after the writer's last receive.
	mu      sync.RWMutex
	closed  bool
	closing chan struct{} // closed by Close with q

	written atomic.Uint64
	dropped atomic.Uint64
	bytes   atomic.Uint64

	closeErr error // set by writeLoop before it closes done
}

// Open opens the audit log at path for appending, creating it with mode
// 0600 if missing (its directory must exist), and starts the writer. It
// fails with an error wrapping [ErrNotRegular] if path is a symbolic link or
// not a regular file. An existing file with wider permissions is narrowed to
// 0600, and one whose last line is unfinished (a crash mid-write) gets a
// newline first, so that line alone is lost.
func Open(path string, opts Options) (*Log, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f, size, err := openLog(path)
	if err != nil {
		return nil, err
	}
	l := &Log{
		bodies:  opts.Bodies,
		q:       make(chan Record, opts.QueueLen),
		hurry:   make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	w := &writer{l: l, path: path, opts: opts}
	w.setFile(f, size)
	go l.writeLoop(w)
	return l, nil
}

// Record queues r for writing and returns at once. It fills a zero Time
// with the current time, drops Body unless [Options.Bodies] (and copies it
// if kept), and counts r as dropped if the queue is full or the log is
// closed. It never waits for the writer or the disk: the cost is a read
// lock and a non-blocking channel send of r (BenchmarkRecordAccepted; no
// allocation without bodies, TestRecordAllocs).
//
// The writer replaces a Time outside years 0–9999 with the time of
// writing and truncates string fields to [MaxFieldSize].
func (l *Log) Record(r Record) {
	if l == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	switch {
	case !l.bodies, len(r.Body) == 0:
		r.Body = nil
	case len(r.Body) > MaxLineSize: // could never fit in a line
		r.Body = nil
	default:
		r.Body = bytes.Clone(r.Body) // the caller may reuse its buffer
	}
	l.mu.RLock()
	if !l.closed {
		select {
		case l.q <- r:
			if len(l.q) > cap(l.q)/2 {
				select {
				case l.hurry <- struct{}{}: // the writer stops lingering
				default:
				}
			}
			l.mu.RUnlock()
			return
		default:
		}
	}
	l.mu.RUnlock()
	l.dropped.Add(1)
}

// Stats returns the counters. Written and Bytes advance when the writer
// flushes.
func (l *Log) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	return Stats{Written: l.written.Load(), Dropped: l.dropped.Load(), Bytes: l.bytes.Load()}
}

// Close stops recording: it writes what is queued (and a final "dropped"
// row if needed), flushes, syncs and closes the file, and waits for the
// writer to exit. Records after Close are counted as dropped. Close is
// idempotent: every call waits for the same shutdown and returns the same
// error — that of the final write, sync or close, or the write error that
// left the file unwritable at the end.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.q)
		close(l.closing)
	}
	l.mu.Unlock()
	<-l.done
	return l.closeErr
}

// writeLoop is the writer goroutine: it owns w and the file. It sleeps
// until a record arrives, then lets the burst gather for FlushInterval
// (records queue meanwhile without waking it), writes what is queued in
// one write, and sleeps again: a busy daemon pays one wake-up and one
// write per interval, not per envelope, and an idle one none. A queue
// more than half full (Record says so) or Close cuts the wait short.
func (l *Log) writeLoop(w *writer) {
	defer close(l.done)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		r, ok := <-l.q
		if !ok {
			l.closeErr = w.close()
			return
		}
		w.take(&r)
		select {
		case <-l.hurry: // perhaps left from the last burst: the queue says
		default:
		}
		if len(l.q) <= cap(l.q)/2 {
			linger.Reset(w.opts.FlushInterval)
			select {
			case <-linger.C:
			case <-l.hurry:
				linger.Stop()
			case <-l.closing:
				linger.Stop()
			}
		}
		for drained := false; !drained; {
			select {
			case r, ok := <-l.q:
				if !ok {
					l.closeErr = w.close()
					return
				}
				w.take(&r)
				if len(w.buf) >= flushSize {
					w.flush()
				}
			default:
				drained = true
			}
		}
		w.flush()
	}
}

// take writes a record taken off the queue into the buffer.
func (w *writer) take(r *Record) {
	if w.opts.afterReceive != nil {
		w.opts.afterReceive()
	}
	w.write(r)
	w.reportDrops()
}

// writer is the state of writeLoop; only that goroutine touches it.
//
// Accounting: a record counts as written when the flush that carries its
// row succeeds, and as dropped when a failed write loses it. Rows still in
// buf are pending; a failed write counts all of them lost (some may have
// reached the file, partly), so Dropped may overstate a loss but never
// hides one.
type writer struct {
	l    *Log
	path string
	opts Options

	f    *os.File  // nil after a write error, until reopen succeeds
	out  io.Writer // f, or the test wrapper around it
	size int64     // bytes in the file, counting buf
	buf  []byte    // encoded rows not yet written
	tail []byte    // scratch for the row that triggers a rotation

	pendingRecs  uint64 // records in buf
	pendingDrops uint64 // sum of the counts of "dropped" rows in buf
	reported     uint64 // drops reported in rows written or in buf

	err       error     // the write error that closed f
	lastTry   time.Time // of the last failed reopen
	lastCheck time.Time // of the last look at what is at path (checkMoved)
}

func (w *writer) setFile(f *os.File, size int64) {
	w.f, w.out, w.size = f, io.Writer(f), size
	if w.opts.wrapFile != nil {
		w.out = w.opts.wrapFile(f)
	}
	w.err = nil
}

// write writes a caller's record, or counts it dropped.
func (w *writer) write(r *Record) {
	if w.reopen() && w.put(r) {
		w.pendingRecs++
		return
	}
	w.l.dropped.Add(1)
}

// reportDrops writes a "dropped" row for drops not yet reported.
func (w *writer) reportDrops() {
	n := w.l.dropped.Load() - w.reported
	if n == 0 || !w.reopen() {
		return
	}
	r := Record{Time: time.Now(), Event: EventDropped, Reason: strconv.FormatUint(n, 10)}
	if w.put(&r) {
		w.reported += n
		w.pendingDrops += n
	}
}

// put encodes r into buf, rotating the file first if the row would take
// it past MaxBytes. It reports whether the row is in buf; if not, the file
// failed (and f is nil).
func (w *writer) put(r *Record) bool {
	r.clamp(time.Now)
	mark := len(w.buf)
	w.buf = appendRecord(w.buf, r)
	if len(w.buf)-mark-1 > MaxLineSize { // only a body can make it so long
		r.Body = nil
		w.buf = appendRecord(w.buf[:mark], r)
	}
	n := int64(len(w.buf) - mark)
	if w.size > 0 && w.size+n > w.opts.MaxBytes {
		w.tail = append(w.tail[:0], w.buf[mark:]...)
		w.buf = w.buf[:mark]
		if !w.flush() || !w.rotate() {
			return false
		}
		w.buf = append(w.buf, w.tail...)
	}
	w.size += n
	return true
}

// flush writes buf to the file. It reports success; on failure the file
// is closed and the rows in buf are counted lost.
func (w *writer) flush() bool {
	if len(w.buf) == 0 {
		return true
	}
	w.checkMoved()
	if _, err := w.out.Write(w.buf); err != nil {
		w.fail(err)
		return false
	}
	w.l.written.Add(w.pendingRecs)
	w.l.bytes.Add(uint64(len(w.buf)))
	w.pendingRecs, w.pendingDrops = 0, 0
	w.resetBuf()
	return true
}

func (w *writer) resetBuf() {
	if cap(w.buf) > keepBufSize {
		w.buf = nil
	}
	w.buf = w.buf[:0]
}

// fail closes the file after a write error. The pending records are lost
// and the drops that pending "dropped" rows reported are unreported again,
// so the next row written after reopen reports all of it.
func (w *writer) fail(err error) {
	w.opts.Logger.Error("audit: write failed; records are dropped until the log can be reopened",
		"path", w.path, "err", err)
	w.l.dropped.Add(w.pendingRecs)
	w.reported -= w.pendingDrops
	w.pendingRecs, w.pendingDrops = 0, 0
	w.resetBuf()
	w.f.Close()
	w.f, w.out, w.err = nil, nil, err
	w.lastTry = time.Now()
}

// reopenInterval is the least time between attempts to reopen a file
// that failed, and between looks at whether the file was moved.
const reopenInterval = time.Second

// reopenEvery is reopenInterval, or the tests' Options.reopenEvery.
func (w *writer) reopenEvery() time.Duration {
	if w.opts.reopenEvery != 0 {
		return w.opts.reopenEvery
	}
	return reopenInterval
}

// checkMoved opens the log again at its path when the file there is no
// longer the one written: removed, or moved away (by hand, or by a log
// rotator without copytruncate). Writing on to an unlinked file would
// lose every row unseen; no write fails to say so. It looks at most once
// per reopenInterval.
func (w *writer) checkMoved() {
	if w.f == nil || time.Since(w.lastCheck) < w.reopenEvery() {
		return
	}
	w.lastCheck = time.Now()
	cur, err := w.f.Stat()
	if err != nil {
		return
	}
	at, err := os.Lstat(w.path)
	if err == nil && os.SameFile(cur, at) || err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
	f, size, err := openLog(w.path) // refuses anything but a regular file of ours
	if err != nil {
		w.opts.Logger.Error("audit: the log file was removed or moved away, and cannot be made again; writing on to the old one", "path", w.path, "err", err)
		return
	}
	w.opts.Logger.Warn("audit: the log file was removed or moved away; writing a new one", "path", w.path)
	w.f.Close()
	w.setFile(f, size+int64(len(w.buf))) // size counts buf
}

// reopen reports whether the file is open, trying to reopen it after a
// failure at most once per reopenInterval.
func (w *writer) reopen() bool {
	if w.f != nil {
		return true
	}
	if time.Since(w.lastTry) < w.reopenEvery() {
		return false
	}
	w.lastTry = time.Now()
	f, size, err := openLog(w.path)
	if err != nil {
		w.opts.Logger.Debug("audit: reopen failed", "path", w.path, "err", err)
		return false
	}
	w.setFile(f, size)
	w.opts.Logger.Info("audit: log reopened", "path", w.path)
	return true
}

// rotate renames the (flushed) file to path+".1" and opens a new one. If
// the rename fails it keeps writing the current file and tries again after
// another MaxBytes. It reports whether a file is open.
func (w *writer) rotate() bool {
	if err := w.f.Sync(); err != nil {
		w.opts.Logger.Warn("audit: sync before rotation failed", "path", w.path, "err", err)
	}
	if err := os.Rename(w.path, w.path+".1"); err != nil {
		w.opts.Logger.Error("audit: rotation failed; still writing the current file", "path", w.path, "err", err)
		w.size = 0
		return true
	}
	f, size, err := openLog(w.path)
	if err != nil {
		w.fail(err) // closes the old file; nothing is pending: buf was flushed
		return false
	}
	w.f.Close()
	w.setFile(f, size)
	return true
}

// close writes a final "dropped" row if needed, flushes, syncs and closes
// the file.
func (w *writer) close() error {
	w.lastTry = time.Time{} // one more reopen attempt if the file failed
	w.reportDrops()
	w.flush()
	if w.f == nil {
		return fmt.Errorf("audit: log unwritable at close: %w", w.err)
	}
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f, w.out = nil, nil
	if err != nil {
		return fmt.Errorf("audit: close: %w", err)
	}
	return nil
}

// openLog opens path for appending (see Open) and returns its size.
func openLog(path string) (*os.File, int64, error) {
	f, err := openFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = f.Chmod(0o600)
	}
	size := int64(0)
	if err == nil {
		size = fi.Size()
	}
	if err == nil && size > 0 {
		var last [1]byte
		if _, err = f.ReadAt(last[:], size-1); err == nil && last[0] != '\n' {
			_, err = f.Write([]byte{'\n'})
			size++
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	return f, size, nil
}

// Check reports whether Open would refuse the log at path for what is
// there: a symbolic link or anything but a regular file (wrapping
// [ErrNotRegular]). A missing file is fine: Open creates it. Check
// changes nothing (it opens the file to read, as Open opens it to
// write, and closes it).
func Check(path string) error {
	f, err := openFile(path, os.O_RDONLY) // Open's own rule
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// typeName names the type of a file that is not a regular file.
func typeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file of another type"
}
