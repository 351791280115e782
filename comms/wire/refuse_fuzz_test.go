package wire

import (
	"errors"
	"reflect"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// FuzzDecodeForRefuse: with an accept that refuses everyone, DecodeFor never
// returns a decoded envelope: it fails with a *DecodeError (ErrMalformed) or
// with ErrNotAccepted, asks accept at most once, and fails whenever Decode
// fails.
func FuzzDecodeForRefuse(f *testing.F) {
	e := mustSeal(f, Request("review-pr", Array(Int(42), Text("x"))))
	kb := func(e Envelope) []byte {
		b, _ := e.MarshalBinary()
		return b
	}
	f.Add(kb(e))
	fields := map[string][]byte{
		"id": bs(e.ID[:]), "from": bs(e.From[:]), "to": bs(e.To[:]), "sig": bs(e.Sig[:]),
		"kind": mapOf(tx("type"), tx("message"), tx("body"), tx("hi")),
		"x":    un(1), "acks": un(1), "y": h("9f01ff"),
	}
	for _, order := range [][]string{
		{"kind", "id", "from", "to", "sig"},
		{"x", "id", "from", "to", "kind", "sig"},
		{"x", "from", "x", "to", "kind", "sig", "id"},
		{"from", "to", "x", "kind", "x", "sig", "id"},
		{"kind", "x", "y", "from", "to", "sig", "id", "y"},
		{"from", "acks", "to", "kind", "id", "sig", "acks"},
	} {
		var pairs [][]byte
		for _, k := range order {
			pairs = append(pairs, tx(k), fields[k])
		}
		f.Add(mapOf(pairs...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		_, err := Decode(in)
		calls := 0
		none, nerr := DecodeFor(in, func(identity.PeerID, identity.PeerID) bool { calls++; return false })
		if nerr == nil {
			t.Fatalf("DecodeFor refusing all succeeded (Decode: %v)", err)
		}
		if calls > 1 {
			t.Fatalf("accept asked %d times", calls)
		}
		notAcc := errors.Is(nerr, ErrNotAccepted)
		malformed := errors.Is(nerr, ErrMalformed)
		if notAcc == malformed {
			t.Fatalf("DecodeFor refusing: error %v is neither or both of ErrNotAccepted/ErrMalformed", nerr)
		}
		if notAcc != (calls == 1) {
			t.Fatalf("ErrNotAccepted=%v but accept asked %d times", notAcc, calls)
		}
		if malformed {
			var de *DecodeError
			if !errors.As(nerr, &de) {
				t.Fatalf("malformed error %v is not a *DecodeError", nerr)
			}
			if err == nil {
				t.Fatalf("DecodeFor refusing says malformed (%v), Decode succeeds", nerr)
			}
		}
		if !reflect.DeepEqual(none.Kind, Kind{}) || none.Sig != ([64]byte{}) || none.AcksHint {
			t.Fatalf("DecodeFor refusing returned a decoded envelope: %+v (%v)", none, nerr)
		}
		if malformed && (none.ID != identity.UUID{} || none.From != identity.PeerID{} || none.To != identity.PeerID{}) {
			t.Fatalf("malformed but envelope fields set")
		}
		// Decode failed for a structural reason other than a duplicate
		// key: DecodeFor refusing must fail too (checked above: nerr != nil).
		_ = err
	})
}
