package wire

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

func TestAcksKind(t *testing.T) {
	many := make([]identity.UUID, MaxAckIDs)
	for i := range many {
		many[i] = identity.NewUUID()
	}
	for _, ids := range [][]identity.UUID{{id1}, {id1, id2}, many} {
		k := Acks(ids)
		if k.Type() != TypeAcks {
			t.Fatalf("type %q", k.Type())
		}
		if got := k.AckedIDs(nil); !slices.Equal(got, ids) {
			t.Fatalf("AckedIDs = %d ids, want %d", len(got), len(ids))
		}
		e := mustSeal(t, k)
		frame := mustMarshal(t, e)
		opened, err := Open(frame)
		if err != nil {
			t.Fatal(err)
		}
		if got := opened.Kind.AckedIDs(nil); !slices.Equal(got, ids) {
			t.Fatal("the decoded acks kind names other ids")
		}
		if again := mustMarshal(t, opened); !bytes.Equal(again, frame) {
			t.Fatal("re-encoding the decoded envelope changed its bytes")
		}
	}
	// An ack kind names its one id; other kinds none.
	if got := Ack(id2).AckedIDs(nil); !slices.Equal(got, []identity.UUID{id2}) {
		t.Fatalf("Ack.AckedIDs = %v", got)
	}
	if got := Message("x").AckedIDs(nil); len(got) != 0 {
		t.Fatalf("Message.AckedIDs = %v", got)
	}
}

func TestAcksKindRejects(t *testing.T) {
	e := mustSeal(t, Message("hi"))
	acks := func(ids []byte) []byte { return envBytes(e, mapOf(tx("type"), tx("acks"), tx("ids"), ids)) }
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"no ids", envBytes(e, mapOf(tx("type"), tx("acks"))), ErrMissingField},
		{"empty ids", acks(bs(nil)), ErrLength},
		{"17 bytes", acks(bs(fill(17))), ErrLength},
		{"15 bytes", acks(bs(fill(15))), ErrLength},
		{"one id too many", acks(bs(fill(16 * (MaxAckIDs + 1)))), ErrLength},
		{"ids as text", acks(tx("0123456789abcdef")), ErrType},
		{"ids as an array", acks(arrOf(bs(fill(16)))), ErrType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, tc.want) || de.Field != "kind.ids" && tc.want != ErrMissingField {
				t.Fatalf("Decode: %v, want %v at kind.ids", err, tc.want)
			}
		})
	}
	for _, ids := range [][]identity.UUID{nil, make([]identity.UUID, MaxAckIDs+1)} {
		if _, err := Seal(keyA, id1, keyB.ID(), Acks(ids)); err == nil {
			t.Fatalf("Seal accepts an acks kind of %d ids", len(ids))
		}
	}
}

func TestAcksHint(t *testing.T) {
	e := mustSeal(t, Message("hi"))
	plain := mustMarshal(t, e)
	withHint := func(v []byte) []byte { return cat(h("a6"), plain[1:], tx("acks"), v) }
	for _, tc := range []struct {
		name string
		in   []byte
		hint bool
	}{
		{"absent", plain, false},
		{"version 1", withHint(un(1)), true},
		{"version 2", withHint(un(2)), false},
		{"true", withHint(h("f5")), false},
		{"text", withHint(tx("1")), false},
		{"version 1, a longer head", withHint(h("1801")), true},
		{"version 1, an eight-byte head", withHint(h("1b0000000000000001")), true},
		{"float 1.0", withHint(h("f93c00")), false},
		{"negative", withHint(h("20")), false},
		{"version 1 in a tag", withHint(h("c101")), false},
		{"first member", cat(h("a6"), tx("acks"), un(1), plain[1:]), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Open(tc.in)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if got.AcksHint != tc.hint {
				t.Fatalf("AcksHint = %v, want %v", got.AcksHint, tc.hint)
			}
		})
	}
	if _, err := Decode(cat(h("a7"), plain[1:], tx("acks"), un(1), tx("acks"), un(1))); !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("two hints: %v, want a duplicate key", err)
	}

	// AppendHinted adds exactly what AppendBinary writes for a hinted
	// envelope, and leaves the signed part alone.
	e.AcksHint = true
	want := mustMarshal(t, e)
	got, ok := AppendHinted([]byte("pre"), plain)
	if !ok || !bytes.Equal(got, append([]byte("pre"), want...)) {
		t.Fatalf("AppendHinted = %x, %v; want %x", got, ok, want)
	}
	if _, ok := AppendHinted(nil, want); ok {
		t.Fatal("AppendHinted hints an envelope that has the hint")
	}
	if _, ok := AppendHinted(nil, nil); ok {
		t.Fatal("AppendHinted accepts nothing")
	}
	// An envelope two bytes short of the maximum has no room for the hint.
	n := MaxEnvelopeSize - 400
	probe := mustMarshal(t, mustSeal(t, Message(string(fill(n)))))
	bigBytes := mustMarshal(t, mustSeal(t, Message(string(fill(n+MaxEnvelopeSize-len(probe)-2)))))
	if len(bigBytes)+len(hintSuffix) > MaxEnvelopeSize {
		if _, ok := AppendHinted(nil, bigBytes); ok {
			t.Fatal("AppendHinted makes an envelope longer than the maximum")
		}
	} else {
		t.Fatalf("test envelope of %d bytes is not near the maximum", len(bigBytes))
	}
}
