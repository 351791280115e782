package card

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A JSON value read from a card is a tree of: nil, bool, float64 (every
// number, as RFC 8785 reads it), string, []any and map[string]any.

// parseTree reads one JSON value, refusing invalid UTF-8, repeated member
// names, nesting deeper than MaxDepth, numbers a double cannot hold and
// anything after the value.
func parseTree(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrMalformed)
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, syntaxText(err))
	}
	switch t := tok.(type) {
	case nil, bool, string:
		return t, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: a number out of range", ErrMalformed)
		}
		return f, nil
	case json.Delim:
		if depth > MaxDepth {
			return nil, fmt.Errorf("%w: nested deeper than %d levels", ErrMalformed, MaxDepth)
		}
		if t == '[' {
			a := []any{}
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("%w: %s", ErrMalformed, syntaxText(err))
			}
			return a, nil
		}
		m := map[string]any{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("%w: %s", ErrMalformed, syntaxText(err))
			}
			key := k.(string) // the decoder only returns a string here
			if _, dup := m[key]; dup {
				return nil, fmt.Errorf("%w: a member name repeats in one object", ErrMalformed)
			}
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			m[key] = v
		}
		if _, err := dec.Token(); err != nil {
			return nil, fmt.Errorf("%w: %s", ErrMalformed, syntaxText(err))
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: unexpected JSON token", ErrMalformed)
}

// syntaxText describes a decoder error without quoting the input.
func syntaxText(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON text ends early"
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at offset %d", se.Offset)
	}
	return "invalid JSON"
}

// appendCanonical appends v in the canonical form of RFC 8785. v must be
// a tree parseTree makes (or one built of the same types).
func appendCanonical(dst []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, t), nil
	case float64:
		return appendNumber(dst, t)
	case string:
		return appendString(dst, t), nil
	case []any:
		dst = append(dst, '[')
		for i, item := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonical(dst, item); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendCanonical(dst, t[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("card: bug: %T in a JSON tree", v)
}

// canonicalSize is len(appendCanonical(nil, v)), counted without
// sorting members, whose order does not change the length.
func canonicalSize(v any) (int, error) {
	var scratch []byte
	var size func(v any) (int, error)
	size = func(v any) (int, error) {
		switch t := v.(type) {
		case []any:
			n := 2 + max(0, len(t)-1) // [ ] and commas
			for _, item := range t {
				m, err := size(item)
				if err != nil {
					return 0, err
				}
				n += m
			}
			return n, nil
		case map[string]any:
			n := 2 + max(0, len(t)-1) // { } and commas
			for k, item := range t {
				scratch = appendString(scratch[:0], k)
				n += len(scratch) + 1 // name :
				m, err := size(item)
				if err != nil {
					return 0, err
				}
				n += m
			}
			return n, nil
		}
		var err error
		scratch, err = appendCanonical(scratch[:0], v)
		return len(scratch), err
	}
	return size(v)
}

// compareUTF16 orders strings by their UTF-16 code units (RFC 8785 §3.2.3).
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// appendString writes s as ECMAScript's JSON.stringify does: only '"',
// '\\' and control characters are escaped, with the short escapes where
// they exist and \u00xx (lower-case hex) otherwise. s is valid UTF-8.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, '"')
}

// appendNumber writes f as ECMAScript's Number::toString does (RFC 8785
// §3.2.2.3): the shortest digits that read back as f, plain notation for
// decimal exponents from -6 to 20, else d.ddde±x; -0 is 0.
func appendNumber(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("%w: a number that JSON cannot hold", ErrMalformed)
	}
	if f == 0 {
		return append(dst, '0'), nil
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// 'e' with the shortest precision: "d.ddde±XX".
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(sci, "e")
	digits := strings.Replace(mant, ".", "", 1)
	e, err := strconv.Atoi(exp)
	if err != nil {
		return dst, fmt.Errorf("card: bug: float format %q", sci)
	}
	k, n := len(digits), e+1 // f = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}
