package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLines writes recs as a log file at path.
func writeLines(t *testing.T, path string, recs ...Record) {
	t.Helper()
	var b []byte
	for i := range recs {
		b = appendRecord(b, &recs[i])
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadFilters(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	bob := "ed25519:Ym9iYm9iYm9iYm9iYm9iYm9iYm9iYm9iYm9iYm9iYm8="
	recs := []Record{
		{Time: ts(0), Dir: DirOut, Event: EventSent, Peer: "alice", Kind: "request", ID: "r1"},
		{Time: ts(1), Dir: DirIn, Event: EventRefused, Key: bob, Kind: "message", ID: "m1", Reason: "unknown peer"},
		{Time: ts(2), Dir: DirIn, Event: EventReceived, Peer: "alice", Kind: "response", ID: "s1", CorrID: "r1"},
		{Time: ts(3), Dir: DirOut, Event: EventSent, Peer: "bob", Key: bob, Kind: "message", ID: "m2"},
		{Time: ts(4), Event: EventDropped, Reason: "3"},
		{Time: ts(5), Dir: DirOut, Event: EventAcked, Peer: "bob", Key: bob, Kind: "ack", ID: "m2"},
	}
	// The first three in the rotated file, the rest in the current one.
	writeLines(t, path+".1", recs[:3]...)
	writeLines(t, path, recs[3:]...)
	pick := func(idx ...int) []Record {
		var out []Record
		for _, i := range idx {
			out = append(out, recs[i])
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		f     Filter
		limit int
		want  []Record
	}{
		{"all", Filter{}, 0, recs},
		{"limit keeps the newest", Filter{}, 2, pick(4, 5)},
		{"limit across files", Filter{}, 4, pick(2, 3, 4, 5)},
		{"limit above count", Filter{}, 100, recs},
		{"since inclusive", Filter{Since: ts(2)}, 0, pick(2, 3, 4, 5)},
		{"since after all", Filter{Since: ts(6)}, 0, nil},
		{"peer by name", Filter{Peer: "alice"}, 0, pick(0, 2)},
		{"peer by key", Filter{Peer: bob}, 0, pick(1, 3, 5)},
		{"peer by name only where named", Filter{Peer: "bob"}, 0, pick(3, 5)},
		{"peer unknown", Filter{Peer: "carol"}, 0, nil},
		{"event", Filter{Event: EventSent}, 0, pick(0, 3)},
		{"id matches id and corr id", Filter{ID: "r1"}, 0, pick(0, 2)},
		{"id of a message and its ack", Filter{ID: "m2"}, 0, pick(3, 5)},
		{"combined", Filter{Peer: bob, Event: EventSent, Since: ts(1)}, 0, pick(3)},
		{"combined with limit", Filter{Peer: bob}, 1, pick(5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st, err := Read(path, tc.f, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, got, tc.want)
			if st.Lines != len(recs) || st.Skipped() != 0 {
				t.Errorf("stats %+v", st)
			}
			if tc.limit <= 0 && st.Matched != len(tc.want) {
				t.Errorf("matched %d, want %d", st.Matched, len(tc.want))
			}
		})
	}
}

func TestReadSkipsBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	good := func(n int) string { r := rec(n); return string(appendRecord(nil, &r)) }
	content := strings.Join([]string{
		good(0),
		"garbage\n",
		"\n",                                   // blank: ignored
		"   \t\r\n",                            // blank too
		"{\"time\":\"2026-03-04T05:06:07Z\"\n", // cut short
		`{"time":"` + strings.Repeat("x", MaxLineSize) + "\"}\n",          // too long
		strings.Repeat("y", 3*MaxLineSize) + "\n",                         // far too long
		strings.TrimSuffix(good(1), "\n") + "\r\n",                        // CRLF
		`{"time":"2026-03-04T05:06:07Z","event":"x","size":"big"}` + "\n", // wrong type
		"\x00\xff\xfe\n",
		strings.TrimSuffix(good(2), "\n"), // last line without newline
	}, "")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, st, err := Read(path, Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, recs, []Record{rec(0), rec(1), rec(2)})
	want := ReadStats{Lines: 9, Matched: 3, Malformed: 4, TooLong: 2}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// A line of exactly MaxLineSize bytes is read; one byte more is skipped.
func TestReadLineLimit(t *testing.T) {
	for _, extra := range []int{0, 1} {
		path := filepath.Join(t.TempDir(), FileName)
		prefix := `{"time":"2026-03-04T05:06:07Z","event":"x","reason":"`
		pad := MaxLineSize - len(prefix) - len(`"}`) + extra
		line := prefix + strings.Repeat("r", pad) + "\"}\n"
		if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		recs, st, err := Read(path, Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if extra == 0 && (len(recs) != 1 || st.TooLong != 0) {
			t.Errorf("line of MaxLineSize: %d records, stats %+v", len(recs), st)
		}
		if extra == 1 && (len(recs) != 0 || st.TooLong != 1) {
			t.Errorf("line of MaxLineSize+1: %d records, stats %+v", len(recs), st)
		}
	}
}

func TestReadMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if _, _, err := Read(path, Filter{}, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no files: err = %v, want ErrNotExist", err)
	}
	// Only the rotated file (a rotation in progress): fine.
	writeLines(t, path+".1", rec(0))
	recs, _, err := Read(path, Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, recs, []Record{rec(0)})
}

func TestRing(t *testing.T) {
	for _, tc := range []struct{ limit, n int }{{0, 5}, {-1, 5}, {1, 0}, {1, 5}, {3, 3}, {3, 7}, {5, 2}} {
		r := newRing(tc.limit)
		for i := range tc.n {
			r.add(rec(i))
		}
		from := 0
		if tc.limit > 0 && tc.n > tc.limit {
			from = tc.n - tc.limit
		}
		got := r.records()
		if len(got) != tc.n-from {
			t.Fatalf("limit %d, %d added: %d kept", tc.limit, tc.n, len(got))
		}
		for i := range got {
			if !sameRecord(got[i], rec(from+i)) {
				t.Fatalf("limit %d, %d added: record %d is %s", tc.limit, tc.n, i, got[i].ID)
			}
		}
	}
}
