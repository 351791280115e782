package audit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"
)

// DefaultPollInterval is how often [Follow] looks for new rows.
const DefaultPollInterval = 250 * time.Millisecond

// FollowOptions are [Follow]'s knobs; the zero value is usable.
type FollowOptions struct {
	Filter Filter
	// Limit keeps the newest Limit of the rows already in the log
	// (0: all); rows written later are all passed on.
	Limit int
	// Poll is how often the files are looked at (default
	// DefaultPollInterval).
	Poll time.Duration
}

// Follow passes the records of the log at path that pass opts.Filter to
// emit: first those already there, as [Read] returns them (one call, even
// if there are none), then, until ctx ends, each batch of rows written
// since, as `tail -F` does. It follows the log across rotations: when
// path is renamed to path+".1" and a new path started, it reads the rest
// of the renamed file before the new one, so that no row is repeated or
// lost — unless the log rotates twice between two looks, when the rows of
// a file already replaced are gone. A missing log is waited for. Only
// whole lines are read; one being written is read once its newline is
// there. The stats given to emit add up everything read so far.
//
// Follow returns nil when ctx ends, or the first error from emit or from
// opening or reading a file (as [Read], a symbolic link is refused with
// [ErrNotRegular]).
func Follow(ctx context.Context, path string, opts FollowOptions, emit func([]Record, ReadStats) error) error {
	poll := opts.Poll
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	fl := &follower{path: path, filter: opts.Filter}
	defer fl.close()

	// The rows already there: path+".1" unless it is the file now at path
	// (a rotation between the two opens), then path.
	ring := newRing(opts.Limit)
	add := func(r Record) { ring.add(r) }
	if err := fl.open(); err != nil {
		return err
	}
	if err := fl.readRotated(add, nil); err != nil {
		return err
	}
	if err := fl.readCur(add); err != nil {
		return err
	}
	if err := emit(ring.records(), fl.st); err != nil {
		return err
	}

	t := time.NewTicker(poll)
	defer t.Stop()
	var batch []Record
	add = func(r Record) { batch = append(batch, r) }
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		batch = batch[:0]
		if err := fl.step(add); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := emit(batch, fl.st); err != nil {
				return err
			}
		}
	}
}

// follower reads a log as it grows and rotates.
type follower struct {
	path   string
	filter Filter
	st     ReadStats

	cur     *os.File    // the file being followed; nil: none yet
	curInfo os.FileInfo // its identity
	partial []byte      // the start of a line whose newline has not come
	tooLong bool        // partial grew past MaxLineSize: skip to the newline
}

// open opens path as the file followed, if it exists.
func (fl *follower) open() error {
	f, err := openFile(fl.path, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	fl.cur, fl.curInfo, fl.partial, fl.tooLong = f, fi, fl.partial[:0], false
	return nil
}

func (fl *follower) close() {
	if fl.cur != nil {
		fl.cur.Close()
		fl.cur = nil
	}
}

// readRotated reads all of path+".1" unless it is the file followed or
// one of skip (already read).
func (fl *follower) readRotated(add func(Record), skip []os.FileInfo) error {
	f, err := openFile(fl.path+".1", os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fl.cur != nil && os.SameFile(fi, fl.curInfo) {
		return nil
	}
	for _, s := range skip {
		if s != nil && os.SameFile(fi, s) {
			return nil
		}
	}
	return readFile(fl.path+".1", &fl.st, fl.lineFunc(add))
}

// step reads what was added to the followed file and moves to a new file
// at path once the followed one was rotated away.
func (fl *follower) step(add func(Record)) error {
	if fl.cur == nil {
		if err := fl.open(); err != nil || fl.cur == nil {
			return err
		}
		return fl.readCur(add)
	}
	if err := fl.readCur(add); err != nil {
		return err
	}
	fi, err := os.Lstat(fl.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // renamed, the new file not there yet
	case err != nil:
		return err
	case os.SameFile(fi, fl.curInfo):
		if fi.Size() < fl.offset() { // truncated: start again
			if _, err := fl.cur.Seek(0, io.SeekStart); err != nil {
				return err
			}
			fl.partial, fl.tooLong = fl.partial[:0], false
			return fl.readCur(add)
		}
		return nil
	}
	// Rotated: the writer flushed the old file before renaming it, so
	// what is left of it is there now.
	if err := fl.readCur(add); err != nil {
		return err
	}
	if len(fl.partial) > 0 && !fl.tooLong { // an unfinished last line: as Read, let ParseLine judge it
		fl.line(fl.partial, add)
	}
	old := fl.curInfo
	fl.close()
	if err := fl.open(); err != nil {
		return err
	}
	// Rotated twice since the last look: the file in between is now
	// path+".1".
	if err := fl.readRotated(add, []os.FileInfo{old}); err != nil {
		return err
	}
	if fl.cur == nil {
		return nil
	}
	return fl.readCur(add)
}

// offset is how far the followed file has been read.
func (fl *follower) offset() int64 {
	off, err := fl.cur.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0
	}
	return off
}

// readCur reads the followed file's whole lines up to its end, keeping
// an unfinished last line for later.
func (fl *follower) readCur(add func(Record)) error {
	if fl.cur == nil {
		return nil
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := fl.cur.Read(buf)
		data := buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				fl.hold(data)
				break
			}
			fl.hold(data[:i])
			if fl.tooLong {
				fl.st.Lines++
				fl.st.TooLong++
			} else {
				fl.line(fl.partial, add)
			}
			fl.partial, fl.tooLong = fl.partial[:0], false
			data = data[i+1:]
		}
		if err == io.EOF || (err == nil && n == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// hold adds b to the unfinished line, or drops it if the line is too long.
func (fl *follower) hold(b []byte) {
	if fl.tooLong {
		return
	}
	if len(fl.partial)+len(b) > MaxLineSize+2 {
		fl.partial, fl.tooLong = fl.partial[:0], true
		return
	}
	fl.partial = append(fl.partial, b...)
}

// line handles one line as readFile does.
func (fl *follower) line(line []byte, add func(Record)) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if len(line) > MaxLineSize {
		fl.st.Lines++
		fl.st.TooLong++
		return
	}
	fl.st.Lines++
	fl.lineFunc(add)(line)
}

// lineFunc parses a line, counts it and passes it on if it matches.
func (fl *follower) lineFunc(add func(Record)) func([]byte) {
	return func(line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			fl.st.Malformed++
			return
		}
		if fl.filter.Match(&r) {
			fl.st.Matched++
			add(r)
		}
	}
}
