package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	full := Record{
		Time: ts(0), Dir: DirIn, Event: EventReceived, Peer: "bob", Key: "ed25519:Zm9v",
		Claimed: "ed25519:YmFy", Kind: "response", ID: "id-1", CorrID: "id-0", Size: 321, Reason: "r", Attempt: 2,
		Count: 7, Sealed: true, Body: json.RawMessage(`{"a":[1,2]}`),
	}
	ok := []struct {
		name string
		line string
		want Record
	}{
		{"full", `{"time":"2026-03-04T05:06:07.890123456Z","dir":"in","event":"received","peer":"bob","key":"ed25519:Zm9v","claimed":"ed25519:YmFy","kind":"response","id":"id-1","corr_id":"id-0","size":321,"reason":"r","attempt":2,"count":7,"sealed":true,"body":{"a":[1,2]}}`, full},
		{"minimal", `{"time":"2026-03-04T05:06:07.890123456Z","event":"dropped"}`, Record{Time: ts(0), Event: EventDropped}},
		{"with newline", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x"}` + "\n", Record{Time: ts(0), Event: "x"}},
		{"with CRLF", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x"}` + "\r\n", Record{Time: ts(0), Event: "x"}},
		{"offset time is UTC", `{"time":"2026-03-04T07:06:07.890123456+02:00","event":"x"}`, Record{Time: ts(0), Event: "x"}},
		{"unknown fields ignored", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","hop":3,"extra":{"y":[]}}`, Record{Time: ts(0), Event: "x"}},
		{"unknown event kept", `{"time":"2026-03-04T05:06:07.890123456Z","event":"teleported","dir":"sideways"}`, Record{Time: ts(0), Event: "teleported", Dir: "sideways"}},
		{"no event is still a row", `{"time":"2026-03-04T05:06:07.890123456Z"}`, Record{Time: ts(0)}},
		{"body compacted", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","body": { "a" : [ 1 , 2 ] } }`, Record{Time: ts(0), Event: "x", Body: json.RawMessage(`{"a":[1,2]}`)}},
		{"body null is none", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","body":null}`, Record{Time: ts(0), Event: "x"}},
		{"body string", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","body":"not json\u0000"}`, Record{Time: ts(0), Event: "x", Body: json.RawMessage(`"not json\u0000"`)}},
		{"escapes decoded", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","reason":"a\tb\u001b[31m\ud83d\ude00"}`, Record{Time: ts(0), Event: "x", Reason: "a\tb\x1b[31m😀"}},
		{"invalid UTF-8 replaced", "{\"time\":\"2026-03-04T05:06:07.890123456Z\",\"event\":\"x\",\"peer\":\"a\xffb\"}", Record{Time: ts(0), Event: "x", Peer: "a\ufffdb"}},
		{"duplicate key: last wins", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","event":"y"}`, Record{Time: ts(0), Event: "y"}},
		{"negative size kept", `{"time":"2026-03-04T05:06:07.890123456Z","event":"x","size":-1}`, Record{Time: ts(0), Event: "x", Size: -1}},
		{"year zero", `{"time":"0000-01-01T00:00:00Z","event":"x"}`, Record{Time: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), Event: "x"}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine([]byte(tc.line))
			if err != nil {
				t.Fatalf("ParseLine: %v", err)
			}
			if !sameRecord(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if got.Time.Location() != time.UTC {
				t.Errorf("time location %v, want UTC", got.Time.Location())
			}
		})
	}

	bad := []struct{ name, line string }{
		{"empty", ""},
		{"blank", "  "},
		{"not JSON", "hello SECRET"},
		{"truncated", `{"time":"2026-03-04T05:06:07Z","event":"x"`},
		{"trailing garbage", `{"time":"2026-03-04T05:06:07Z","event":"x"} {}`},
		{"array", `[1,2]`},
		{"string", `"SECRET"`},
		{"null", `null`},
		{"no time", `{"event":"sent"}`},
		{"zero time", `{"time":"0001-01-01T00:00:00Z","event":"x"}`},
		{"null time", `{"time":null,"event":"x"}`},
		{"time not RFC 3339", `{"time":"SECRET 2026-03-04 05:06:07","event":"x"}`},
		{"time 24:00", `{"time":"2026-03-04T24:00:00Z","event":"x"}`},
		{"time year 10000", `{"time":"10000-01-01T00:00:00Z","event":"x"}`},
		{"time before year 0 in UTC", `{"time":"0000-01-01T00:00:00+01:00","event":"x"}`},
		{"time after year 9999 in UTC", `{"time":"9999-12-31T23:30:00-01:00","event":"x"}`},
		{"time number", `{"time":1700000000,"event":"x"}`},
		{"event number", `{"time":"2026-03-04T05:06:07Z","event":7}`},
		{"size string", `{"time":"2026-03-04T05:06:07Z","event":"x","size":"SECRET"}`},
		{"size fraction", `{"time":"2026-03-04T05:06:07Z","event":"x","size":1.5}`},
		{"size overflow", `{"time":"2026-03-04T05:06:07Z","event":"x","size":99999999999999999999999}`},
		{"body invalid UTF-8", "{\"time\":\"2026-03-04T05:06:07Z\",\"event\":\"x\",\"body\":\"\xff\"}"},
		{"too long", `{"time":"2026-03-04T05:06:07Z","event":"x","reason":"` + strings.Repeat("a", MaxLineSize) + `"}`},
		{"deep nesting", `{"time":"2026-03-04T05:06:07Z","event":"x","body":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`},
	}
	for _, tc := range bad {
		t.Run("bad/"+tc.name, func(t *testing.T) {
			_, err := ParseLine([]byte(tc.line))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error quotes the line: %v", err)
			}
		})
	}
}

// encodeJSON is the reference encoding appendRecord must reproduce.
func encodeJSON(t testing.TB, r Record) []byte {
	t.Helper()
	r.Time = r.Time.UTC()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		t.Fatalf("json encode: %v", err)
	}
	return buf.Bytes()
}

func TestAppendRecordMatchesJSON(t *testing.T) {
	odd := "q\" bs\\ nl\n cr\r tab\t bell\a bs\b ff\f nul\x00 esc\x1b del\x7f <&> \u2028\u2029 é 😀 bad\xff\xc3 end"
	cases := []Record{
		{Time: ts(0), Event: EventDropped, Reason: "3"},
		rec(1),
		{Time: ts(2).In(time.FixedZone("X", 3600)), Dir: DirIn, Event: EventRefused, Peer: odd, Key: odd, Claimed: odd, Kind: odd, ID: odd, CorrID: odd, Reason: odd, Size: -5, Attempt: 1 << 40, Count: 1 << 41, Sealed: true},
		{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Event: "x", Body: json.RawMessage(" { \"a\" : \"<\\u003c>\" ,\n \"b\": [ true, null, 1e3 ] } ")},
		{Time: ts(3), Event: "x", Body: json.RawMessage(`null`)},
		{Time: ts(4), Event: "x", Body: json.RawMessage(`"\u2028 s"`)},
	}
	for i, r := range cases {
		got := appendRecord(nil, &r)
		want := encodeJSON(t, r)
		if !bytes.Equal(got, want) {
			t.Errorf("case %d:\ngot  %s\nwant %s", i, got, want)
		}
	}
}

// A body that is not valid UTF-8 JSON is written as a string; the line
// stays valid JSON on one line.
func TestAppendRecordInvalidBody(t *testing.T) {
	for _, body := range []string{"not json\n{", "{\"a\":\"\xff\"}", "{} {}", "\x00"} {
		r := Record{Time: ts(0), Event: "x", Body: json.RawMessage(body)}
		line := appendRecord(nil, &r)
		if !json.Valid(line) || bytes.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("body %q: bad line %q", body, line)
		}
		got, err := ParseLine(line)
		if err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		var s string
		if err := json.Unmarshal(got.Body, &s); err != nil || s != strings.ToValidUTF8(body, "\ufffd") {
			t.Errorf("body %q came back as %s (%v)", body, got.Body, err)
		}
	}
}

func TestClamp(t *testing.T) {
	now := ts(99)
	long := strings.Repeat("é", MaxFieldSize) // 2 bytes a rune: must be cut between runes
	r := Record{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Event: long, Reason: "a" + long}
	r.clamp(func() time.Time { return now })
	if !r.Time.Equal(now) {
		t.Errorf("time %v not replaced", r.Time)
	}
	if len(r.Event) != MaxFieldSize || len(r.Reason) != MaxFieldSize-1 {
		t.Errorf("lengths %d, %d; want %d, %d", len(r.Event), len(r.Reason), MaxFieldSize, MaxFieldSize-1)
	}
	if !strings.HasSuffix(r.Reason, "é") {
		t.Error("reason cut inside a rune")
	}
	neg := Record{Time: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	neg.clamp(func() time.Time { return now })
	if !neg.Time.Equal(now) {
		t.Errorf("time %v not replaced", neg.Time)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, r := range []Record{
		rec(1),
		{Time: ts(0), Event: EventDropped, Reason: "12"},
		{Time: ts(1), Dir: DirIn, Event: EventRefused, Peer: "p\u2028\x01", Reason: "bad\\sig\"", Body: json.RawMessage(`{"x":[1,{"y":null}],"s":"\u00e9"}`)},
	} {
		f.Add(appendRecord(nil, &r))
	}
	f.Add([]byte(`{"time":"2026-03-04T07:06:07.1+02:00","event":"x","body": [ 1 , "a" ] ,"zz":1}`))
	f.Add([]byte(`{"time":"2026-03-04T05:06:07.0000000001Z","event":"x","size":-3,"attempt":1e0}`))
	f.Add([]byte(`{"TIME":"2026-03-04T05:06:07Z","Event":"x","body":"\ud800"}`))
	f.Add([]byte(`{"time":"0000-01-01T00:00:00Z","event":"x","body":null}`))
	f.Add([]byte("not json"))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		enc := appendRecord(nil, &r)
		if !json.Valid(enc) || bytes.IndexByte(enc, '\n') != len(enc)-1 {
			t.Fatalf("re-encoded line is not one JSON line: %q", enc)
		}
		if want := encodeJSON(t, r); !bytes.Equal(enc, want) {
			t.Fatalf("appendRecord differs from encoding/json:\ngot  %q\nwant %q", enc, want)
		}
		r2, err := ParseLine(enc)
		if err != nil {
			t.Fatalf("re-encoded line rejected: %v\n%q", err, enc)
		}
		if !sameRecord(r, r2) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", r, r2)
		}
		if enc2 := appendRecord(nil, &r2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable:\n%q\n%q", enc, enc2)
		}
	})
}
