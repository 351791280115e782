package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// collector gathers what Follow emits.
type collector struct {
	mu    sync.Mutex
	calls int
	ids   []string
	st    ReadStats
}

func (c *collector) emit(recs []Record, st ReadStats) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	for _, r := range recs {
		c.ids = append(c.ids, r.ID)
	}
	c.st = st
	return nil
}

func (c *collector) snapshot() ([]string, int, ReadStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...), c.calls, c.st
}

// startFollow runs Follow on path until the returned stop is called; stop
// returns Follow's error.
func startFollow(t *testing.T, path string, opts FollowOptions) (*collector, func() error) {
	t.Helper()
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, path, opts, c.emit) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Follow did not return after its context ended")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return c, stop
}

// A follower started on a log prints the rows there, then every row
// written afterwards, across rotations, each once and in order.
func TestFollowAcrossRotations(t *testing.T) {
	testutil.CheckGoroutines(t)
	// Rows are about 230 bytes: a file of 2000 bytes rotates every ~8.
	l, path := openTemp(t, Options{MaxBytes: 2000, FlushInterval: time.Millisecond})
	var want []string
	write := func(from, to int) {
		for i := from; i < to; i++ {
			r := rec(i)
			l.Record(r)
			want = append(want, r.ID)
		}
	}
	write(0, 12) // one rotation already: rows in audit.log.1 and audit.log
	testutil.WaitFor(t, 10*time.Second, "the first rows on disk", func() bool { return len(readAll(t, path)) == 12 })

	c, stop := startFollow(t, path, FollowOptions{Poll: 2 * time.Millisecond, Filter: Filter{Event: EventSent}})
	testutil.WaitFor(t, 10*time.Second, "the rows already there", func() bool { ids, _, _ := c.snapshot(); return len(ids) == 12 })
	// Batches of five rows, less than a file: at most one rotation
	// between two looks when each batch is awaited.
	rotations := 0
	for b := 0; b < 12; b++ {
		before, _ := os.Stat(path)
		write(12+5*b, 17+5*b)
		n := len(want)
		testutil.WaitFor(t, 10*time.Second, "a batch", func() bool { ids, _, _ := c.snapshot(); return len(ids) >= n })
		if after, err := os.Stat(path); err == nil && before != nil && !os.SameFile(before, after) {
			rotations++
		}
	}
	// A row of another event is filtered out.
	other := rec(1000)
	other.Event = EventAcked
	l.Record(other)
	write(72, 73)
	n := len(want)
	testutil.WaitFor(t, 10*time.Second, "the last row", func() bool { ids, _, _ := c.snapshot(); return len(ids) >= n })
	if err := stop(); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	ids, calls, st := c.snapshot()
	if len(ids) != len(want) {
		t.Fatalf("followed %d rows, want %d", len(ids), len(want))
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("row %d is %s, want %s (a row lost or repeated)", i, ids[i], want[i])
		}
	}
	if rotations < 3 {
		t.Errorf("only %d rotations while following; the test should cross several", rotations)
	}
	if calls < 2 || st.Skipped() != 0 || st.Matched != len(want) {
		t.Errorf("%d calls, stats %+v", calls, st)
	}
}

// Limit applies to the rows already there; a missing log is waited for;
// a line is read once it is whole.
func TestFollowLimitMissingAndPartial(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := filepath.Join(t.TempDir(), FileName)
	c, stop := startFollow(t, path, FollowOptions{Poll: 2 * time.Millisecond, Limit: 1})
	testutil.WaitFor(t, 10*time.Second, "the first (empty) batch", func() bool { _, calls, _ := c.snapshot(); return calls == 1 })

	line := func(n int) []byte { return appendRecord(nil, func() *Record { r := rec(n); return &r }()) }
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	whole := line(1)
	if _, err := f.Write(whole[:10]); err != nil { // a write in progress
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // polls see only the unfinished line (not a timing assertion: any wait works)
	if ids, _, _ := c.snapshot(); len(ids) != 0 {
		t.Fatalf("an unfinished line was emitted: %v", ids)
	}
	f.Write(whole[10:])
	f.Write([]byte("not json\n"))
	f.Write(line(2))
	testutil.WaitFor(t, 10*time.Second, "the two rows", func() bool { ids, _, _ := c.snapshot(); return len(ids) == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ids, _, st := c.snapshot()
	if ids[0] != rec(1).ID || ids[1] != rec(2).ID || st.Malformed != 1 {
		t.Fatalf("rows %v, stats %+v", ids, st)
	}

	// Started again: only the newest row already there (Limit 1).
	c2, stop2 := startFollow(t, path, FollowOptions{Poll: 2 * time.Millisecond, Limit: 1})
	testutil.WaitFor(t, 10*time.Second, "the first batch", func() bool { _, calls, _ := c2.snapshot(); return calls == 1 })
	stop2()
	if ids, _, _ := c2.snapshot(); len(ids) != 1 || ids[0] != rec(2).ID {
		t.Fatalf("with Limit 1: %v", ids)
	}
}

// An error from emit ends Follow with it; a symbolic link is refused.
func TestFollowErrors(t *testing.T) {
	testutil.CheckGoroutines(t)
	l, path := openTemp(t, Options{})
	l.Record(rec(1))
	mustClose(t, l)
	boom := errors.New("boom")
	err := Follow(context.Background(), path, FollowOptions{}, func([]Record, ReadStats) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Follow = %v, want the emit error", err)
	}
	link := filepath.Join(t.TempDir(), FileName)
	if err := os.Symlink(path, link); err != nil {
		t.Skip(err)
	}
	err = Follow(context.Background(), link, FollowOptions{}, func([]Record, ReadStats) error { return nil })
	if !errors.Is(err, ErrNotRegular) {
		t.Fatalf("Follow on a symbolic link = %v", err)
	}
}

// Two rotations between two looks: the rest of the followed file (still
// open), then the file in between (now path+".1"), then the new one.
func TestFollowerTwoRotationsBetweenLooks(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	n := 0
	appendRows := func(p string, k int) {
		t.Helper()
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for range k {
			r := rec(n)
			n++
			if _, err := f.Write(appendRecord(nil, &r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendRows(path, 2)
	fl := &follower{path: path}
	defer fl.close()
	var ids []string
	add := func(r Record) { ids = append(ids, r.ID) }
	if err := fl.open(); err != nil {
		t.Fatal(err)
	}
	if err := fl.step(add); err != nil {
		t.Fatal(err)
	}
	appendRows(path, 2) // more in the first file, unread
	for range 2 {
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		appendRows(path, 3)
	}
	if err := fl.step(add); err != nil {
		t.Fatal(err)
	}
	if err := fl.step(add); err != nil { // nothing new
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("read %d rows, want %d: %v", len(ids), n, ids)
	}
	for i, id := range ids {
		if id != rec(i).ID {
			t.Fatalf("row %d is %s, want %s", i, id, rec(i).ID)
		}
	}
}
