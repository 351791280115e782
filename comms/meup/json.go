package meup

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"strings"
	"unicode/utf8"
)

// decodeStrict decodes one JSON text into the generic tree used
// throughout the package: map[string]any, []any, string, json.Number,
// bool and nil. It refuses invalid UTF-8, escaped lone surrogates (not
// Unicode, so outside the JSON data model), duplicate object keys,
// nesting deeper than maxDepth containers and anything after the value.
func decodeStrict(data []byte, maxDepth int) (any, error) {
	v, _, err := decodeStrictMember(data, maxDepth, "")
	return v, err
}

// decodeStrictMember is decodeStrict, also returning the value of the
// top-level object's member key byte for byte as data holds it (nil when
// there is no such member; key "" asks for none).
func decodeStrictMember(data []byte, maxDepth int, key string) (any, []byte, error) {
	if !utf8.Valid(data) {
		return nil, nil, errors.New("not valid UTF-8")
	}
	if hasLoneSurrogate(data) {
		return nil, nil, errors.New("a string escapes a lone UTF-16 surrogate")
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	m := member{data: data, key: key}
	v, err := readValue(d, 0, maxDepth, &m)
	if err != nil {
		return nil, nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, nil, errors.New("data after the JSON value")
	}
	return v, m.raw, nil
}

// member is what decodeStrictMember looks for in the top-level object.
type member struct {
	data []byte
	key  string
	raw  []byte // the member's value as data holds it, once read
}

var errDepth = errors.New("nested too deep")

// readValue reads one value; top, when not nil, is the member of this
// object (the top-level one) to capture.
func readValue(d *json.Decoder, depth, maxDepth int, top *member) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, errors.New("malformed JSON")
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > maxDepth {
			return nil, errDepth
		}
		switch t {
		case '{':
			m := make(map[string]any)
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, errors.New("malformed JSON")
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("malformed JSON")
				}
				if _, dup := m[k]; dup {
					return nil, errors.New("duplicate object key " + quoteShort(k))
				}
				start := d.InputOffset() // just after the key: then the colon, the value
				v, err := readValue(d, depth+1, maxDepth, nil)
				if err != nil {
					return nil, err
				}
				if top != nil && top.key != "" && k == top.key {
					top.raw = bytes.TrimLeft(top.data[start:d.InputOffset()], " \t\r\n:")
				}
				m[k] = v
			}
			if _, err := d.Token(); err != nil {
				return nil, errors.New("malformed JSON")
			}
			return m, nil
		case '[':
			a := []any{}
			for d.More() {
				v, err := readValue(d, depth+1, maxDepth, nil)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := d.Token(); err != nil {
				return nil, errors.New("malformed JSON")
			}
			return a, nil
		}
		return nil, errors.New("malformed JSON")
	case string, json.Number, bool, nil:
		return t, nil
	}
	return nil, errors.New("malformed JSON")
}

// hasLoneSurrogate reports whether a JSON string in data holds a \u
// escape of a UTF-16 surrogate that is not part of a valid pair. The
// decoder would silently turn it into U+FFFD.
func hasLoneSurrogate(data []byte) bool {
	in := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !in {
			if c == '"' {
				in = true
			}
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			if i+5 < len(data) && data[i+1] == 'u' {
				r := hex4(data[i+2 : i+6])
				switch {
				case r >= 0xD800 && r < 0xDC00:
					if i+11 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
						if r2 := hex4(data[i+8 : i+12]); r2 >= 0xDC00 && r2 < 0xE000 {
							i += 11
							continue
						}
					}
					return true
				case r >= 0xDC00 && r < 0xE000:
					return true
				}
				i += 5
			} else {
				i++ // the escaped character
			}
		}
	}
	return false
}

func hex4(b []byte) int {
	n := 0
	for _, c := range b {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			n |= int(c-'A') + 10
		default:
			return -1
		}
	}
	return n
}

// numKey returns a canonical text for a JSON number such that two
// numbers have the same key exactly when they are equal in value: 5,
// 5.0, 50e-1 and 0.5E1 all give "5e1". The exponent is computed with
// big.Int, so 1e999999999 costs no more than its text.
func numKey(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, "0"
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
	}
	intp, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intp, frac = mant[:i], mant[i+1:]
	}
	digits := intp + frac
	point := big.NewInt(int64(len(intp)))
	e, ok := new(big.Int).SetString(exp, 10)
	if !ok {
		return "?" + s // not a JSON number; equal only to the same text
	}
	point.Add(point, e)
	trimmed := strings.TrimLeft(digits, "0")
	point.Sub(point, big.NewInt(int64(len(digits)-len(trimmed))))
	digits = strings.TrimRight(trimmed, "0")
	if digits == "" {
		return "0"
	}
	if neg {
		return "-" + digits + "e" + point.String()
	}
	return digits + "e" + point.String()
}

// jsonEqual reports whether two decoded JSON values are equal, numbers
// by value.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numKey(string(x)) == numKey(string(y))
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

// marshalTree encodes a decoded tree back to compact JSON (object keys
// sorted, numbers as received, no HTML escaping).
func marshalTree(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// quoteShort quotes s for an error message, cut to a readable length.
func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strings.ToValidUTF8(`"`+s+`"`, "?")
}
