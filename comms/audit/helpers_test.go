package audit

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// openTemp opens a log in a fresh temp dir; it is closed at cleanup (a
// second Close is harmless).
func openTemp(t testing.TB, opts Options) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func mustClose(t *testing.T, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// readAll reads the whole log and fails on an error or a skipped line.
func readAll(t *testing.T, path string) []Record {
	t.Helper()
	recs, st, err := Read(path, Filter{}, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if st.Skipped() != 0 {
		t.Fatalf("Read skipped lines: %+v", st)
	}
	return recs
}

// ts is a fixed time plus n seconds.
func ts(n int) time.Time {
	return time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.UTC).Add(time.Duration(n) * time.Second)
}

// rec is a plausible outbound record numbered n.
func rec(n int) Record {
	return Record{
		Time:  ts(n),
		Dir:   DirOut,
		Event: EventSent,
		Peer:  "alice",
		Key:   "ed25519:AAAAC3NzaC1lZDI1NTE5AAAAIGZvb2Jhcg",
		Kind:  "message",
		ID:    fmt.Sprintf("00000000-0000-4000-8000-%012d", n),
		Size:  100 + n,
	}
}

// sameRecord compares records field by field, times with Equal and
// bodies byte-wise (nil and empty alike).
func sameRecord(a, b Record) bool {
	if !a.Time.Equal(b.Time) || !bytes.Equal(a.Body, b.Body) {
		return false
	}
	a.Time, b.Time, a.Body, b.Body = time.Time{}, time.Time{}, nil, nil
	return reflect.DeepEqual(a, b)
}

func sameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d\ngot:  %+v\nwant: %+v", len(got), len(want), got, want)
	}
	for i := range got {
		if !sameRecord(got[i], want[i]) {
			t.Fatalf("record %d:\ngot:  %+v\nwant: %+v", i, got[i], want[i])
		}
	}
}
