package meup

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"strings"
	"unicode"
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
	raw, err := checkStructure(data, maxDepth, key)
	if err != nil {
		return nil, nil, err
	}
	// One Decode of the whole text: decoding token by token costs
	// encoding/json a syntax error, built and thrown away, at the end of
	// every scalar.
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, nil, errors.New("malformed JSON")
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, nil, errors.New("data after the JSON value")
	}
	return v, raw, nil
}

var errDepth = errors.New("nested too deep")

// checkStructure walks data as JSON text, in order, for what
// encoding/json lets through: an object or array nested deeper than
// maxDepth containers (errDepth) and an object holding a key twice. It
// returns the value of the top-level object's member key as data holds it
// (nil if none). The rest of the grammar is the decoder's to check: on
// text that is not JSON it returns nil or one of those errors, in linear
// time.
func checkStructure(data []byte, maxDepth int, key string) ([]byte, error) {
	var stack []jsonLevel
	var raw []byte
	start := -1 // where the top-level member key's value begins, while it is read
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			j := i + 1 // the closing quote: the first one after an even run of backslashes
			for {
				q := bytes.IndexByte(data[j:], '"')
				if q < 0 {
					return nil, nil // unterminated: the decoder refuses it
				}
				j += q
				b := 0
				for p := j - 1; p > i && data[p] == '\\'; p-- {
					b++
				}
				if b%2 == 0 {
					break
				}
				j++
			}
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				l := &stack[n-1]
				l.wantKey = false
				k := data[i+1 : j]
				if bytes.IndexByte(k, '\\') >= 0 {
					var s string
					if json.Unmarshal(data[i:j+1], &s) != nil {
						return nil, nil
					}
					k = []byte(s)
				}
				if err := l.seen(k); err != nil {
					if start >= 0 {
						err = inMemberError{err}
					}
					return nil, err
				}
				if n == 1 && key != "" && string(k) == key {
					start = j + 1
				}
			}
			i = j
		case '{', '[':
			if len(stack)+1 > maxDepth {
				return nil, errDepth
			}
			stack = append(stack, jsonLevel{object: c == '{', wantKey: c == '{'})
		case ',', '}', ']':
			if len(stack) == 1 && start >= 0 && c != ']' {
				raw = bytes.TrimLeft(bytes.TrimRight(data[start:i], " \t\r\n"), " \t\r\n:")
				start = -1
			}
			switch {
			case c == ',' && len(stack) > 0:
				stack[len(stack)-1].wantKey = stack[len(stack)-1].object
			case c != ',' && len(stack) > 0:
				stack = stack[:len(stack)-1]
			}
		}
	}
	return raw, nil
}

// inMemberError is checkStructure's error for an object inside the
// value of the member it was asked for (the envelope's payload).
type inMemberError struct{ error }

func (e inMemberError) Unwrap() error { return e.error }

// jsonLevel is an object or array checkStructure is in.
type jsonLevel struct {
	object  bool
	wantKey bool     // in an object, the next string is a key
	keys    [][]byte // the object's keys, while there are few
	many    map[string]struct{}
}

// seen returns an error if the object already has key k, and notes k.
func (l *jsonLevel) seen(k []byte) error {
	if l.many != nil {
		if _, ok := l.many[string(k)]; ok {
			return duplicateKey(k)
		}
		l.many[string(k)] = struct{}{}
		return nil
	}
	for _, x := range l.keys {
		if bytes.Equal(x, k) {
			return duplicateKey(k)
		}
	}
	if len(l.keys) < 16 {
		l.keys = append(l.keys, k)
		return nil
	}
	l.many = make(map[string]struct{}, 2*len(l.keys))
	for _, x := range l.keys {
		l.many[string(x)] = struct{}{}
	}
	l.keys = nil
	l.many[string(k)] = struct{}{}
	return nil
}

func duplicateKey(k []byte) error { return errors.New("duplicate object key " + quoteShort(string(k))) }

// foldClash reports whether an object in v (a decoded tree, at any depth)
// holds two keys that differ only in letter case: Unicode simple case
// folding, so "host" and "hoſt" (U+017F LATIN SMALL LETTER LONG S). Member
// names are case-sensitive, but a reader that folds case (as Go's
// encoding/json does for struct fields) takes both for one member, the
// later one's value over the one a payload pattern was checked against.
func foldClash(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if len(v) > 1 {
			folded := make(map[string]struct{}, len(v))
			for k := range v {
				f := foldKey(k)
				if _, dup := folded[f]; dup {
					return true
				}
				folded[f] = struct{}{}
			}
		}
		for _, x := range v {
			if foldClash(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if foldClash(x) {
				return true
			}
		}
	}
	return false
}

// foldKey returns k with every character replaced by the least of those
// it folds with (its unicode.SimpleFold orbit), so that two keys have the
// same foldKey exactly when strings.EqualFold takes them for equal. k is
// valid UTF-8.
func foldKey(k string) string {
	out := make([]byte, 0, len(k))
	for _, r := range k {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			out = append(out, byte(r))
			continue
		}
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		out = utf8.AppendRune(out, least)
	}
	return string(out)
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
