package wire

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/meerkatd/meerkatd/identity"
)

// fxamacker/cbor is an independent CBOR implementation; these tests hold our
// codec to it: its core-deterministic encoding must equal our canonical
// encoding, and what we accept it must find well-formed and decode to the
// same values.

var (
	oracleEnc = func() cbor.EncMode {
		em, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	oracleDec = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			DupMapKey:        cbor.DupMapKeyEnforcedAPF,
			MaxNestedLevels:  65535,
			MaxArrayElements: math.MaxInt32,
			MaxMapPairs:      math.MaxInt32,
			IndefLength:      cbor.IndefLengthAllowed,
			TagsMd:           cbor.TagsAllowed,
			IntDec:           cbor.IntDecConvertNone,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// toGo converts a Value to the Go value fxamacker decodes the same CBOR to.
func toGo(v Value) any {
	switch v.Type() {
	case TypeNull:
		return nil
	case TypeBool:
		b, _ := v.Bool()
		return b
	case TypeInt:
		if u, ok := v.Uint(); ok {
			return u
		}
		i, _ := v.Int()
		return i
	case TypeFloat:
		f, _ := v.Float()
		return f
	case TypeText:
		s, _ := v.Text()
		return s
	case TypeBytes:
		b, _ := v.Bytes()
		return b
	case TypeArray:
		a := make([]any, v.Len())
		for i := range a {
			a[i] = toGo(v.Index(i))
		}
		return a
	case TypeMap:
		m := make(map[any]any, v.Len())
		for i := range v.Len() {
			mem := v.Member(i)
			m[mem.Key] = toGo(mem.Value)
		}
		return m
	}
	panic("unknown type")
}

// randomValue builds a random tree; keys are drawn from a small alphabet so
// that lengths and bytes collide often and ordering is exercised.
func randomValue(r *rand.Rand, depth int) Value {
	n := 8
	if depth > 4 {
		n = 6 // leaves only
	}
	switch r.IntN(n) {
	case 0:
		return Null()
	case 1:
		return Bool(r.IntN(2) == 0)
	case 2:
		switch r.IntN(4) {
		case 0:
			return Int(r.Int64N(48) - 24)
		case 1:
			return Uint(r.Uint64())
		case 2:
			return Int(-1 - r.Int64N(math.MaxInt64))
		}
		return Uint(uint64(1) << r.IntN(64))
	case 3:
		switch r.IntN(4) {
		case 0:
			return Float(float64(r.IntN(2000)-1000) / 8) // often fits half
		case 1:
			return Float(float64(float32(r.NormFloat64()))) // fits single
		case 2:
			return Float(math.Ldexp(float64(r.IntN(1024)), -24-r.IntN(4))) // half subnormals and below
		}
		return Float(r.NormFloat64() * math.Pow(10, float64(r.IntN(600)-300)))
	case 4:
		return Text(randomKey(r))
	case 5:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return Bytes(b)
	case 6:
		a := make([]Value, r.IntN(5))
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return Array(a...)
	}
	seen := map[string]bool{}
	var members []Member
	for range r.IntN(40) {
		k := randomKey(r)
		if !seen[k] {
			seen[k] = true
			members = append(members, Member{k, randomValue(r, depth+1)})
		}
	}
	m, err := Map(members...)
	if err != nil {
		panic(err)
	}
	return m
}

func randomKey(r *rand.Rand) string {
	const alphabet = "ab_Zé\x00"
	var b strings.Builder
	for range r.IntN(4) {
		b.WriteString(string([]rune(alphabet)[r.IntN(6)]))
	}
	if r.IntN(10) == 0 {
		b.WriteString(strings.Repeat("k", 20+r.IntN(300))) // long keys: 1- and 2-byte length heads
	}
	return b.String()
}

func TestCanonicalMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		v := randomValue(r, 0)
		ours, err := v.AppendCanonical(nil)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := oracleEnc.Marshal(toGo(v))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("value %d: canonical encodings differ\n ours   %x\n oracle %x", i, ours, theirs)
		}
		var back any
		if err := oracleDec.Unmarshal(ours, &back); err != nil {
			t.Fatalf("value %d: oracle cannot decode our encoding: %v", i, err)
		}
		if !reflect.DeepEqual(normalize(back), toGo(v)) {
			t.Fatalf("value %d: oracle decodes %#v, want %#v", i, back, toGo(v))
		}
		// Bytewise order holds the same members: only the order differs.
		wireOrder, err := appendValue(nil, &v, orderBytewise, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		var back2 any
		if err := oracleDec.Unmarshal(wireOrder, &back2); err != nil || !reflect.DeepEqual(normalize(back2), toGo(v)) {
			t.Fatalf("value %d: bytewise encoding decodes to %#v, %v", i, back2, err)
		}
	}
}

// normalize turns the oracle's decoded floats of any width into float64.
func normalize(x any) any {
	switch x := x.(type) {
	case float32:
		return float64(x)
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	case map[any]any:
		for k, v := range x {
			x[k] = normalize(v)
		}
	}
	return x
}

// checkAgainstOracle is shared by the fuzz target: whatever Decode accepts
// must be well-formed to the oracle, and its kind must decode there to the
// same tree.
func checkAgainstOracle(t *testing.T, in []byte, e Envelope) {
	if err := oracleDec.Wellformed(in); err != nil {
		t.Fatalf("we accept %x but the oracle finds it malformed: %v", in, err)
	}
	signable, err := e.AppendSignable(nil)
	if err != nil {
		t.Fatal(err)
	}
	var back []any
	if err := oracleDec.Unmarshal(signable, &back); err != nil {
		t.Fatalf("oracle cannot decode our signable bytes: %v", err)
	}
	if len(back) != 4 {
		t.Fatalf("signable array has %d items", len(back))
	}
	if !reflect.DeepEqual(normalize(back[3]), toGo(e.Kind.Value())) {
		t.Fatalf("oracle reads kind %#v, we read %#v", back[3], toGo(e.Kind.Value()))
	}
	again, err := oracleEnc.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, signable) {
		t.Fatalf("signable bytes are not canonical:\n ours   %x\n oracle %x", signable, again)
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	for _, k := range []Kind{
		Message("hello"),
		Request("review-pr", Array(Int(42), Float(2.5), Text("x"), Null(), Bool(true))),
		Response(id2, StatusCompleted, Int(-7)),
		Ack(id1),
		SealedKind(fill(80)),
		Acks([]identity.UUID{id1, id2}),
	} {
		e, err := Seal(keyA, id1, keyB.ID(), k)
		if err != nil {
			f.Fatal(err)
		}
		for _, hint := range []bool{false, true} {
			e.AcksHint = hint
			b, err := e.MarshalBinary()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add(cat(h("bf"), tx("x"), h("9f01ff"), h("ff")))
	f.Add(cat(h("a1"), tx("kind"), mapOf(tx("type"), cat(h("7f"), tx("a"), tx("ck"), h("ff")))))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := Decode(in)
		// DecodeFor accepting all is Decode (a malformed envelope may be
		// refused for another of its faults: a kind stepped over is
		// checked last); refusing all, it refuses every envelope Decode
		// takes, naming its sender and recipient, and its id unless the
		// id came after the key at which accept was asked.
		all, aerr := DecodeFor(in, func(identity.PeerID, identity.PeerID) bool { return true })
		if (aerr == nil) != (err == nil) || err != nil && !errors.Is(aerr, ErrMalformed) || err == nil && !envelopesEqual(all, e) {
			t.Fatalf("DecodeFor accepting all: %v; Decode: %v", aerr, err)
		}
		if none, nerr := DecodeFor(in, func(identity.PeerID, identity.PeerID) bool { return false }); err == nil &&
			(!errors.Is(nerr, ErrNotAccepted) || (none.ID != e.ID && !none.ID.IsZero()) || none.From != e.From || none.To != e.To) {
			t.Fatalf("DecodeFor refusing all a valid envelope: %v", nerr)
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error %v is not a *DecodeError", err)
			}
			if _, err := Open(in); err == nil {
				t.Fatal("Open accepts what Decode refuses")
			}
			return
		}
		checkAgainstOracle(t, in, e)
		out, err := e.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded envelope does not encode: %v", err)
		}
		e2, err := Decode(out)
		if err != nil {
			t.Fatalf("our encoding %x does not decode: %v", out, err)
		}
		if !envelopesEqual(e, e2) {
			t.Fatalf("decode→encode→decode changed the envelope")
		}
		out2, err := e2.MarshalBinary()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable: %x vs %x (%v)", out, out2, err)
		}
		// The signature check agrees with itself across the round trip.
		if (e.Verify() == nil) != (e2.Verify() == nil) {
			t.Fatal("re-encoding changed the verification result")
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"aa":2.5,"n":-3,"z":null,"arr":[true,1.1]}`, `-0`, `1e400`, `18446744073709551616`, `"\u0000é"`, `[[[]]]`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseJSON(in)
		if err != nil {
			return
		}
		out, err := v.MarshalJSON()
		if err != nil {
			t.Fatalf("parsed JSON does not render: %v", err)
		}
		v2, err := ParseJSON(out)
		if err != nil {
			t.Fatalf("rendered JSON %s does not parse: %v", out, err)
		}
		if !v.Equal(v2) {
			t.Fatalf("JSON round trip changed %s into %s", in, out)
		}
		if _, err := v.AppendCanonical(nil); err != nil {
			t.Fatalf("parsed JSON does not encode: %v", err)
		}
	})
}
