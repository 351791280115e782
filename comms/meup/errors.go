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
		case strings.HasPrefix(c.Field, "["): // an index: capabilities[1].kind
			c.Field = field + c.Field
		default:
			c.Field = field + "." + c.Field
		}
		return &c
	}
	return &Error{Reason: ReasonInvalidEnvelope, Field: field, Msg: err.Error()}
}
