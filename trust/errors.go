package trust

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors returned by this package. Callers branch on them with errors.Is;
// problems with one row of a trust file come wrapped in a [*RowError] that
// names the row. Problems with a row's pubkey or addr wrap the identity and
// transport sentinels (identity.ErrBadPrefix, transport.ErrBadAddr, …)
// instead of one of these.
var (
	// ErrFormat means the trust data is not the expected JSON shape: not
	// valid JSON or UTF-8, trailing data, no {"peers": [...]} object, a row
	// that is not an object, a field of the wrong JSON type, or a field
	// given twice.
	ErrFormat = errors.New("trust: malformed trust file")
	// ErrTooLarge means the trust file is larger than [MaxFileSize].
	ErrTooLarge = errors.New("trust: trust file too large")
	// ErrUnsafeFile means the trust file is not a regular file (a
	// symbolic link included), is owned by another user, or is writable by
	// group or others, who could then make this node trust them. It wraps
	// a *filemode.Error whose text gives the fix.
	ErrUnsafeFile = errors.New("trust: unsafe trust file")
	// ErrUnknownField means a row or the top-level object has a field this
	// version does not know (often a typo, such as "publickey").
	ErrUnknownField = errors.New("trust: unknown field")
	// ErrMissingField means a row lacks name, pubkey or addr.
	ErrMissingField = errors.New("trust: required field missing")
	// ErrBadName means a peer name breaks the rule in the package doc.
	ErrBadName = errors.New("trust: bad peer name")
	// ErrBadMeta means a row's meta is not a JSON object.
	ErrBadMeta = errors.New("trust: meta must be a JSON object")
	// ErrDuplicateName means two peers have the same name, ignoring case.
	ErrDuplicateName = errors.New("trust: duplicate peer name")
	// ErrDuplicateKey means two peers have the same public key.
	ErrDuplicateKey = errors.New("trust: duplicate peer key")
	// ErrNotFound means [List.Without] was asked to remove a name that is not
	// in the list.
	ErrNotFound = errors.New("trust: no such peer")
)

// RowError is a problem with one peer: a row of a trust file (Index is its
// position in the "peers" array) or a peer passed to [List.With] (Index is
// -1). Its message names the file, the row and the field:
//
//	trust: trusted_peers.json: peers[2] ("bob"): pubkey: identity: key string must start with "ed25519:"
//
// Err is the underlying problem; errors.Is sees through RowError to it.
// A row with several problems gives several RowErrors, joined.
type RowError struct {
	File  string // file name as given to Load, or "" for Parse and With
	Index int    // position in the "peers" array, or -1 outside a file
	Name  string // the row's name as written, or "" when it has none
	Field string // "name", "pubkey", "addr", "meta", an unknown field, or "" for the whole row
	Err   error
}

// Error implements error. Names and field names are quoted and shortened
// when they are long or contain unusual characters.
func (e *RowError) Error() string {
	var b strings.Builder
	b.WriteString("trust: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Index >= 0 {
		b.WriteString("peers[")
		b.WriteString(strconv.Itoa(e.Index))
		b.WriteString("]")
	} else {
		b.WriteString("peer")
	}
	if e.Name != "" {
		b.WriteString(" (")
		b.WriteString(quoteShort(e.Name))
		b.WriteString(")")
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(fieldText(e.Field))
		b.WriteString(": ")
	}
	if e.Err != nil {
		// This package's own errors start with "trust: " too; the
		// line already does.
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "trust: "))
	} else {
		b.WriteString("invalid")
	}
	return b.String()
}

// Unwrap returns the underlying problem.
func (e *RowError) Unwrap() error { return e.Err }

// maxShown bounds how much of a user-supplied string an error repeats.
const maxShown = 64

// quoteShort quotes s for an error message, cut to maxShown bytes.
func quoteShort(s string) string {
	if len(s) > maxShown {
		return strconv.Quote(s[:maxShown]) + "…"
	}
	return strconv.Quote(s)
}

// fieldText prints a field name bare when it is a plain identifier and
// quoted otherwise, so an unknown field cannot smuggle odd text into a
// message.
func fieldText(f string) string {
	if len(f) > maxShown {
		return quoteShort(f)
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return strconv.Quote(f)
		}
	}
	return f
}

// formatError wraps ErrFormat with the file (if any) and a reason.
func formatError(file, format string, args ...any) error {
	return fmt.Errorf("%w: %s%s", ErrFormat, filePrefix(file), fmt.Sprintf(format, args...))
}

func filePrefix(file string) string {
	if file == "" {
		return ""
	}
	return file + ": "
}
