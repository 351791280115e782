package termtext

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		in, indent string
		backslash  bool
		want       string
	}{
		{"plain text", "", true, "plain text"},
		{"\x1b[31mred", "", true, `\x1b[31mred`},
		{"a\rb", "", true, `a\x0db`},
		{"bell\a", "", true, `bell\x07`},
		{"rtl\u202eevil", "", true, `rtl\u202eevil`},
		{"zero\u200dwidth joiner", "", true, "zero\u200dwidth joiner"},
		{"line1\nline2", "  ", true, "line1\n  line2"},
		{"tab\there", "", true, "tab\there"},
		{"bad\xffutf8", "", true, `bad\xffutf8`},
		{`back\slash`, "", true, `back\\slash`},
		{`back\slash`, "", false, `back\slash`},
		{"\u0085next line", "", true, `\x85next line`},
		{"héllo wörld ✓", "", true, "héllo wörld ✓"},
	} {
		if got := Escape(tc.in, tc.indent, tc.backslash); got != tc.want {
			t.Errorf("Escape(%q, %q, %v) = %q, want %q", tc.in, tc.indent, tc.backslash, got, tc.want)
		}
	}
}

// FuzzEscape: whatever the input, the output is valid UTF-8 with no
// control or format character but the allowed ones, and every new line
// is followed by the indent.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a\x1b[2Jb", "x\ny", "\xff\xfe", "\u202e\u2066", `a\b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Escape(s, "> ", true)
		if !utf8.ValidString(out) {
			t.Fatalf("Escape(%q) = %q is not valid UTF-8", s, out)
		}
		for _, r := range out {
			if r != '\n' && r != '\t' && r != '\u200d' && (unicode.IsControl(r) || unicode.In(r, unicode.Cf)) {
				t.Fatalf("Escape(%q) = %q holds %U", s, out, r)
			}
		}
		if n, m := strings.Count(out, "\n"), strings.Count(out, "\n> "); n != m {
			t.Fatalf("Escape(%q) = %q: a new line without the indent", s, out)
		}
	})
}
