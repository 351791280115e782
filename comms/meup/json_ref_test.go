package meup

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeStrict checks decodeStrictMember against the token-by-token
// reference: the same texts accepted, the same trees and the same member
// bytes, and on JSON text the same kind of refusal (too deep, a duplicate
// key, or malformed).
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"payload":{"a":[1,2.50,"x\"y",true,null]},"id":"e"}`,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"host":1,"ho\u017ft":2}`, `{"x":{"Kind":1,"\u212aind":2}}`, `{"a":{"b":1},"A":2}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"x":{"payload":1},"payload" : [ ] }`, `{"a":1 "a":2}`, `{"a":"\ud800"}`, `"s"`, `1 2`, `{`, `}`, ` `,
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":0,"k11":1,"k12":2,"k13":3,"k14":4,"k15":5,"k16":6,"k3":7}`,
	} {
		f.Add([]byte(s), 4)
	}
	f.Fuzz(func(t *testing.T, data []byte, maxDepth int) {
		maxDepth = 1 + (maxDepth%40+40)%40
		got, gotRaw, gotErr := decodeStrictMember(data, maxDepth, "payload")
		want, wantRaw, wantErr := tokenDecodeStrictMember(data, maxDepth, "payload")
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, reference %v", data, gotErr, wantErr)
		}
		if gotErr != nil {
			if json.Valid(data) && (errors.Is(gotErr, errDepth) != errors.Is(wantErr, errDepth) || gotErr.Error() != wantErr.Error()) {
				t.Fatalf("%q: error %v, reference %v", data, gotErr, wantErr)
			}
			return
		}
		if !reflect.DeepEqual(got, want) || !bytes.Equal(gotRaw, wantRaw) {
			t.Fatalf("%q: %#v %q, reference %#v %q", data, got, gotRaw, want, wantRaw)
		}
	})
}

// tokenDecodeStrictMember is the reference decodeStrictMember is checked
// against: the same rules, applied token by token with encoding/json's
// Decoder (slower: it builds and drops a syntax error at the end of
// every scalar).
func tokenDecodeStrictMember(data []byte, maxDepth int, key string) (any, []byte, error) {
	if !utf8.Valid(data) {
		return nil, nil, errors.New("not valid UTF-8")
	}
	if hasLoneSurrogate(data) {
		return nil, nil, errors.New("a string escapes a lone UTF-16 surrogate")
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	m := tokenMember{data: data, key: key}
	v, err := tokenReadValue(d, 0, maxDepth, &m)
	if err != nil {
		return nil, nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, nil, errors.New("data after the JSON value")
	}
	return v, m.raw, nil
}

// member is what tokenDecodeStrictMember looks for in the top-level object.
type tokenMember struct {
	data []byte
	key  string
	raw  []byte // the member's value as data holds it, once read
}

// readValue reads one value; top, when not nil, is the member of this
// object (the top-level one) to capture.
func tokenReadValue(d *json.Decoder, depth, maxDepth int, top *tokenMember) (any, error) {
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
			var keys []string // in order
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, errors.New("malformed JSON")
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("malformed JSON")
				}
				if slices.Contains(keys, k) {
					return nil, errors.New("duplicate object key " + quoteShort(k))
				}
				keys = append(keys, k)
				start := d.InputOffset() // just after the key: then the colon, the value
				v, err := tokenReadValue(d, depth+1, maxDepth, nil)
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
				v, err := tokenReadValue(d, depth+1, maxDepth, nil)
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

// TestFoldKey: two keys fold alike exactly when strings.EqualFold takes
// them for equal.
func TestFoldKey(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"host", "host"}, {"host", "HOST"}, {"host", "ho\u017ft"}, {"kind", "\u212aind"},
		{"Straße", "STRASSE"}, {"é", "É"}, {"é", "e"}, {"ǅ", "ǆ"}, {"ǅ", "Ǆ"}, {"id", "ids"},
		{"σ", "ς"}, {"Σ", "ς"}, {"1", "1"}, {"", ""}, {"a_b", "A_B"}, {"ı", "i"}, {"İ", "i"},
	} {
		same := foldKey(tc.a) == foldKey(tc.b)
		if want := strings.EqualFold(tc.a, tc.b); same != want {
			t.Errorf("foldKey(%q) and foldKey(%q) equal: %v, strings.EqualFold says %v", tc.a, tc.b, same, want)
		}
	}
}
