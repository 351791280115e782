package wire

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

func TestSealOpenEachKind(t *testing.T) {
	extra, err := Message("hello").With("handling_mode", Text("queue"))
	if err != nil {
		t.Fatal(err)
	}
	custom, err := Map(Member{"type", Text("lifecycle")}, Member{"kind", Text("started")}, Member{"params", Null()})
	if err != nil {
		t.Fatal(err)
	}
	lifecycle, err := NewKind(custom)
	if err != nil {
		t.Fatal(err)
	}
	meupMap, err := Map(Member{"type", Text(TypeMEUP)}, Member{"space", Text("build")},
		Member{"envelope", mustJSON(t, `{"protocol":"meup/v0.1","id":"m1","from":"a","kind":"mcp/request","payload":{"method":"tools/call","params":{"n":5,"x":[1.5,null,true]}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	meup, err := NewKind(meupMap)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]Kind{
		"meup":         meup,
		"sealed":       SealedKind(fill(300)),
		"message":      Message("hello"),
		"empty body":   Message(""),
		"with extra":   extra,
		"request":      Request("review-pr", mustJSON(t, `{"pr":42,"files":["a.go","b.go"],"draft":false}`)),
		"null params":  Request("ping", Null()),
		"response":     Response(id2, StatusCompleted, mustJSON(t, `{"approved":true}`)),
		"failed":       Response(id2, StatusFailed, Text("no")),
		"ack":          Ack(id1),
		"unknown type": lifecycle,
	}
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			e := mustSeal(t, k)
			if e.From != keyA.ID() || e.To != keyB.ID() || e.ID != id1 {
				t.Fatalf("sealed header %v %v %v", e.ID, e.From, e.To)
			}
			payload := mustMarshal(t, e)
			got, err := Open(payload)
			if err != nil {
				t.Fatal(err)
			}
			if !envelopesEqual(got, e) {
				t.Fatalf("opened %+v, want %+v", got, e)
			}
			if got.Kind.Type() != k.Type() {
				t.Fatalf("type %q, want %q", got.Kind.Type(), k.Type())
			}
			again := mustMarshal(t, got)
			if !bytes.Equal(again, payload) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, payload)
			}
		})
	}
}

func TestKindAccessors(t *testing.T) {
	k := Response(id2, StatusAccepted, Int(-5))
	if k.Type() != TypeResponse || k.Status() != StatusAccepted {
		t.Fatalf("type %q status %q", k.Type(), k.Status())
	}
	if u, ok := k.InReplyTo(); !ok || u != id2 {
		t.Fatalf("InReplyTo = %v, %v", u, ok)
	}
	if i, ok := k.Result().Int(); !ok || i != -5 {
		t.Fatalf("Result = %v", k.Result())
	}
	if _, ok := Message("x").InReplyTo(); ok {
		t.Fatal("a message has no in_reply_to")
	}
	r := Request("do", mustJSON(t, `{"x":1}`))
	if r.Intent() != "do" || r.Params().Len() != 1 || r.Body() != "" {
		t.Fatalf("request accessors: %q %v %q", r.Intent(), r.Params(), r.Body())
	}
	k2, err := r.With("objective_id", Text("obj-1"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := k2.Field("objective_id"); !ok || !v.Equal(Text("obj-1")) {
		t.Fatalf("Field(objective_id) = %v, %v", v, ok)
	}
	if _, ok := r.Field("objective_id"); ok {
		t.Fatal("With changed the original kind")
	}
	if _, err := r.With("type", Int(1)); !errors.Is(err, ErrType) {
		t.Fatalf("setting type to an integer: %v", err)
	}
}

func TestSealRejects(t *testing.T) {
	// A message kind with a body of n ≥ 65536 bytes encodes to n+24 bytes;
	// the signable bytes add 86, the frame another wireOverhead.
	largest := MaxEnvelopeSize - wireOverhead - 86 - 24
	tooBig := Message(strings.Repeat("x", largest+1))
	tests := []struct {
		name string
		kind Kind
		want error
	}{
		{"zero kind", Kind{}, ErrType},
		{"bytes in params", Request("x", Array(Bytes([]byte{1}))), ErrType},
		{"NaN in params", Request("x", Float(math.NaN())), ErrUnsupported},
		{"infinity in result", Response(id1, StatusCompleted, Float(math.Inf(-1))), ErrUnsupported},
		{"invalid UTF-8 body", Message("\xff"), ErrInvalidUTF8},
		{"bad status", Response(id1, "done", Null()), ErrBadValue},
		{"over the size limit", tooBig, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Seal(keyA, id1, keyB.ID(), tc.kind); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// One byte less seals, and its encoding is exactly at the limit.
	e, err := Seal(keyA, id1, keyB.ID(), Message(strings.Repeat("x", largest)))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(mustMarshal(t, e)); n != MaxEnvelopeSize {
		t.Fatalf("largest sealed envelope encodes to %d bytes, want %d", n, MaxEnvelopeSize)
	}
	if _, err := Open(mustMarshal(t, e)); err != nil {
		t.Fatalf("largest envelope does not open: %v", err)
	}
}

// Changing any signed field breaks the signature; changing an unknown
// top-level key does not.
func TestTamper(t *testing.T) {
	kind, err := Message("pay 10").With("handling_mode", Text("queue"))
	if err != nil {
		t.Fatal(err)
	}
	if kind, err = kind.With("n", Int(1)); err != nil {
		t.Fatal(err)
	}
	e := mustSeal(t, kind)
	mutate := map[string]func(*Envelope){
		"id":             func(e *Envelope) { e.ID[15] ^= 1 },
		"from":           func(e *Envelope) { e.From = keyB.ID() },
		"to":             func(e *Envelope) { e.To = keyA.ID() },
		"sig":            func(e *Envelope) { e.Sig[0] ^= 0x80 },
		"body":           func(e *Envelope) { e.Kind, _ = e.Kind.With("body", Text("pay 99")) },
		"type":           func(e *Envelope) { e.Kind, _ = e.Kind.With("type", Text("notice")) },
		"unknown field":  func(e *Envelope) { e.Kind, _ = e.Kind.With("handling_mode", Text("steer")) },
		"added field":    func(e *Envelope) { e.Kind, _ = e.Kind.With("content_taint", Text("tainted")) },
		"float for int":  func(e *Envelope) { e.Kind, _ = e.Kind.With("n", Float(1)) }, // 1.0 encodes apart from 1
		"removed field":  func(e *Envelope) { e.Kind, _ = Message("pay 10").With("handling_mode", Text("queue")) },
		"null for int":   func(e *Envelope) { e.Kind, _ = e.Kind.With("n", Null()) },
		"int for string": func(e *Envelope) { e.Kind, _ = e.Kind.With("handling_mode", Int(1)) },
	}
	for name, f := range mutate {
		t.Run(name, func(t *testing.T) {
			m := e
			f(&m)
			if m.Kind.Value().Equal(e.Kind.Value()) && m.ID == e.ID && m.From == e.From && m.To == e.To && m.Sig == e.Sig {
				t.Fatal("mutation changed nothing")
			}
			payload := mustMarshal(t, m)
			if _, err := Open(payload); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("Open of tampered envelope: %v, want ErrBadSignature", err)
			}
		})
	}
	t.Run("unknown top-level key", func(t *testing.T) {
		base := mustMarshal(t, e)
		for _, note := range []string{"one", "two"} {
			in := cat(h("a6"), base[1:], tx("x-relay-note"), tx(note))
			got, err := Open(in)
			if err != nil {
				t.Fatalf("note %q: %v", note, err)
			}
			if !envelopesEqual(got, e) {
				t.Fatalf("note %q changed the envelope", note)
			}
		}
	})
}

// Flipping any single bit of a vector frame makes Open fail.
func TestEveryBitFlipRejected(t *testing.T) {
	payload := mustMarshal(t, mustSeal(t, Request("review-pr", mustJSON(t, `{"pr":42}`))))
	if _, err := Open(payload); err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(payload)
	for i := range b {
		for bit := range 8 {
			b[i] ^= 1 << bit
			if _, err := Open(b); err == nil {
				t.Fatalf("flipping bit %d of byte %d still opens", bit, i)
			}
			b[i] ^= 1 << bit
		}
	}
}

func TestValueMapAndWith(t *testing.T) {
	if _, err := Map(Member{"a", Null()}, Member{"a", Null()}); !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("duplicate keys: %v", err)
	}
	m, err := Map(Member{"bb", Int(1)}, Member{"a", Int(2)}, Member{"c", Int(3)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range m.Len() {
		keys = append(keys, m.Member(i).Key)
	}
	if strings.Join(keys, ",") != "a,c,bb" {
		t.Fatalf("members in order %v, want canonical a,c,bb", keys)
	}
	for _, k := range []string{"", "a", "b", "bb", "zz", "ccc"} {
		m2, err := m.With(k, Text(k))
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := m2.Get(k); !ok || !v.Equal(Text(k)) {
			t.Fatalf("With(%q) then Get = %v, %v", k, v, ok)
		}
		enc, err := m2.AppendCanonical(nil)
		if err != nil {
			t.Fatal(err)
		}
		// Decoding sorts afresh; With must have kept the same order.
		e, err := Decode(envBytes(Envelope{}, cat(mapOf(tx("type"), tx("x"), tx("m"), enc))))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := e.Kind.Field("m"); !got.Equal(m2) {
			t.Fatalf("With(%q) broke the member order", k)
		}
	}
	if _, err := Int(1).With("a", Null()); !errors.Is(err, ErrType) {
		t.Fatalf("With on an integer: %v", err)
	}
}

func TestFloatEncoding(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{0, "f90000"},
		{math.Copysign(0, -1), "f98000"},
		{1, "f93c00"},
		{2.5, "f94100"},
		{-4, "f9c400"},
		{65504, "f97bff"},                      // largest half
		{65536, "fa47800000"},                  // needs single
		{5.960464477539063e-8, "f90001"},       // smallest half subnormal
		{6.103515625e-05, "f90400"},            // smallest half normal
		{0.00006097555160522461, "f903ff"},     // largest half subnormal
		{3.0517578125e-05, "f90200"},           // half subnormal
		{1.0e-8, "fb3e45798ee2308c3a"},         // double
		{1.1, "fb3ff199999999999a"},            // double
		{100000, "fa47c35000"},                 // single
		{3.4028234663852886e+38, "fa7f7fffff"}, // largest single
		{1e300, "fb7e37e43c8800759c"},
		{5e-324, "fb0000000000000001"},
	}
	for _, tc := range tests {
		got := appendFloat(nil, tc.f)
		if want := h(tc.want); !bytes.Equal(got, want) {
			t.Errorf("%g: got %x, want %x", tc.f, got, want)
		}
		// Every width decodes back to the same float.
		e, err := Decode(envBytes(Envelope{}, mapOf(tx("type"), tx("x"), tx("f"), got)))
		if err != nil {
			t.Fatalf("%g: %v", tc.f, err)
		}
		v, _ := e.Kind.Field("f")
		if f, ok := v.Float(); !ok || math.Float64bits(f) != math.Float64bits(tc.f) {
			t.Errorf("%x decodes to %v", got, v)
		}
	}
}

func TestUUIDSlicesAreCopies(t *testing.T) {
	u := identity.NewUUID()
	k := Ack(u)
	u[0] ^= 0xff
	if got, _ := k.InReplyTo(); got == u {
		t.Fatal("Ack kept a reference to the caller's array")
	}
}

// Encoders skip value checks only for kinds that Seal or Decode checked; a
// hand-built envelope with a bad kind is still refused.
func TestEncodersCheckUncheckedKinds(t *testing.T) {
	e := Envelope{ID: id1, From: keyA.ID(), To: keyB.ID(), Kind: Message("\xff\xfe")}
	if _, err := e.AppendBinary(nil); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("AppendBinary: %v, want ErrInvalidUTF8", err)
	}
	if _, err := e.AppendSignable(nil); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("AppendSignable: %v, want ErrInvalidUTF8", err)
	}
	e.Kind = Request("x", Float(math.Inf(1)))
	if _, err := e.AppendBinary(nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("AppendBinary of infinity: %v, want ErrUnsupported", err)
	}
	if s := mustSeal(t, Message("ok")); !s.Kind.checked {
		t.Fatal("Seal did not mark its kind checked")
	}
}

// SealPrepared checks as Seal does, and its envelope, signed with a
// prepared nonce, opens like any other; without a nonce prepared it is
// Seal's, byte for byte.
func TestSealPrepared(t *testing.T) {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	id, to := identity.NewUUID(), kp.ID()
	det, err := Seal(kp, id, to, Message("hi"))
	if err != nil {
		t.Fatal(err)
	}
	same, err := SealPrepared(kp, id, to, Message("hi"))
	if err != nil || same.Sig != det.Sig {
		t.Fatalf("no nonce prepared: SealPrepared = %x, %v; want Seal's %x", same.Sig, err, det.Sig)
	}
	kp.PrepareNonce()
	e, err := SealPrepared(kp, id, to, Message("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Sig == det.Sig {
		t.Fatal("a prepared nonce made Seal's deterministic signature")
	}
	payload, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(payload); err != nil {
		t.Fatalf("an envelope signed with a prepared nonce does not open: %v", err)
	}
	if _, err := SealPrepared(kp, id, to, Message("bad \xff")); err == nil {
		t.Fatal("SealPrepared sealed text that is not UTF-8")
	}
}
