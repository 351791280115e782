package audit

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	recs := []Record{
		{Time: ts(0), Dir: DirOut, Event: EventRetry, Peer: "alice", Kind: "request", ID: "r1", Size: 10, Attempt: 2, Reason: "dial: refused"},
		{Time: ts(1), Dir: DirIn, Event: EventRefused, Key: "ed25519:short", Kind: "mes\x1b[2Jsage", ID: "m\t1", Reason: "bad\nline \u202e\xff\\"},
		{Time: ts(2), Dir: DirIn, Event: EventReceived, Peer: "bob", Kind: "response", ID: "s1", CorrID: "r1", Reason: strings.Repeat("z", 200)},
		{Time: ts(3), Dir: DirIn, Event: EventRefused, Claimed: "ed25519:AAAAAAAAAAAAAAAAAAAA", Kind: "message", Size: 9000, Reason: "bad_signature", Count: 1000},
	}
	var buf bytes.Buffer
	if err := Format(&buf, recs); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"TIME                      DIR  EVENT     PEER                       KIND            ID    CORR  SIZE  REASON\n" +
		"2026-03-04T05:06:07.890Z  out  retry     alice                      request         r1    -     10    attempt 2 dial: refused\n" +
		"2026-03-04T05:06:08.890Z  in   refused   ed25519:short              mes\\x1b[2Jsage  m\\t1  -     -     bad\\nline \\u202e\\xff\\\\\n" +
		"2026-03-04T05:06:09.890Z  in   received  bob                        response        s1    r1    -     " + strings.Repeat("z", maxReasonLen) + "…\n" +
		"2026-03-04T05:06:10.890Z  in   refused   claimed ed25519:AAAAAAAA…  message         -     -     9000  bad_signature ×1000\n"
	if got := buf.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, b := range buf.Bytes() {
		if b < 0x20 && b != '\n' {
			t.Fatalf("control byte %#x in table", b)
		}
	}
}

func TestFormatJSON(t *testing.T) {
	recs := []Record{rec(0), {Time: ts(1), Event: EventDropped, Reason: "4"}, {Time: ts(2), Event: "x", Reason: "a\nb", Body: json.RawMessage(`{"k":1}`)}}
	var buf bytes.Buffer
	if err := FormatJSON(&buf, recs); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("%d lines for %d records:\n%s", len(lines), len(recs), buf.String())
	}
	for i, line := range lines {
		r, err := ParseLine([]byte(line))
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !sameRecord(r, recs[i]) {
			t.Errorf("line %d: got %+v, want %+v", i, r, recs[i])
		}
	}
}

func TestExcerpt(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 8, ""},
		{"message", 8, "message"},
		{"messages!", 8, "messages…"},
		{"a\x1b[31mb", 64, `a\x1b[31mb`},
		{"a\x1b[31mb", 3, "a…"}, // not half an escape
		{"é\xffé", 64, `é\xffé`},
		{"éé", 3, "é…"}, // not half a rune
		{"tab\there", 64, `tab\there`},
		{"\u2028", 64, `\u2028`},
	} {
		if got := Excerpt(c.in, c.n); got != c.want {
			t.Errorf("Excerpt(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
	long := strings.Repeat("\x00", 4<<10)
	if got := Excerpt(long, 64); len(got) > 64+len("…") {
		t.Errorf("a 4 KiB text gives a %d-byte excerpt", len(got))
	}
}

// Rows printed a batch at a time (--follow) line up with the header and
// the first batch: each column starts where it did.
func TestFormatFollowAligned(t *testing.T) {
	var first, later bytes.Buffer
	if err := FormatFollow(&first, []Record{
		{Time: ts(0), Dir: DirOut, Event: EventRetry, Peer: "alice", Kind: "request", ID: "0b9d6f6e-0000-4000-8000-000000000001", Size: 10, Reason: "refused"},
	}, true); err != nil {
		t.Fatal(err)
	}
	if err := FormatFollow(&later, []Record{
		{Time: ts(1), Dir: DirIn, Event: EventAcks, Peer: "bo", Kind: "ack", ID: "x", Count: 3},
		{Time: ts(2), Dir: DirOut, Event: EventDroppedDeadLetter, Key: "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", Kind: "message", ID: "y"},
		{Time: ts(3), Dir: DirIn, Event: EventRefused, Claimed: "ed25519:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB=", Kind: "message", ID: "z"},
	}, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(first.String()+later.String(), "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("lines %q", lines)
	}
	// The column starts of each line, in runes (as a terminal shows
	// them): after each run of two or more spaces.
	starts := func(s string) []int {
		r := []rune(s)
		var out []int
		for i := 2; i < len(r); i++ {
			if r[i] != ' ' && r[i-1] == ' ' && r[i-2] == ' ' {
				out = append(out, i)
			}
		}
		return out
	}
	head := starts(lines[0])
	for _, l := range lines[1:] {
		if got := starts(l); len(got) < 6 || !slices.Equal(got[:6], head[:6]) {
			t.Errorf("columns of %q start at %v; the header's at %v", l, got, head)
		}
	}
}
