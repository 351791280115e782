package identity_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

var parseUUIDCases = []struct {
	name string
	in   string
	want identity.UUID
	ok   bool
}{
	{name: "lower", in: "550e8400-e29b-41d4-a716-446655440000", ok: true,
		want: identity.UUID{0x55, 0x0e, 0x84, 0x00, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0x00, 0x00}},
	{name: "upper", in: "550E8400-E29B-41D4-A716-446655440000", ok: true,
		want: identity.UUID{0x55, 0x0e, 0x84, 0x00, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0x00, 0x00}},
	{name: "mixed case", in: "018F6F79-7a82-7C4E-a552-A3B86F9630F1", ok: true,
		want: identity.UUID{0x01, 0x8f, 0x6f, 0x79, 0x7a, 0x82, 0x7c, 0x4e, 0xa5, 0x52, 0xa3, 0xb8, 0x6f, 0x96, 0x30, 0xf1}},
	{name: "nil uuid", in: "00000000-0000-0000-0000-000000000000", ok: true},
	{name: "max uuid", in: "ffffffff-ffff-ffff-ffff-ffffffffffff", ok: true,
		want: identity.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	{name: "peer uuid", in: rfcUUIDA, ok: true,
		want: identity.UUID{0x79, 0x9d, 0x74, 0x74, 0x51, 0x7f, 0x50, 0x45, 0x9a, 0xe5, 0xca, 0x7a, 0xf6, 0x2e, 0x35, 0xc6}},

	{name: "empty", in: ""},
	{name: "missing hyphens", in: "550e8400e29b41d4a716446655440000"},
	{name: "missing hyphens padded to 36", in: "550e8400e29b41d4a716446655440000abcd"},
	{name: "one hyphen missing", in: "550e8400-e29b41d4-a716-446655440000"},
	{name: "hyphen shifted left", in: "550e840-0e29b-41d4-a716-446655440000"},
	{name: "hyphen shifted right", in: "550e8400-e29b-41d4-a7164-46655440000"},
	{name: "hyphens as 4-4-4-4-16", in: "550e-8400-e29b-41d4-a716446655440000"},
	{name: "x for 1st hyphen", in: "550e8400xe29b-41d4-a716-446655440000"},
	{name: "x for 2nd hyphen", in: "550e8400-e29bx41d4-a716-446655440000"},
	{name: "x for 3rd hyphen", in: "550e8400-e29b-41d4xa716-446655440000"},
	{name: "x for 4th hyphen", in: "550e8400-e29b-41d4-a716x446655440000"},
	{name: "hex digit for 3rd hyphen", in: "550e8400-e29b-41d40a716-446655440000"},
	{name: "underscores", in: "550e8400_e29b_41d4_a716_446655440000"},
	{name: "bad hex g", in: "550e8400-e29b-41d4-a716-44665544000g"},
	{name: "bad hex in first group", in: "x50e8400-e29b-41d4-a716-446655440000"},
	{name: "bad hex space", in: "550e8400-e29b-41d4-a716 446655440000"},
	{name: "plus sign", in: "550e8400-e29b-+1d4-a716-446655440000"},
	{name: "hyphen in a group", in: "550e8400-e29b-41d4-a716-4466554400-0"},
	{name: "non-ASCII", in: "550e8400-e29b-41d4-a716-4466554400é"},
	{name: "too short", in: "550e8400-e29b-41d4-a716-44665544000"},
	{name: "too long", in: "550e8400-e29b-41d4-a716-4466554400000"},
	{name: "braces", in: "{550e8400-e29b-41d4-a716-446655440000}"},
	{name: "urn", in: "urn:uuid:550e8400-e29b-41d4-a716-446655440000"},
	{name: "trailing newline", in: "550e8400-e29b-41d4-a716-446655440000\n"},
	{name: "leading space", in: " 550e8400-e29b-41d4-a716-446655440000"},
}

func TestParseUUID(t *testing.T) {
	for _, tc := range parseUUIDCases {
		t.Run(tc.name, func(t *testing.T) {
			u, err := identity.ParseUUID(tc.in)
			if !tc.ok {
				if !errors.Is(err, identity.ErrBadUUID) {
					t.Fatalf("ParseUUID(%q) error = %v, want ErrBadUUID", tc.in, err)
				}
				if !u.IsZero() {
					t.Errorf("ParseUUID(%q) returned %s with an error", tc.in, u)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseUUID(%q): %v", tc.in, err)
			}
			if u != tc.want {
				t.Errorf("ParseUUID(%q) = %x, want %x", tc.in, u[:], tc.want[:])
			}
			if got, want := u.String(), strings.ToLower(tc.in); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
		})
	}
}

func TestUUIDStringRoundTrip(t *testing.T) {
	us := []identity.UUID{{}, {0: 0xab, 15: 0xcd}, identity.NewUUID(), identity.NewUUID()}
	for i := range 16 {
		var u identity.UUID
		u[i] = 0xa5
		us = append(us, u)
	}
	for _, u := range us {
		s := u.String()
		if len(s) != 36 || s != strings.ToLower(s) {
			t.Errorf("String() = %q: want 36 lower-case characters", s)
		}
		got, err := identity.ParseUUID(s)
		if err != nil {
			t.Fatalf("ParseUUID(%q): %v", s, err)
		}
		if got != u {
			t.Errorf("round trip of %x gave %x", u[:], got[:])
		}
		b, err := u.MarshalText()
		if err != nil || string(b) != s {
			t.Errorf("MarshalText = %q, %v; want %q", b, err, s)
		}
		var back identity.UUID
		if err := back.UnmarshalText(b); err != nil || back != u {
			t.Errorf("UnmarshalText(%q) = %x, %v", b, back[:], err)
		}
	}
	if got := (identity.UUID{0: 0xab, 15: 0xcd}).String(); got != "ab000000-0000-0000-0000-0000000000cd" {
		t.Errorf("String() = %q", got)
	}
}

func TestUUIDJSON(t *testing.T) {
	type env struct {
		ID identity.UUID `json:"id"`
	}
	in := env{ID: identity.UUID{0x55, 0x0e, 0x84, 0x00, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0x00, 0x00}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"550e8400-e29b-41d4-a716-446655440000"}`; string(b) != want {
		t.Errorf("json.Marshal = %s, want %s", b, want)
	}
	var out env
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("json round trip = %+v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"550e8400e29b41d4a716446655440000"}`), &out); !errors.Is(err, identity.ErrBadUUID) {
		t.Errorf("json.Unmarshal of bad UUID = %v, want ErrBadUUID", err)
	}
	if out != in {
		t.Errorf("failed unmarshal changed the value to %+v", out)
	}
}

func TestNewUUID(t *testing.T) {
	seen := make(map[identity.UUID]bool)
	for range 100 {
		u := identity.NewUUID()
		if v := u[6] >> 4; v != 4 {
			t.Errorf("NewUUID %s: version %d, want 4", u, v)
		}
		if u[8]&0xc0 != 0x80 {
			t.Errorf("NewUUID %s: variant bits %02b, want 10", u, u[8]>>6)
		}
		if s := u.String(); s[14] != '4' || !strings.ContainsRune("89ab", rune(s[19])) {
			t.Errorf("NewUUID text %s: want version digit 4 and variant digit 8-b", s)
		}
		if seen[u] {
			t.Fatalf("NewUUID repeated %s", u)
		}
		seen[u] = true
	}
	if a, b := identity.NewUUID(), identity.NewUUID(); a == b {
		t.Errorf("two NewUUID calls gave %s twice", a)
	}
}

// NewTimeUUID makes version 7 UUIDs: the time in milliseconds first,
// so that ids made later sort after, then random bits.
func TestNewTimeUUID(t *testing.T) {
	seen := make(map[identity.UUID]bool)
	var last uint64
	for range 1000 {
		before := uint64(time.Now().UnixMilli())
		u := identity.NewTimeUUID()
		after := uint64(time.Now().UnixMilli())
		if v := u[6] >> 4; v != 7 {
			t.Fatalf("NewTimeUUID %s: version %d, want 7", u, v)
		}
		if u[8]&0xc0 != 0x80 {
			t.Fatalf("NewTimeUUID %s: variant bits %02b, want 10", u, u[8]>>6)
		}
		ms := uint64(u[0])<<40 | uint64(u[1])<<32 | uint64(u[2])<<24 | uint64(u[3])<<16 | uint64(u[4])<<8 | uint64(u[5])
		if ms < before || ms > after {
			t.Fatalf("NewTimeUUID %s: time %d ms, made between %d and %d", u, ms, before, after)
		}
		if ms < last {
			t.Fatalf("NewTimeUUID %s: time %d ms before the previous id's %d", u, ms, last)
		}
		last = ms
		if seen[u] {
			t.Fatalf("NewTimeUUID repeated %s", u)
		}
		seen[u] = true
	}
	// The random part: the ten bytes after the time differ between two
	// ids made in the same millisecond.
	a, b := identity.NewTimeUUID(), identity.NewTimeUUID()
	if [10]byte(a[6:]) == [10]byte(b[6:]) {
		t.Errorf("two NewTimeUUID calls share their random bits: %s, %s", a, b)
	}
}

func TestUUIDFromBytes(t *testing.T) {
	for _, n := range []int{0, 15, 17, 32} {
		if u, err := identity.UUIDFromBytes(make([]byte, n)); !errors.Is(err, identity.ErrBadUUID) || !u.IsZero() {
			t.Errorf("UUIDFromBytes(%d bytes) = %s, %v; want zero, ErrBadUUID", n, u, err)
		}
	}
	if _, err := identity.UUIDFromBytes(nil); !errors.Is(err, identity.ErrBadUUID) {
		t.Errorf("UUIDFromBytes(nil) = %v, want ErrBadUUID", err)
	}
	b := []byte{0x79, 0x9d, 0x74, 0x74, 0x51, 0x7f, 0x50, 0x45, 0x9a, 0xe5, 0xca, 0x7a, 0xf6, 0x2e, 0x35, 0xc6}
	u, err := identity.UUIDFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if u.String() != rfcUUIDA {
		t.Errorf("UUIDFromBytes = %s, want %s", u, rfcUUIDA)
	}
	b[0] = 0
	if u[0] != 0x79 {
		t.Error("UUID aliases its input slice")
	}
	if u.IsZero() || !(identity.UUID{}).IsZero() {
		t.Error("IsZero wrong")
	}
}

func FuzzParseUUID(f *testing.F) {
	for _, tc := range parseUUIDCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := identity.ParseUUID(s)
		if err != nil {
			if !errors.Is(err, identity.ErrBadUUID) {
				t.Fatalf("ParseUUID(%q) error %v, want ErrBadUUID", s, err)
			}
			if !u.IsZero() {
				t.Fatalf("ParseUUID(%q) returned %s with an error", s, u)
			}
			return
		}
		back, err := identity.ParseUUID(u.String())
		if err != nil || back != u {
			t.Fatalf("ParseUUID(%q) = %s, %v; want %x", u.String(), back, err, u[:])
		}
		if !strings.EqualFold(u.String(), s) {
			t.Fatalf("ParseUUID(%q) = %s: accepted a text that is not the UUID in some case", s, u)
		}
	})
}
