package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseJSON converts JSON text to a Value the way the Rust reference's
// serde_json does: a number with a fraction or exponent is a float, any
// other number an integer (a float if it overflows 64 bits), "-0" is the
// float -0.0. Objects with a repeated key are refused ([ErrDuplicateKey]),
// as is nesting deeper than [MaxDepth].
func ParseJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseJSONValue(dec, 1)
	if err != nil {
		return Value{}, fmt.Errorf("wire: parse JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Value{}, errors.New("wire: parse JSON: data after the value")
	}
	return v, nil
}

func parseJSONValue(dec *json.Decoder, depth int) (Value, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Value{}, err
	}
	switch t := tok.(type) {
	case nil:
		return Null(), nil
	case bool:
		return Bool(t), nil
	case string:
		return Text(t), nil
	case json.Number:
		return parseJSONNumber(string(t))
	case json.Delim:
		if depth > MaxDepth {
			return Value{}, ErrTooDeep
		}
		var a []Value
		for dec.More() {
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return Value{}, err
				}
				a = append(a, Text(k.(string)))
			}
			item, err := parseJSONValue(dec, depth+1)
			if err != nil {
				return Value{}, err
			}
			a = append(a, item)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return Value{}, err
		}
		if t == '[' {
			return itemsValue(TypeArray, a), nil
		}
		if err := sortMembers(a); err != nil {
			return Value{}, err
		}
		return itemsValue(TypeMap, a), nil
	}
	return Value{}, fmt.Errorf("unexpected token %v", tok)
}

func parseJSONNumber(s string) (Value, error) {
	if s == "-0" {
		return Float(math.Copysign(0, -1)), nil
	}
	if !strings.ContainsAny(s, ".eE") {
		if s[0] == '-' {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return Int(i), nil
			}
		} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return Uint(u), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Value{}, fmt.Errorf("number %.40s out of range: %w", s, ErrUnsupported)
	}
	return Float(f), nil
}

// UnmarshalJSON implements json.Unmarshaler with [ParseJSON].
func (v *Value) UnmarshalJSON(b []byte) error {
	p, err := ParseJSON(b)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// MarshalJSON renders v as JSON with object keys sorted bytewise. Floats
// always show a fraction or exponent (1.0, not 1) so they parse back as
// floats; byte strings, which JSON lacks, become standard base64 text.
func (v Value) MarshalJSON() ([]byte, error) {
	return appendJSON(nil, v, 1)
}

func appendJSON(dst []byte, v Value, depth int) ([]byte, error) {
	switch v.t {
	case TypeNull:
		return append(dst, "null"...), nil
	case TypeBool:
		return strconv.AppendBool(dst, v.n == 1), nil
	case TypeInt:
		if v.neg {
			// -1-n; n < 2^63 for every Value the constructors and the
			// decoder make, so n+1 does not overflow.
			return strconv.AppendUint(append(dst, '-'), v.n+1, 10), nil
		}
		return strconv.AppendUint(dst, v.n, 10), nil
	case TypeFloat:
		f := math.Float64frombits(v.n)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, ErrUnsupported
		}
		start := len(dst)
		dst = strconv.AppendFloat(dst, f, 'g', -1, 64)
		if !bytes.ContainsAny(dst[start:], ".e") {
			dst = append(dst, ".0"...)
		}
		return dst, nil
	case TypeText:
		return appendJSONString(dst, v.str())
	case TypeBytes:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, []byte(v.str()))
		return append(dst, '"'), nil
	case TypeArray, TypeMap:
		if depth > MaxDepth {
			return dst, ErrTooDeep
		}
		if v.t == TypeArray {
			dst = append(dst, '[')
			for i, item := range v.items() {
				if i > 0 {
					dst = append(dst, ',')
				}
				var err error
				if dst, err = appendJSON(dst, item, depth+1); err != nil {
					return dst, err
				}
			}
			return append(dst, ']'), nil
		}
		members := make([]Member, 0, len(v.items())/2)
		for i := 0; i < len(v.items()); i += 2 {
			members = append(members, Member{v.items()[i].str(), v.items()[i+1]})
		}
		slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Key, b.Key) })
		dst = append(dst, '{')
		for i, m := range members {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSONString(dst, m.Key); err != nil {
				return dst, err
			}
			dst = append(dst, ':')
			if dst, err = appendJSON(dst, m.Value, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, ErrType
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaping only what JSON
// requires.
func appendJSONString(dst []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return dst, ErrInvalidUTF8
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"'), nil
}
