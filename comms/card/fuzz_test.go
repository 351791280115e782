package card

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseSigned: ParseSigned never panics, fails only with the
// package's errors, and what it accepts encodes canonically, within
// MaxSize, to a card it accepts again, byte for byte the same. A card
// Parse accepts and Sign signs reads back however it travels.
func FuzzParseSigned(f *testing.F) {
	kp := keypair(f)
	s, err := Sign(kp, goodCard)
	if err != nil {
		f.Fatal(err)
	}
	b, _ := s.MarshalJSON()
	f.Add(b)
	f.Add([]byte(`{"name":"n"}`))
	f.Add([]byte(`{"name":"n","intents":[{"name":"a","params_schema":{"x":[1,2.5e-7,"\u0000"]}}],"pubkey":"ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","signature":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := Parse(data); err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("Parse accepted an invalid card: %v", err)
			}
			s, err := Sign(kp, c)
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Sign of a parsed card: %v", err)
			}
			if err == nil {
				roundTrip(t, kp, s)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Parse: unexpected error %v", err)
		}
		s, err := ParseSigned(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("ParseSigned: unexpected error %v", err)
			}
			return
		}
		out, err := s.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > MaxSize {
			t.Fatalf("accepted a card of %d bytes in canonical form", len(out))
		}
		again, err := ParseSigned(out)
		if err != nil {
			t.Fatalf("canonical form refused: %v", err)
		}
		out2, _ := again.MarshalJSON()
		if !bytes.Equal(out, out2) {
			t.Fatal("canonical form not stable")
		}
	})
}

// FuzzSignRoundTrip: a card Sign accepts, with text repeated up to and
// past the limit in its schema (any characters) or its description,
// reads back on a peer from any form it travels in (roundTrip), and
// card.json of it reads back too.
func FuzzSignRoundTrip(f *testing.F) {
	kp := keypair(f)
	f.Add("\b", uint16(30000), false)
	f.Add("<\u2028😀\x00\f", uint16(6000), false)
	f.Add("<&>", uint16(1300), true)
	f.Add("a", uint16(65000), false)
	f.Fuzz(func(t *testing.T, text string, reps uint16, inDescription bool) {
		if len(text)*int(reps) > 2*MaxSize {
			return
		}
		long := strings.Repeat(text, int(reps))
		var c Card
		if inDescription {
			// take is the next n bytes of long at most, whole characters.
			take := func(n int) string {
				k := min(len(long), n)
				for k < len(long) && k > 0 && !utf8.RuneStart(long[k]) {
					k--
				}
				s := long[:k]
				long = long[k:]
				return s
			}
			c = Card{Name: "n", Description: take(MaxDescriptionLen)}
			for i := range MaxIntents {
				c.Intents = append(c.Intents, Intent{Name: fmt.Sprintf("i%d", i), Description: take(MaxIntentDescriptionLen)})
			}
		} else {
			schema, err := json.Marshal(map[string]string{text: long})
			if err != nil {
				return
			}
			c = Card{Name: "n", Intents: []Intent{{Name: "x", ParamsSchema: schema}}}
		}
		s, err := Sign(kp, c)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Sign: unexpected error %v", err)
			}
			return
		}
		roundTrip(t, kp, s)
		data, err := c.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err != nil {
			t.Fatalf("card.json of a card Sign accepts: %v", err)
		}
	})
}

// FuzzCanonical: any JSON the reader accepts has a canonical form that
// reads back to the same canonical form.
func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`{"b":[1,2.5,-0,1e21,1e-7],"a":"\u00e9\ud83d\ude00","":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseTree(data)
		if err != nil {
			return
		}
		out, err := appendCanonical(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := canonicalSize(v); err != nil || n != len(out) {
			t.Fatalf("canonicalSize %d (%v), want %d", n, err, len(out))
		}
		v2, err := parseTree(out)
		if err != nil {
			t.Fatalf("canonical form refused: %v", err)
		}
		out2, _ := appendCanonical(nil, v2)
		if !bytes.Equal(out, out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}
