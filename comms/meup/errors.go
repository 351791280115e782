package meup

import (
	"errors"
	"fmt"
	"strings"
)

func invalid(field, format string, args ...any) *Error {
	return &Error{Reason: ReasonInvalidEnvelope, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// tooLarge is invalid for an envelope or payload over its size limit.
func tooLarge(field, format string, args ...any) *Error {
	e := invalid(field, format, args...)
	e.TooLarge = true
	return e
}

// withField returns err as an *Error whose Field is field.
func withField(err error, field string) error {
	var e *Error
	if errors.As(err, &e) {
		c := *e
		switch {
		case c.Field == "":
			c.Field = field
		case isIndex(c.Field): // capabilities[1].kind
			c.Field = field + c.Field
		default:
			c.Field = field + "." + c.Field
		}
		return &c
	}
	return &Error{Reason: ReasonInvalidEnvelope, Field: field, Msg: err.Error()}
}

// isIndex reports whether field starts with an index that withField
// made ("[12]", then "." or nothing), not a key that looks like one.
func isIndex(field string) bool {
	rest, ok := strings.CutPrefix(field, "[")
	i := strings.IndexByte(rest, ']')
	if !ok || i < 1 || strings.Trim(rest[:i], "0123456789") != "" {
		return false
	}
	return len(rest) == i+1 || rest[i+1] == '.'
}
