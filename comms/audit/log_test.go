package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

func TestRoundTrip(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{})
	var want []Record
	for i := range 10 {
		r := rec(i)
		if i%3 == 0 {
			r.Dir, r.Event, r.CorrID, r.Reason, r.Attempt = DirIn, EventRefused, "c", "unknown peer", i
		}
		l.Record(r)
		want = append(want, r)
	}
	mustClose(t, l)
	sameRecords(t, readAll(t, path), want)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	st := l.Stats()
	if st.Written != 10 || st.Dropped != 0 || st.Bytes != uint64(fi.Size()) {
		t.Errorf("stats %+v, want 10 written, 0 dropped, %d bytes", st, fi.Size())
	}
}

func TestRecordFillsTime(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{})
	before := time.Now()
	l.Record(Record{Dir: DirOut, Event: EventSent})
	mustClose(t, l)
	recs := readAll(t, path)
	if len(recs) != 1 || recs[0].Time.Before(before.Add(-time.Second)) || recs[0].Time.After(time.Now()) {
		t.Fatalf("records %+v: time not filled with now", recs)
	}
}

// The writer cuts overlong fields and replaces unwritable times, so every
// row it writes can be read back.
func TestWriterClamps(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{})
	l.Record(Record{Time: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC), Event: "x", Reason: strings.Repeat("\x01", 10*MaxFieldSize)})
	mustClose(t, l)
	recs := readAll(t, path)
	if len(recs) != 1 || recs[0].Time.Year() > 9999 || len(recs[0].Reason) != MaxFieldSize {
		t.Fatalf("got %d records, year %d, reason %d bytes", len(recs), recs[0].Time.Year(), len(recs[0].Reason))
	}
}

func TestReopenAppends(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), FileName)
	var want []Record
	for round := range 3 {
		l, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := rec(round)
		l.Record(r)
		want = append(want, r)
		mustClose(t, l)
	}
	sameRecords(t, readAll(t, path), want)
}

// A log file removed or moved away while the log is open (by hand, or a
// log rotator) is made again at its path for the rows that follow; a
// file moved away keeps what was written before.
func TestRemovedOrMovedFileMadeAgain(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{FlushInterval: time.Millisecond, reopenEvery: time.Nanosecond})
	flushed := func(n uint64) {
		testutil.WaitFor(t, 10*time.Second, "rows written", func() bool { return l.Stats().Written >= n })
	}
	l.Record(rec(0))
	flushed(1)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l.Record(rec(1))
	flushed(2)
	sameRecords(t, readAll(t, path), []Record{rec(1)})
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	l.Record(rec(2))
	mustClose(t, l)
	sameRecords(t, readAll(t, path+".old"), []Record{rec(1)})
	sameRecords(t, readAll(t, path), []Record{rec(2)})
}

// A line cut by a crash is terminated on open, so it alone is lost.
func TestOpenRepairsPartialLine(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), FileName)
	first := rec(0)
	partial := appendRecord(nil, &first)
	partial = partial[:len(partial)/2]
	if err := os.WriteFile(path, partial, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(rec(1))
	mustClose(t, l)
	recs, st, err := Read(path, Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, recs, []Record{rec(1)})
	if st.Malformed != 1 || st.Lines != 2 {
		t.Errorf("stats %+v, want 2 lines, 1 malformed", st)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v not narrowed to 0600", fi.Mode().Perm())
	}
}

func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.log")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{"symlink": link, "dangling symlink": dangling, "directory": dir}
	addSpecialFiles(t, dir, paths)
	for name, p := range paths {
		t.Run(name, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			l, err := Open(p, Options{})
			if !errors.Is(err, ErrNotRegular) {
				l.Close()
				t.Fatalf("Open: err = %v, want ErrNotRegular", err)
			}
			if _, _, err := Read(p, Filter{}, 0); !errors.Is(err, ErrNotRegular) {
				t.Errorf("Read: err = %v, want ErrNotRegular", err)
			}
			if err := Check(p); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("Check: err = %v, want ErrNotRegular naming the path", err)
			}
		})
	}
	// What Open takes, Check takes: a regular file, or none yet.
	for _, p := range []string{target, filepath.Join(dir, "missing.log")} {
		if err := Check(p); err != nil {
			t.Errorf("Check(%s) = %v, want nil", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.log")); !errors.Is(err, os.ErrNotExist) {
		t.Error("Check created the log")
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Error("Open created the target of a dangling symlink")
	}
}

func TestRotation(t *testing.T) {
	testutil.CheckGoroutines(t)
	const maxBytes = 2000
	l, path := openTemp(t, Options{MaxBytes: maxBytes})
	const n = 100
	for i := range n {
		l.Record(rec(i))
	}
	mustClose(t, l)
	for _, p := range []string{path + ".1", path} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 || fi.Size() > maxBytes {
			t.Errorf("%s: %d bytes, want 1..%d", p, fi.Size(), maxBytes)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", p, fi.Mode().Perm())
		}
	}
	// Read spans both files in order, ending with the newest record; the
	// oldest were in files rotated away.
	recs := readAll(t, path)
	if len(recs) < 2 || len(recs) >= n {
		t.Fatalf("read %d records", len(recs))
	}
	first := n - len(recs)
	sameRecords(t, recs, recsRange(first, n))
	if st := l.Stats(); st.Written != n || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func recsRange(from, to int) []Record {
	var out []Record
	for i := from; i < to; i++ {
		out = append(out, rec(i))
	}
	return out
}

func TestBodies(t *testing.T) {
	body := `{"text": "hello",  "n": [1, 2]}`
	for _, tc := range []struct {
		name   string
		bodies bool
		body   string
		want   string // recorded body, "" for none
	}{
		{"stripped by default", false, body, ""},
		{"kept and compacted", true, body, `{"text":"hello","n":[1,2]}`},
		{"not JSON: kept as string", true, "plain\ntext", `"plain\ntext"`},
		{"too large: left out", true, `"` + strings.Repeat("a", MaxLineSize) + `"`, ""},
		{"escapes past the line limit: left out", true, strings.Repeat("\x01", MaxLineSize/2), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			l, path := openTemp(t, Options{Bodies: tc.bodies})
			buf := []byte(tc.body)
			r := rec(0)
			r.Body = buf
			l.Record(r)
			for i := range buf { // the caller reuses its buffer at once
				buf[i] = 'X'
			}
			mustClose(t, l)
			recs := readAll(t, path)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			if string(recs[0].Body) != tc.want {
				t.Errorf("body %.80q, want %.80q", recs[0].Body, tc.want)
			}
			if recs[0].Size != r.Size {
				t.Errorf("size %d, want %d", recs[0].Size, r.Size)
			}
		})
	}
}

// blockedLog opens a log whose writer, on taking its first record off the
// queue, waits until release is called. entered is closed when it does.
func blockedLog(t *testing.T, opts Options) (l *Log, path string, entered <-chan struct{}, release func()) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	opts.afterReceive = func() { once.Do(func() { close(in); <-out }) }
	l, path = openTemp(t, opts)
	var rel sync.Once
	release = func() { rel.Do(func() { close(out) }) }
	t.Cleanup(release) // before Close (cleanups run last-in first-out)
	return l, path, in, release
}

func TestQueueFullDropsAreReported(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path, entered, release := blockedLog(t, Options{QueueLen: 1})
	l.Record(rec(1))
	<-entered        // the writer holds rec 1; the queue is empty
	l.Record(rec(2)) // fills the queue
	l.Record(rec(3)) // dropped
	l.Record(rec(4)) // dropped
	if st := l.Stats(); st.Dropped != 2 {
		t.Fatalf("dropped %d before the writer resumed, want 2", st.Dropped)
	}
	release()
	mustClose(t, l)
	recs := readAll(t, path)
	if len(recs) != 3 {
		t.Fatalf("records %+v, want rec 1, a dropped row, rec 2", recs)
	}
	sameRecords(t, []Record{recs[0], recs[2]}, []Record{rec(1), rec(2)})
	if d := recs[1]; d.Event != EventDropped || d.Reason != "2" || d.Dir != "" || d.Peer != "" {
		t.Errorf("dropped row %+v, want event dropped, reason 2", d)
	}
	if st := l.Stats(); st.Written != 2 || st.Dropped != 2 {
		t.Errorf("stats %+v, want 2 written, 2 dropped", st)
	}
}

// failingFile fails every write while fail is set.
type failingFile struct {
	w    io.Writer
	fail *atomic.Bool
}

var errDiskFull = errors.New("test: disk full")

func (f failingFile) Write(p []byte) (int, error) {
	if f.fail.Load() {
		return 0, errDiskFull
	}
	return f.w.Write(p)
}

func TestWriteErrorCountsAndRecovers(t *testing.T) {
	for _, recover := range []bool{true, false} {
		t.Run(fmt.Sprintf("recover=%v", recover), func(t *testing.T) {
			testutil.CheckGoroutines(t)
			var fail atomic.Bool
			l, path := openTemp(t, Options{
				reopenEvery: time.Hour, // no reopen before Close
				wrapFile:    func(w io.Writer) io.Writer { return failingFile{w, &fail} },
			})
			l.Record(rec(0))
			testutil.WaitFor(t, 10*time.Second, "first record written", func() bool { return l.Stats().Written == 1 })
			fail.Store(true)
			l.Record(rec(1)) // its flush fails; the file is closed
			l.Record(rec(2)) // no file: dropped
			testutil.WaitFor(t, 10*time.Second, "two drops", func() bool { return l.Stats().Dropped == 2 })
			if recover {
				fail.Store(false)
			}
			err := l.Close()
			if st := l.Stats(); st.Written != 1 || st.Dropped != 2 {
				t.Errorf("stats %+v, want 1 written, 2 dropped", st)
			}
			recs := readAll(t, path)
			if !recover {
				if !errors.Is(err, errDiskFull) {
					t.Errorf("Close: %v, want the write error", err)
				}
				sameRecords(t, recs, []Record{rec(0)})
				return
			}
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			if len(recs) != 2 || recs[1].Event != EventDropped || recs[1].Reason != "2" {
				t.Fatalf("records %+v, want rec 0 and a dropped row of 2", recs)
			}
		})
	}
}

func TestConcurrentRecord(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{QueueLen: 64}) // small: some drops are likely
	const goroutines, each = 16, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				r := rec(i)
				r.Peer = "p" + strconv.Itoa(g)
				l.Record(r)
				if g == 0 && i == each/2 {
					l.Stats() // readers beside writers
				}
			}
		})
	}
	wg.Wait()
	mustClose(t, l)
	st := l.Stats()
	if st.Written+st.Dropped != goroutines*each {
		t.Fatalf("stats %+v: written+dropped != %d", st, goroutines*each)
	}
	recs := readAll(t, path)
	var rows, reported uint64
	for _, r := range recs {
		if r.Event == EventDropped {
			n, err := strconv.ParseUint(r.Reason, 10, 64)
			if err != nil {
				t.Fatalf("dropped row reason %q", r.Reason)
			}
			reported += n
			continue
		}
		rows++
	}
	if rows != st.Written || reported != st.Dropped {
		t.Errorf("file has %d rows and reports %d dropped; stats %+v", rows, reported, st)
	}
	t.Logf("written %d, dropped %d", st.Written, st.Dropped)
}

// Record racing with Close: every call is either written or counted.
func TestRecordDuringClose(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, _ := openTemp(t, Options{})
	const goroutines, each = 8, 2000
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				l.Record(rec(i))
			}
		})
	}
	close(start)
	errs := make(chan error, 2)
	for range 2 { // two Closes at once
		go func() { errs <- l.Close() }()
	}
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if st := l.Stats(); st.Written+st.Dropped != goroutines*each {
		t.Fatalf("stats %+v: written+dropped != %d", st, goroutines*each)
	}
}

func TestNilLog(t *testing.T) {
	var l *Log
	l.Record(rec(0))
	if st := l.Stats(); st != (Stats{}) {
		t.Errorf("Stats = %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

func TestRecordAfterClose(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{})
	l.Record(rec(0))
	mustClose(t, l)
	l.Record(rec(1))
	l.Record(rec(2))
	if st := l.Stats(); st.Written != 1 || st.Dropped != 2 {
		t.Errorf("stats %+v, want 1 written, 2 dropped", st)
	}
	mustClose(t, l) // idempotent
	sameRecords(t, readAll(t, path), []Record{rec(0)})
}

// Example of the rows a receiver writes.
func ExampleLog_Record() {
	dir, _ := os.MkdirTemp("", "audit")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, FileName)
	l, err := Open(path, Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	l.Record(Record{Time: at, Dir: DirIn, Event: EventReceived, Peer: "alice", Kind: "request", ID: "7d0c…", Size: 412})
	l.Record(Record{Time: at, Dir: DirIn, Event: EventRefused, Key: "ed25519:q83vEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0Vng=", Kind: "message", ID: "9a1f…", Size: 90, Reason: "unknown peer"})
	l.Close()
	recs, _, _ := Read(path, Filter{}, 0)
	FormatJSON(os.Stdout, recs[:1])
	Format(os.Stdout, recs)
	// Output:
	// {"time":"2026-05-06T07:08:09Z","dir":"in","event":"received","peer":"alice","kind":"request","id":"7d0c…","size":412}
	// TIME                      DIR  EVENT     PEER               KIND     ID     CORR  SIZE  REASON
	// 2026-05-06T07:08:09.000Z  in   received  alice              request  7d0c…  -     412   -
	// 2026-05-06T07:08:09.000Z  in   refused   ed25519:q83vEjRW…  message  9a1f…  -     90    unknown peer
}

// countingFile counts the writes that reach the file.
type countingFile struct {
	w      io.Writer
	writes *atomic.Int64
}

func (f countingFile) Write(p []byte) (int, error) {
	f.writes.Add(1)
	return f.w.Write(p)
}

// TestBurstIsOneWrite: the writer lets a burst gather and writes it at
// once (one wake-up and one write, not one per record), without Close;
// a queue filling past half cuts the wait short.
func TestBurstIsOneWrite(t *testing.T) {
	testutil.CheckGoroutines(t)
	var writes atomic.Int64
	l, path := openTemp(t, Options{
		FlushInterval: time.Second, // far longer than recording the burst takes
		wrapFile:      func(w io.Writer) io.Writer { return countingFile{w, &writes} },
	})
	const burst = 100
	for i := range burst {
		l.Record(rec(i))
	}
	testutil.WaitFor(t, 10*time.Second, "the burst written", func() bool { return l.Stats().Written == burst })
	if n := writes.Load(); n != 1 {
		t.Errorf("%d writes for a burst of %d records, want 1", n, burst)
	}
	if recs := readAll(t, path); len(recs) != burst {
		t.Errorf("file holds %d rows before Close, want %d", len(recs), burst)
	}
	mustClose(t, l)

	// A queue more than half full is written without waiting the interval.
	l, _ = openTemp(t, Options{QueueLen: 8, FlushInterval: time.Hour})
	for i := range 6 {
		l.Record(rec(i))
	}
	testutil.WaitFor(t, 10*time.Second, "a half-full queue written", func() bool { return l.Stats().Written == 6 })
	mustClose(t, l)
}
