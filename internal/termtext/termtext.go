// Package termtext makes text that others chose safe to print on a
// terminal.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape shows control characters (escape sequences, carriage returns,
// bidirectional overrides, …) and invalid UTF-8 in s escaped (\x1b,
// \u202e), keeps tabs, and indents each new line by indent, so that the
// text cannot move the cursor, recolour the terminal or draw lines that
// look like the printing program's own. With escapeBackslash, backslashes
// are doubled, so an escape in the output always stands for a byte that
// was escaped.
func Escape(s, indent string, escapeBackslash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString("\n" + indent)
		case r == '\t':
			b.WriteByte('\t')
		case r == '\\' && escapeBackslash:
			b.WriteString(`\\`)
		case unicode.IsControl(r) || Invisible(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// Invisible reports whether r is an invisible formatting character
// (Unicode's Cf: bidirectional overrides, zero-width marks) that could
// reorder or hide what a terminal shows; ZWJ, which joins emoji, is not.
func Invisible(r rune) bool { return r != '\u200d' && unicode.In(r, unicode.Cf) }
