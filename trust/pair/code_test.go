package pair

import (
	"errors"
	"strings"
	"testing"
)

func TestCodeRoundTrip(t *testing.T) {
	for range 200 {
		c, err := NewCode()
		if err != nil {
			t.Fatal(err)
		}
		s := c.String()
		if len(strings.ReplaceAll(s, "-", "")) != 26 || strings.Count(s, "-") != 6 {
			t.Fatalf("code %q: want 26 characters in groups of four", s)
		}
		for _, variant := range []string{s, strings.ToLower(s), strings.ReplaceAll(s, "-", " "), strings.ReplaceAll(s, "-", "")} {
			got, err := ParseCode(variant)
			if err != nil || got != c {
				t.Fatalf("ParseCode(%q) = %v, %v", variant, got, err)
			}
		}
	}
}

func TestParseLine(t *testing.T) {
	const code = "AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GA"
	good := []struct{ in, addr string }{
		{"meerkat-pair/1 " + code + " uds:///tmp/a.sock", "uds:///tmp/a.sock"},
		{"  meerkat-pair/1\t" + code + "   tcp://127.0.0.1:4200 \n", "tcp://127.0.0.1:4200"},
		{"meerkat-pair/1 " + strings.ToLower(code) + " tcp://[::1]:4200", "tcp://[::1]:4200"},
	}
	for _, g := range good {
		l, err := ParseLine(g.in)
		if err != nil {
			t.Errorf("ParseLine(%q): %v", g.in, err)
			continue
		}
		if l.Addr.String() != g.addr || l.Code.String() != code {
			t.Errorf("ParseLine(%q) = %s", g.in, l)
		}
		if back, err := ParseLine(l.String()); err != nil || back != l {
			t.Errorf("round trip of %q: %v, %v", l, back, err)
		}
	}
	bad := []string{
		"",
		"meerkat-pair/2 " + code + " uds:///tmp/a.sock",
		"meerkat-pair/1",
		"meerkat-pair/1 " + code,
		"meerkat-pair/1 " + code + " uds:///tmp/a.sock extra",
		"meerkat-pair/1 AAAA-BBBB uds:///tmp/a.sock",
		"meerkat-pair/1 AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-G1 uds:///tmp/a.sock", // 1 is not base32
		"meerkat-pair/1 AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GB uds:///tmp/a.sock", // unused low bits set
		"meerkat-pair/1 " + code + " http://example.com",
		"meerkat-pair/1 " + code + " uds://relative.sock",
		"meerkat-pair/1 " + code + " tcp://" + strings.Repeat("a", 1100) + ":1",
	}
	for _, b := range bad {
		if _, err := ParseLine(b); !errors.Is(err, ErrBadLine) {
			t.Errorf("ParseLine(%.60q) = %v, want ErrBadLine", b, err)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add("meerkat-pair/1 AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GA uds:///tmp/a.sock")
	f.Add("meerkat-pair/1 aaaa bbbb tcp://127.0.0.1:1")
	f.Add("meerkat-pair/1 ZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZ-ZQ tcp://[::1]:65535")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLine(s)
		if err != nil {
			if !errors.Is(err, ErrBadLine) {
				t.Fatalf("error %v does not wrap ErrBadLine", err)
			}
			return
		}
		back, err := ParseLine(l.String())
		if err != nil || back != l {
			t.Fatalf("accepted %q but its String %q does not parse back: %v", s, l.String(), err)
		}
	})
}
