package card

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseSigned: ParseSigned never panics, fails only with the
// package's errors, and what it accepts encodes canonically to a card it
// accepts again, byte for byte the same.
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
			if _, err := Sign(kp, c); err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Sign of a parsed card: %v", err)
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
