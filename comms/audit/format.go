package audit

import (
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// TimeLayout is the time format of [Format]'s table (always UTC).
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Table cell limits: a key is shown shortened when there is no name, a
// reason cut, so one row stays one readable line.
const (
	shortKeyLen  = 16
	maxReasonLen = 120
)

// Format writes recs as a table for people: TIME DIR EVENT PEER KIND ID
// CORR SIZE REASON, with the peer's name (or its key, shortened, if it has
// none; an unverified claimed key as "claimed " and the key, shortened),
// the attempt number added to the reason and a summary row's count after
// it ("×N"). Control characters and
// other unprintable runes in any field are shown escaped, so an edited log
// cannot send escape sequences to the terminal. Body is not shown; use
// [FormatJSON].
func Format(w io.Writer, recs []Record) error {
	return formatTable(w, recs, true, false)
}

// FormatFollow is [Format] for a table printed a batch at a time
// (`meerkatd audit --follow`): the header (with the first batch) and
// cells padded to fixed widths, so that the rows of later batches line up
// with it (a cell wider than its column widens that batch's only).
func FormatFollow(w io.Writer, recs []Record, header bool) error {
	return formatTable(w, recs, header, true)
}

// followWidths are the columns' widths in FormatFollow, in runes (TIME
// is fixed already): DIR, EVENT, PEER, KIND, ID, CORR, SIZE: the longest
// event, a claimed key shortened.
var followWidths = [...]int{3, len(EventDroppedDeadLetter), len("claimed ") + shortKeyLen + 1, 8, 36, 36, 5}

func formatTable(w io.Writer, recs []Record, header, fixed bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	pad := func(line []byte, col, start int) []byte {
		if fixed && col < len(followWidths) {
			for n := utf8.RuneCount(line[start:]); n < followWidths[col]; n++ { // in runes, as tabwriter counts
				line = append(line, ' ')
			}
		}
		return line
	}
	if header {
		line := []byte("TIME")
		for i, h := range [...]string{"DIR", "EVENT", "PEER", "KIND", "ID", "CORR", "SIZE", "REASON"} {
			line = append(line, '\t')
			start := len(line)
			line = pad(append(line, h...), i, start)
		}
		if _, err := tw.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	var line []byte
	for i := range recs {
		r := &recs[i]
		peer := r.Peer
		switch {
		case peer == "" && r.Key != "":
			peer = shortKey(r.Key)
		case peer == "" && r.Claimed != "":
			peer = "claimed " + shortKey(r.Claimed)
		}
		size := ""
		if r.Size != 0 {
			size = strconv.Itoa(r.Size)
		}
		reason := r.Reason
		if len(reason) > maxReasonLen {
			reason = truncate(reason, maxReasonLen) + "…"
		}
		if r.Attempt != 0 {
			reason = strings.TrimSpace("attempt " + strconv.Itoa(r.Attempt) + " " + reason)
		}
		if r.Count != 0 {
			reason = strings.TrimSpace(reason + " ×" + strconv.Itoa(r.Count))
		}
		if r.Sealed {
			reason = strings.TrimSpace("sealed " + reason)
		}
		line = r.Time.UTC().AppendFormat(line[:0], TimeLayout)
		for i, cell := range [...]string{r.Dir, r.Event, peer, r.Kind, r.ID, r.CorrID, size, reason} {
			line = append(line, '\t')
			start := len(line)
			line = pad(appendCell(line, cell), i, start)
		}
		line = append(line, '\n')
		if _, err := tw.Write(line); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// shortKey shortens a key for a table cell.
func shortKey(k string) string {
	if len(k) <= shortKeyLen {
		return k
	}
	return truncate(k, shortKeyLen) + "…"
}

// Excerpt returns at most n bytes of untrusted text s for a record: what
// [Format] would show of it — printable runes as they are, anything else
// as a Go escape — cut at a rune or escape boundary, with "…" added when
// something was cut. A record built from peer input carries an excerpt,
// never the text itself.
func Excerpt(s string, n int) string {
	esc := appendCell(nil, s)
	if s == "" {
		esc = esc[:0]
	}
	if len(esc) <= n {
		return string(esc)
	}
	// Cut before the escape or rune that would cross n.
	cut := 0
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		piece := len(appendCell(nil, s[i:i+size])) // esc is these pieces in a row
		if cut+piece > n {
			break
		}
		cut += piece
		i += size
	}
	return string(esc[:cut]) + "…"
}

// FormatJSON writes recs as JSON lines, the format of the log file itself
// (see [ParseLine]), for `meerkatd audit --json`.
func FormatJSON(w io.Writer, recs []Record) error {
	var line []byte
	for i := range recs {
		line = appendRecord(line[:0], &recs[i])
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}

// appendCell appends s for a table cell: "-" if empty, printable runes as
// they are, anything else (tabs, newlines, escapes, invalid UTF-8, other
// format characters) as a Go escape.
func appendCell(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\x`...)
			b = append(b, hexDigits[s[i]>>4], hexDigits[s[i]&0xf])
		case r == ' ' || (unicode.IsPrint(r) && r != '\\'):
			b = append(b, s[i:i+size]...)
		default:
			q := strconv.QuoteRune(r) // 'x' with the escape inside
			b = append(b, q[1:len(q)-1]...)
		}
		i += size
	}
	return b
}
