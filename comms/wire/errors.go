package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by this package. Every failure to decode an envelope is a
// [*DecodeError] that wraps one of the reason sentinels below and also
// matches [ErrMalformed], so a receiver can count reasons with errors.Is and
// treat the whole class alike.
var (
	// ErrMalformed matches every decode failure (see [DecodeError.Is]); on
	// its own it means the bytes are not well-formed CBOR (reserved
	// additional information, a stray break, a bad indefinite length).
	ErrMalformed = errors.New("wire: malformed CBOR")
	// ErrTooLarge means the envelope is larger than [MaxEnvelopeSize].
	ErrTooLarge = errors.New("wire: envelope too large")
	// ErrTooDeep means arrays and maps nest deeper than [MaxDepth].
	ErrTooDeep = errors.New("wire: nesting too deep")
	// ErrTooManyItems means the envelope holds more than [MaxItems] values.
	ErrTooManyItems = errors.New("wire: too many items")
	// ErrTruncated means the input ends inside an item.
	ErrTruncated = errors.New("wire: truncated input")
	// ErrTrailingBytes means bytes follow the envelope map.
	ErrTrailingBytes = errors.New("wire: trailing bytes after envelope")
	// ErrDuplicateKey means a map repeats a key.
	ErrDuplicateKey = errors.New("wire: duplicate map key")
	// ErrType means a value has the wrong CBOR type for its place.
	ErrType = errors.New("wire: wrong type")
	// ErrLength means a byte string has the wrong length (id 16, keys 32,
	// signature 64, in_reply_to 16, a sealed kind's box 1 to
	// [MaxEnvelopeSize]), or a meup kind's space is empty or too long.
	ErrLength = errors.New("wire: wrong length")
	// ErrMissingField means a required field is absent.
	ErrMissingField = errors.New("wire: missing field")
	// ErrBadValue means a field holds a value outside its allowed set (for
	// example a response status other than accepted, completed or failed).
	ErrBadValue = errors.New("wire: value not allowed")
	// ErrInvalidUTF8 means a text string is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("wire: invalid UTF-8 in text")
	// ErrUnsupported means a well-formed CBOR item outside the data model:
	// tags, undefined, simple values, non-text map keys, NaN or infinite
	// floats, integers below -2^63.
	ErrUnsupported = errors.New("wire: CBOR item outside the data model")

	// ErrBadSignature means the envelope decoded but its signature does not
	// verify against its sender key.
	ErrBadSignature = errors.New("wire: bad signature")
)

// DecodeError describes why bytes are not a valid envelope. Err is one of the
// reason sentinels; Field names where decoding stopped: "" for the envelope
// map itself, a top-level field ("id", "kind", …), or for a failed kind
// check the kind member ("kind.body", "kind.params", …). Offset is the byte
// offset reached.
type DecodeError struct {
	Field  string
	Offset int
	Err    error
}

func (e *DecodeError) Error() string {
	reason := strings.TrimPrefix(e.Err.Error(), "wire: ")
	if e.Field == "" {
		return fmt.Sprintf("wire: decode envelope at byte %d: %s", e.Offset, reason)
	}
	return fmt.Sprintf("wire: decode envelope: %s at byte %d: %s", e.Field, e.Offset, reason)
}

// Unwrap returns the reason sentinel.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is makes every DecodeError match [ErrMalformed].
func (e *DecodeError) Is(target error) bool { return target == ErrMalformed }
