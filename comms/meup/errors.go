package meup

import (
	"errors"
	"fmt"
)

func invalid(field, format string, args ...any) *Error {
	return &Error{Reason: ReasonInvalidEnvelope, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// withField returns err as an *Error whose Field is field.
func withField(err error, field string) error {
	var e *Error
	if errors.As(err, &e) {
		c := *e
		if c.Field == "" {
			c.Field = field
		} else {
			c.Field = field + "." + c.Field
		}
		return &c
	}
	return &Error{Reason: ReasonInvalidEnvelope, Field: field, Msg: err.Error()}
}
