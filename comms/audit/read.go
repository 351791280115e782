package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Filter selects records for [Read]. A zero field matches everything; the
// fields combine with AND.
type Filter struct {
	Since time.Time // records at or after Since
	Peer  string    // records whose Peer or Key equals it (trust-list name or "ed25519:…" text)
	Event string    // records of this event
	ID    string    // records whose ID or CorrID equals it: an envelope and its responses and acks
}

// Match reports whether r passes f.
func (f *Filter) Match(r *Record) bool {
	return (f.Since.IsZero() || !r.Time.Before(f.Since)) &&
		(f.Peer == "" || r.Peer == f.Peer || r.Key == f.Peer) &&
		(f.Event == "" || r.Event == f.Event) &&
		(f.ID == "" || r.ID == f.ID || r.CorrID == f.ID)
}

// ReadStats says what [Read] saw. Blank lines are ignored and not counted.
type ReadStats struct {
	Lines     int // lines read, malformed and too long ones included
	Matched   int // records that passed the filter (more than returned if limit cut them)
	Malformed int // lines skipped because ParseLine rejected them
	TooLong   int // lines skipped because they are longer than MaxLineSize
}

// Skipped is the number of lines that were not records.
func (s ReadStats) Skipped() int { return s.Malformed + s.TooLong }

// Read returns the records of the log at path that pass f, oldest first
// (in file order: path+".1", then path), keeping only the newest limit of
// them; limit <= 0 keeps all. It streams the files, so memory is bounded by
// limit records and one line of [MaxLineSize].
//
// The files are untrusted: lines that do not parse or are too long are
// skipped and counted in the returned ReadStats, never fatal. A missing
// path+".1" is normal; if path is missing too, the error wraps
// fs.ErrNotExist. A symbolic link or other non-regular file is refused with
// [ErrNotRegular]. On an I/O error Read returns what it has read so far
// with the error.
func Read(path string, f Filter, limit int) ([]Record, ReadStats, error) {
	var st ReadStats
	ring := newRing(limit)
	found := false
	for _, p := range []string{path + ".1", path} {
		err := readFile(p, &st, func(line []byte) {
			r, err := ParseLine(line)
			if err != nil {
				st.Malformed++
				return
			}
			if f.Match(&r) {
				st.Matched++
				ring.add(r)
			}
		})
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return ring.records(), st, err
		default:
			found = true
		}
	}
	if !found {
		return nil, st, fmt.Errorf("audit: no log at %s: %w", path, fs.ErrNotExist)
	}
	return ring.records(), st, nil
}

// readFile calls fn for each non-blank line of path that is at most
// MaxLineSize long (newline and a preceding \r removed), counting lines and
// skipping longer ones without holding them in memory. A last line without
// a newline (a write in progress, or a crash) is passed on too; ParseLine
// decides.
func readFile(path string, st *ReadStats, fn func(line []byte)) error {
	file, err := openFile(path, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer file.Close()
	br := bufio.NewReaderSize(file, 64<<10)
	var long []byte // a line longer than the reader's buffer, assembled
	tooLong := false
	for {
		frag, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if !tooLong && len(long)+len(frag) > MaxLineSize+2 {
				tooLong, long = true, long[:0]
			}
			if !tooLong {
				long = append(long, frag...)
			}
			continue
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %s: %w", path, err)
		}
		line := frag
		if len(long) > 0 {
			line = append(long, frag...)
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'})
		switch {
		case tooLong || len(line) > MaxLineSize:
			st.Lines++
			st.TooLong++
		case len(bytes.TrimSpace(line)) == 0:
		default:
			st.Lines++
			fn(line)
		}
		long, tooLong = long[:0], false
		if err == io.EOF {
			return nil
		}
	}
}

// ring keeps the last n records added, or all of them if n <= 0. It grows
// as records arrive, so a large n costs nothing until it is used.
type ring struct {
	n    int
	recs []Record
	next int // once full: index of the oldest record
}

func newRing(n int) *ring { return &ring{n: n} }

func (r *ring) add(rec Record) {
	if r.n <= 0 || len(r.recs) < r.n {
		r.recs = append(r.recs, rec)
		return
	}
	r.recs[r.next] = rec
	r.next = (r.next + 1) % r.n
}

// records returns the records oldest first.
func (r *ring) records() []Record {
	if r.next == 0 {
		return r.recs
	}
	out := make([]Record, 0, len(r.recs))
	out = append(out, r.recs[r.next:]...)
	return append(out, r.recs[:r.next]...)
}
