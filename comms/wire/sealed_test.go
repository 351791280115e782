package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestSealedKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		box  []byte
	}{
		{"one byte", []byte{0}},
		{"seal overhead", fill(48)},
		{"two-byte length head", fill(300)},
		{"four-byte length head", fill(70000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.box)
			k := SealedKind(in)
			in[0] ^= 0xff // the kind holds its own copy
			if k.Type() != TypeSealed {
				t.Fatalf("type %q", k.Type())
			}
			got, ok := k.Box()
			if !ok || !bytes.Equal(got, tc.box) {
				t.Fatalf("Box = %x, %v", got, ok)
			}
			got[0] ^= 0xff // and hands out copies
			if again, _ := k.Box(); !bytes.Equal(again, tc.box) {
				t.Fatal("changing Box's result changed the kind")
			}

			e := mustSeal(t, k)
			frame := mustMarshal(t, e)
			// On the wire: "type" first, then the box as a CBOR byte string.
			want := mapOf(tx("type"), tx("sealed"), tx("box"), bs(tc.box))
			if !bytes.Contains(frame, cat(tx("kind"), want)) {
				t.Fatalf("frame does not hold the kind %x", want)
			}
			opened, err := Open(frame)
			if err != nil {
				t.Fatal(err)
			}
			if !envelopesEqual(opened, e) {
				t.Fatal("opened envelope differs from the sealed one")
			}
			if b, ok := opened.Kind.Box(); !ok || !bytes.Equal(b, tc.box) {
				t.Fatalf("decoded Box = %x, %v", b, ok)
			}
			if again := mustMarshal(t, opened); !bytes.Equal(again, frame) {
				t.Fatal("re-encoding the decoded envelope changed its bytes")
			}

			// The same kind built by hand passes NewKind.
			m, err := Map(Member{"type", Text(TypeSealed)}, Member{"box", Bytes(tc.box)})
			if err != nil {
				t.Fatal(err)
			}
			nk, err := NewKind(m)
			if err != nil {
				t.Fatal(err)
			}
			if !nk.Value().Equal(k.Value()) {
				t.Fatal("NewKind and SealedKind differ")
			}
		})
	}
}

func TestBoxOnlyForSealed(t *testing.T) {
	other, err := Map(Member{"type", Text("lifecycle")}, Member{"box", Bytes([]byte{1, 2})})
	if err != nil {
		t.Fatal(err)
	}
	otherKind, err := NewKind(other)
	if err != nil {
		t.Fatal(err)
	}
	withBox, err := Message("x").With("box", Bytes([]byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]Kind{
		"zero kind":            {},
		"message":              Message("x"),
		"message with a box":   withBox,
		"other type with box":  otherKind,
		"ack":                  Ack(id1),
		"request":              Request("x", Null()),
		"response with result": Response(id1, StatusCompleted, Text("box")),
	} {
		if b, ok := k.Box(); ok || b != nil {
			t.Errorf("%s: Box = %x, %v; want nothing", name, b, ok)
		}
	}
}

// The largest box whose envelope fits the size limit seals and opens; a
// byte more makes the envelope too large, and a box over the limit is
// refused by the kind check itself.
func TestSealedKindSizeLimit(t *testing.T) {
	// A sealed kind with a box of n ≥ 65536 bytes encodes to n+22 bytes;
	// the signable bytes add 86, the frame another wireOverhead.
	largest := MaxEnvelopeSize - wireOverhead - 86 - 22
	e, err := Seal(keyA, id1, keyB.ID(), SealedKind(fill(largest)))
	if err != nil {
		t.Fatal(err)
	}
	frame := mustMarshal(t, e)
	if len(frame) != MaxEnvelopeSize {
		t.Fatalf("largest sealed-kind envelope encodes to %d bytes, want %d", len(frame), MaxEnvelopeSize)
	}
	if _, err := Open(frame); err != nil {
		t.Fatalf("largest sealed-kind envelope does not open: %v", err)
	}
	if _, err := Seal(keyA, id1, keyB.ID(), SealedKind(fill(largest+1))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a byte more: %v, want ErrTooLarge", err)
	}
	if _, err := NewKind(SealedKind(fill(MaxEnvelopeSize)).Value()); err != nil {
		t.Fatalf("box of MaxEnvelopeSize bytes refused by the kind check: %v", err)
	}
}

func TestSealedKindRejects(t *testing.T) {
	// Through the constructors and Seal.
	for _, tc := range []struct {
		name string
		kind func() (Kind, error)
		want error
	}{
		{"empty box", func() (Kind, error) { return SealedKind(nil), nil }, ErrLength},
		{"box over the frame size", func() (Kind, error) { return SealedKind(fill(MaxEnvelopeSize + 1)), nil }, ErrLength},
		{"box missing", func() (Kind, error) { return NewKind(mustMap(t, Member{"type", Text(TypeSealed)})) }, ErrMissingField},
		{"box text", func() (Kind, error) {
			return NewKind(mustMap(t, Member{"type", Text(TypeSealed)}, Member{"box", Text("c2VhbGVk")}))
		}, ErrType},
		{"box null", func() (Kind, error) {
			return NewKind(mustMap(t, Member{"type", Text(TypeSealed)}, Member{"box", Null()}))
		}, ErrType},
		{"box array of bytes", func() (Kind, error) {
			return NewKind(mustMap(t, Member{"type", Text(TypeSealed)}, Member{"box", Array(Bytes([]byte{1}))}))
		}, ErrType},
		{"box set to text with With", func() (Kind, error) { return SealedKind([]byte{1}).With("box", Text("x")) }, ErrType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := tc.kind()
			if err == nil {
				_, err = Seal(keyA, id1, keyB.ID(), k)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}

	// Through the decoder.
	e := mustSeal(t, Message("hi"))
	for _, tc := range []struct {
		name string
		kind []byte
		want error
	}{
		{"box missing", mapOf(tx("type"), tx("sealed")), ErrMissingField},
		{"box text", mapOf(tx("type"), tx("sealed"), tx("box"), tx("c2VhbGVk")), ErrType},
		{"box empty", mapOf(tx("type"), tx("sealed"), tx("box"), bs(nil)), ErrLength},
		{"box empty, indefinite", mapOf(tx("type"), tx("sealed"), tx("box"), h("5fff")), ErrLength},
		{"box null", mapOf(tx("type"), tx("sealed"), tx("box"), h("f6")), ErrType},
		{"box integer", mapOf(tx("type"), tx("sealed"), tx("box"), un(7)), ErrType},
		{"box map", mapOf(tx("type"), tx("sealed"), tx("box"), mapOf()), ErrType},
	} {
		t.Run("decode "+tc.name, func(t *testing.T) {
			_, err := Decode(envBytes(e, tc.kind))
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want a *DecodeError for %v", err, tc.want)
			}
			if de.Field != "kind.box" {
				t.Fatalf("field %q, want kind.box", de.Field)
			}
		})
	}

	// A valid sealed kind in the same envelope decodes, so the refusals
	// above are about the box.
	if _, err := Decode(envBytes(e, mapOf(tx("type"), tx("sealed"), tx("box"), bs(fill(48))))); err != nil {
		t.Fatalf("valid sealed kind: %v", err)
	}
}

func mustMap(t testing.TB, members ...Member) Value {
	t.Helper()
	m, err := Map(members...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
