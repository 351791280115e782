package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

var msgKind = mapOf(tx("type"), tx("message"), tx("body"), tx("hi"))

func TestDecodeRejects(t *testing.T) {
	e := mustSeal(t, Message("hi"))
	env := func(kind []byte) []byte { return envBytes(e, kind) }
	deep := func(n int) []byte { // n nested arrays in params
		return env(mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"),
			cat(bytes.Repeat([]byte{0x81}, n), []byte{0x00})))
	}
	manyItems := cat(h("9a"), []byte{0, 2, 0, 0}, bytes.Repeat([]byte{0}, 1<<17)) // array of 131072 zeros
	tests := []struct {
		name  string
		in    []byte
		want  error
		field string
	}{
		{"empty", nil, ErrTruncated, ""},
		{"not a map", arrOf(un(1)), ErrType, ""},
		{"text at top", tx("hello"), ErrType, ""},
		{"trailing byte", cat(env(msgKind), h("00")), ErrTrailingBytes, ""},
		{"trailing envelope", cat(env(msgKind), env(msgKind)), ErrTrailingBytes, ""},
		{"too large", make([]byte, MaxEnvelopeSize+1), ErrTooLarge, ""},
		{"id 15 bytes", mapOf(tx("id"), bs(fill(15)), tx("from"), bs(e.From[:]), tx("to"), bs(e.To[:]), tx("kind"), msgKind, tx("sig"), bs(e.Sig[:])), ErrLength, "id"},
		{"id as text", mapOf(tx("id"), tx("0123456789abcdef")), ErrType, "id"},
		{"from 31 bytes", mapOf(tx("from"), bs(fill(31))), ErrLength, "from"},
		{"to 33 bytes", mapOf(tx("to"), bs(fill(33))), ErrLength, "to"},
		{"sig 63 bytes", mapOf(tx("sig"), bs(fill(63))), ErrLength, "sig"},
		{"sig as array", mapOf(tx("sig"), arrOf()), ErrType, "sig"},
		{"missing sig", envBytes(e, msgKind, "id", "from", "to", "kind"), ErrMissingField, "sig"},
		{"missing kind", envBytes(e, msgKind, "id", "from", "to", "sig"), ErrMissingField, "kind"},
		{"missing id", envBytes(e, msgKind, "from", "to", "kind", "sig"), ErrMissingField, "id"},
		{"duplicate id", envBytes(e, msgKind, "id", "id", "from", "to", "kind", "sig"), ErrDuplicateKey, "id"},
		{"duplicate unknown key", cat(h("a7"), envBytes(e, msgKind)[1:], tx("x"), un(1), tx("x"), un(2)), ErrDuplicateKey, ""},
		{"non-text top-level key", mapOf(un(1), un(1)), ErrUnsupported, ""},
		{"kind not a map", env(tx("message")), ErrType, "kind"},
		{"kind without type", env(mapOf(tx("body"), tx("hi"))), ErrMissingField, "kind.type"},
		{"kind type not text", env(mapOf(tx("type"), un(1))), ErrType, "kind.type"},
		{"duplicate key in kind", env(mapOf(tx("type"), tx("message"), tx("body"), tx("a"), tx("body"), tx("b"))), ErrDuplicateKey, "kind"},
		{"message without body", env(mapOf(tx("type"), tx("message"))), ErrMissingField, "kind.body"},
		{"message body bytes", env(mapOf(tx("type"), tx("message"), tx("body"), bs([]byte("hi")))), ErrType, "kind.body"},
		{"request without intent", env(mapOf(tx("type"), tx("request"), tx("params"), h("f6"))), ErrMissingField, "kind.intent"},
		{"request without params", env(mapOf(tx("type"), tx("request"), tx("intent"), tx("x"))), ErrMissingField, "kind.params"},
		{"params holding bytes", env(mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), arrOf(bs(fill(2))))), ErrType, "kind.params"},
		{"duplicate key in params", env(mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), mapOf(tx("a"), un(1), tx("a"), un(1)))), ErrDuplicateKey, "kind"},
		{"response bad status", env(mapOf(tx("type"), tx("response"), tx("in_reply_to"), bs(fill(16)), tx("status"), tx("done"), tx("result"), h("f6"))), ErrBadValue, "kind.status"},
		{"response without result", env(mapOf(tx("type"), tx("response"), tx("in_reply_to"), bs(fill(16)), tx("status"), tx("failed"))), ErrMissingField, "kind.result"},
		{"response in_reply_to 15 bytes", env(mapOf(tx("type"), tx("response"), tx("in_reply_to"), bs(fill(15)), tx("status"), tx("failed"), tx("result"), h("f6"))), ErrLength, "kind.in_reply_to"},
		{"ack in_reply_to text", env(mapOf(tx("type"), tx("ack"), tx("in_reply_to"), tx("550e8400-e29b-41d4-a716-446655440000"))), ErrType, "kind.in_reply_to"},
		{"ack without in_reply_to", env(mapOf(tx("type"), tx("ack"))), ErrMissingField, "kind.in_reply_to"},
		{"tag in kind", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("c100"))), ErrUnsupported, "kind"},
		{"undefined in kind", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("f7"))), ErrUnsupported, "kind"},
		{"simple value in kind", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("f0"))), ErrUnsupported, "kind"},
		{"two-byte simple value", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("f814"))), ErrMalformed, "kind"},
		{"NaN", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("f97e00"))), ErrUnsupported, "kind"},
		{"infinity", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("fb7ff0000000000000"))), ErrUnsupported, "kind"},
		{"integer below -2^63", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), tx("x"), h("3b8000000000000000"))), ErrUnsupported, "kind"},
		{"integer key in kind", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), un(1), un(1))), ErrUnsupported, "kind"},
		{"invalid UTF-8 text", env(mapOf(tx("type"), tx("message"), tx("body"), h("62c328"))), ErrInvalidUTF8, "kind"},
		{"invalid UTF-8 key", env(mapOf(tx("type"), tx("message"), tx("body"), tx("hi"), h("61ff"), un(1))), ErrInvalidUTF8, "kind"},
		{"reserved additional info", env(h("1c")), ErrMalformed, "kind"},
		{"stray break", env(h("ff")), ErrMalformed, "kind"},
		{"indefinite integer", env(h("1f")), ErrMalformed, "kind"},
		{"indefinite tag", mapOf(tx("x"), h("df00")), ErrMalformed, ""},
		{"chunk of the wrong type", env(mapOf(tx("type"), tx("message"), tx("body"), h("7f4161ff"))), ErrMalformed, "kind"},
		{"nested indefinite chunk", env(mapOf(tx("type"), tx("message"), tx("body"), h("7f7f6161ffff"))), ErrMalformed, "kind"},
		{"huge declared array", env(h("9bffffffffffffffff")), ErrTruncated, "kind"},
		{"huge declared map", env(h("bbffffffffffffffff")), ErrTruncated, "kind"},
		{"huge declared text", env(h("7bffffffffffffffff")), ErrTruncated, "kind"},
		{"huge declared top-level map", h("bb7fffffffffffffff"), ErrTruncated, ""},
		{"unterminated indefinite map", cat(h("bf"), tx("id"), bs(e.ID[:])), ErrTruncated, ""},
		{"129 levels", deep(127), ErrTooDeep, "kind"},
		{"10,000 levels", deep(10000), ErrTooDeep, "kind"},
		{"10,000 levels in an unknown key", mapOf(tx("x"), bytes.Repeat([]byte{0x81}, 10000)), ErrTooDeep, ""},
		{"10,000 tags in an unknown key", mapOf(tx("x"), cat(bytes.Repeat([]byte{0xc1}, 10000), un(0))), ErrTooDeep, ""},
		{"meup without space", env(mapOf(tx("type"), tx("meup"), tx("envelope"), mapOf())), ErrMissingField, "kind.space"},
		{"meup space bytes", env(mapOf(tx("type"), tx("meup"), tx("space"), bs([]byte("s")), tx("envelope"), mapOf())), ErrType, "kind.space"},
		{"meup empty space", env(mapOf(tx("type"), tx("meup"), tx("space"), tx(""), tx("envelope"), mapOf())), ErrLength, "kind.space"},
		{"meup space too long", env(mapOf(tx("type"), tx("meup"), tx("space"), tx(strings.Repeat("s", MaxSpaceLen+1)), tx("envelope"), mapOf())), ErrLength, "kind.space"},
		{"meup without envelope", env(mapOf(tx("type"), tx("meup"), tx("space"), tx("s"))), ErrMissingField, "kind.envelope"},
		{"meup envelope array", env(mapOf(tx("type"), tx("meup"), tx("space"), tx("s"), tx("envelope"), arrOf())), ErrType, "kind.envelope"},
		{"meup envelope holding bytes", env(mapOf(tx("type"), tx("meup"), tx("space"), tx("s"), tx("envelope"), mapOf(tx("id"), bs([]byte("x"))))), ErrType, "kind.envelope"},
		{"meup bytes deep in envelope", env(mapOf(tx("type"), tx("meup"), tx("space"), tx("s"), tx("envelope"), mapOf(tx("payload"), mapOf(tx("a"), arrOf(bs([]byte("x"))))))), ErrType, "kind.envelope"},
		{"meup tag in envelope", env(mapOf(tx("type"), tx("meup"), tx("space"), tx("s"), tx("envelope"), mapOf(tx("x"), h("c100")))), ErrUnsupported, "kind"},
		{"meup undefined in envelope", env(mapOf(tx("type"), tx("meup"), tx("space"), tx("s"), tx("envelope"), mapOf(tx("x"), h("f7")))), ErrUnsupported, "kind"},
		{"too many items", env(mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), manyItems)), ErrTooManyItems, "kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a *DecodeError", err)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want reason %v", err, tc.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not match ErrMalformed", err)
			}
			if de.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", de.Field, tc.field, err)
			}
			if de.Offset < 0 || de.Offset > len(tc.in) {
				t.Errorf("offset %d outside the input of %d bytes", de.Offset, len(tc.in))
			}
			if _, err := Open(tc.in); !errors.Is(err, tc.want) {
				t.Errorf("Open gives %v, want %v like Decode", err, tc.want)
			}
		})
	}
}

// 128 levels (envelope, kind, params and 125 more) are allowed; the 129th is not.
func TestDecodeDepthBoundary(t *testing.T) {
	params := cat(bytes.Repeat([]byte{0x81}, 126), un(7))
	kind := mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), params)
	v, err := Decode(envBytes(Envelope{}, kind))
	if err != nil {
		t.Fatalf("128 levels: %v", err)
	}
	p := v.Kind.Params()
	for range 126 {
		p = p.Index(0)
	}
	if n, ok := p.Int(); !ok || n != 7 {
		t.Fatalf("innermost value %v", p)
	}
	// The encoder holds the same limit, so what it emits always decodes.
	deeper := Array(v.Kind.Params())
	if _, err := Seal(keyA, id1, keyB.ID(), Request("x", deeper)); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("sealing 129 levels: %v, want ErrTooDeep", err)
	}
}

// Every strict prefix of a valid envelope is truncated, never accepted.
func TestDecodeEveryPrefixTruncated(t *testing.T) {
	full := mustMarshal(t, mustSeal(t, Request("probe", mustJSON(t, `{"a":[1,2.5,"x",null,true],"b":{"c":-3}}`))))
	for n := range len(full) {
		if _, err := Decode(full[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix of %d/%d bytes: %v, want ErrTruncated", n, len(full), err)
		}
	}
}

// Inputs in every encoding the format allows decode to the envelope the
// sender signed, so the signature verifies.
func TestDecodeAcceptsEquivalentEncodings(t *testing.T) {
	kind, err := Request("probe", mustJSON(t, `{"n":-3,"f":2.5,"list":[1,"two"]}`)).With("handling_mode", Text("queue"))
	if err != nil {
		t.Fatal(err)
	}
	e := mustSeal(t, kind)
	params := func(f, list []byte) []byte {
		return mapOf(tx("list"), list, tx("f"), f, tx("n"), h("22"))
	}
	plainList := arrOf(un(1), tx("two"))
	kindWith := func(p []byte) []byte {
		return mapOf(tx("params"), p, tx("handling_mode"), tx("queue"), tx("intent"), tx("probe"), tx("type"), tx("request"))
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"our own encoding", mustMarshal(t, e)},
		{"keys reversed", envBytes(e, kindWith(params(h("f94100"), plainList)), "sig", "kind", "to", "from", "id")},
		{"float as double", envBytes(e, kindWith(params(h("fb4004000000000000"), plainList)))},
		{"float as single", envBytes(e, kindWith(params(h("fa40200000"), plainList)))},
		{"long integer head", envBytes(e, kindWith(params(h("f94100"), arrOf(h("1b0000000000000001"), tx("two")))))},
		{"indefinite array", envBytes(e, kindWith(params(h("f94100"), cat(h("9f"), un(1), tx("two"), h("ff")))))},
		{"chunked text", envBytes(e, kindWith(params(h("f94100"), arrOf(un(1), cat(h("7f"), tx("tw"), tx("o"), h("ff"))))))},
		{"indefinite maps", cat(h("bf"), envBytes(e, cat(h("bf"), kindWith(params(h("f94100"), plainList))[1:], h("ff")))[1:], h("ff"))},
		{"unknown top-level keys", cat(h("a7"), envBytes(e, kindWith(params(h("f94100"), plainList)))[1:],
			tx("x-note"), mapOf(tx("any"), h("c1f7")), tx("x-n"), h("f0"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Open(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !envelopesEqual(got, e) {
				t.Fatalf("decoded %+v, want %+v", got, e)
			}
		})
	}
}

func TestDecodeIntegersAndFloatsStayDistinct(t *testing.T) {
	params := mapOf(tx("i"), un(1), tx("f"), h("f93c00"), tx("big"), h("1bffffffffffffffff"), tx("min"), h("3b7fffffffffffffff"))
	e, err := Decode(envBytes(Envelope{}, mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), params)))
	if err != nil {
		t.Fatal(err)
	}
	p := e.Kind.Params()
	get := func(k string) Value { v, _ := p.Get(k); return v }
	if i, ok := get("i").Int(); !ok || i != 1 || get("i").Type() != TypeInt {
		t.Errorf("i = %v", get("i"))
	}
	if f, ok := get("f").Float(); !ok || f != 1 {
		t.Errorf("f = %v", get("f"))
	}
	if _, ok := get("f").Int(); ok {
		t.Error("float 1.0 reads as an integer")
	}
	if u, ok := get("big").Uint(); !ok || u != math.MaxUint64 {
		t.Errorf("big = %v", get("big"))
	}
	if _, ok := get("big").Int(); ok {
		t.Error("2^64-1 reads as an int64")
	}
	if i, ok := get("min").Int(); !ok || i != math.MinInt64 {
		t.Errorf("min = %v", get("min"))
	}
	// And they re-encode apart.
	out, err := p.AppendCanonical(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, h("616901")) || !bytes.Contains(out, h("6166f93c00")) {
		t.Fatalf("canonical params %x lost the int/float distinction", out)
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	_, err := Decode(envBytes(mustSeal(t, Message("hi")), mapOf(tx("type"), tx("message"))))
	msg := err.Error()
	for _, want := range []string{"kind.body", "missing field"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Count(msg, "wire:") != 1 {
		t.Errorf("error %q repeats its package prefix", msg)
	}
}

// Containers reserve their slots before their items arrive; nested
// containers that each declare the whole remaining input must not make the
// decoder reserve more than its bound.
func TestDeclaredSizesCannotAmplifyMemory(t *testing.T) {
	const size = 1 << 20
	in := cat(h("a1"), tx("kind"), h("a1"), tx("x"))
	for range 126 {
		remaining := uint32(size - len(in) - 5)
		in = append(in, 0x9a, byte(remaining>>24), byte(remaining>>16), byte(remaining>>8), byte(remaining))
	}
	in = append(in, make([]byte, size-len(in))...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Decode(in)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooManyItems) && !errors.Is(err, ErrTruncated) {
		t.Fatalf("got %v, want ErrTooManyItems or ErrTruncated", err)
	}
	// The input copy plus at most 2*MaxItems reserved 24-byte slots.
	const bound = size + 2*MaxItems*24 + 1<<20
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Fatalf("decoding a %d-byte input allocated %d bytes, bound %d", size, got, bound)
	}
}

// Many distinct unknown top-level keys decode (and a repeat among them is
// still caught) — the duplicate check is a set, not a scan per key.
func TestManyUnknownTopLevelKeys(t *testing.T) {
	e := mustSeal(t, Message("hi"))
	base := mustMarshal(t, e)
	const n = 60000
	var extra []byte
	for i := range n {
		extra = append(extra, tx(fmt.Sprintf("k%05d", i))...)
		extra = append(extra, 0x00)
	}
	in := cat(appendHead(nil, majorMap, 5+n), base[1:], extra)
	got, err := Open(in)
	if err != nil {
		t.Fatal(err)
	}
	if !envelopesEqual(got, e) {
		t.Fatal("unknown keys changed the envelope")
	}
	dup := cat(appendHead(nil, majorMap, 5+n+1), base[1:], extra, tx("k00042"), h("00"))
	if _, err := Decode(dup); !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("repeated unknown key among many: %v", err)
	}
}

// Footprint counts the decoded tree: an array of many small integers,
// one byte each on the wire, is 24 bytes each in memory.
func TestFootprint(t *testing.T) {
	zeros := make([]Value, 131000)
	for i := range zeros {
		zeros[i] = Int(0)
	}
	for _, c := range []struct {
		name     string
		kind     Kind
		min, max int
	}{
		{"small message", Message("hello"), 24, 1 << 10},
		{"many zeros", Request("x", Array(zeros...)), 24 * 131000, 24*131000 + 1<<10},
	} {
		e := mustSeal(t, c.kind)
		b, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if n := d.Kind.Value().Footprint(); n < c.min || n > c.max {
			t.Errorf("%s (%d bytes on the wire): footprint %d, want %d to %d", c.name, len(b), n, c.min, c.max)
		}
	}
}

// DecodeFor asks accept about the sender and recipient before it decodes
// the kind, in either key order: a refusal returns ErrNotAccepted with the
// id, sender and recipient, an acceptance the envelope Decode returns.
func TestDecodeFor(t *testing.T) {
	e := mustSeal(t, Message("hi"))
	kind := mapOf(tx("body"), tx("hi"), tx("type"), tx("message"))
	badKind := mapOf(tx("type"), tx("nonsense")) // well-formed CBOR, not a kind
	for _, tc := range []struct {
		name  string
		kind  []byte
		order []string
	}{
		{"canonical order", kind, []string{"id", "to", "sig", "from", "kind"}},
		{"kind first", kind, []string{"kind", "id", "from", "to", "sig"}},
		{"kind between from and to", kind, []string{"id", "from", "kind", "to", "sig"}},
		{"bad kind first", badKind, []string{"kind", "id", "from", "to", "sig"}},
		{"bad kind last", badKind, []string{"id", "from", "to", "sig", "kind"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := envBytes(e, tc.kind, tc.order...)
			want, wantErr := Decode(in)
			calls := 0
			refuse := func(from, to identity.PeerID) bool {
				calls++
				if from != e.From || to != e.To {
					t.Errorf("accept asked about %s → %s, want %s → %s", from.Short(), to.Short(), e.From.Short(), e.To.Short())
				}
				return false
			}
			got, err := DecodeFor(in, refuse)
			if !errors.Is(err, ErrNotAccepted) || calls != 1 || got.ID != e.ID || got.From != e.From || got.To != e.To || got.Kind.Type() != "" {
				t.Fatalf("refused: %+v, %v after %d calls; want ErrNotAccepted with id, from and to only", got, err, calls)
			}
			got, err = DecodeFor(in, func(identity.PeerID, identity.PeerID) bool { return true })
			if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
				t.Fatalf("accepted: error %v, Decode's %v", err, wantErr)
			}
			if err == nil && !envelopesEqual(got, want) {
				t.Fatalf("accepted: %+v, Decode gives %+v", got, want)
			}
		})
	}
	// A kind stepped over and then decoded counts its items once: an
	// envelope at the item limit decodes either way.
	items := make([][]byte, 0, 2*MaxItems)
	n := 0
	for i := 0; ; i++ {
		// The envelope's map, its 5 keys, the 4 byte strings, the kind
		// map, "type"/"request", "intent" and its text, "params" and its
		// map: 18 items besides the params' members.
		if 18+2*(i+1) > MaxItems {
			break
		}
		items = append(items, tx(fmt.Sprintf("k%05d", i)), un(1))
		n = i + 1
	}
	big := cat(appendHead(nil, majorMap, uint64(n)), cat(items...))
	bigKind := mapOf(tx("type"), tx("request"), tx("intent"), tx("x"), tx("params"), big)
	in := envBytes(e, bigKind, "kind", "id", "from", "to", "sig")
	if _, err := Decode(in); err != nil {
		t.Fatalf("Decode at the item limit: %v", err)
	}
	if _, err := DecodeFor(in, func(identity.PeerID, identity.PeerID) bool { return true }); err != nil {
		t.Fatalf("DecodeFor at the item limit, kind first: %v", err)
	}
}

// A refused sender's keys outside the protocol cost no more than stepping
// over them: accept is asked on reaching the first key after from and to,
// so the duplicate check of unknown keys (a set, for many) is never built
// for a sender that is refused. Accepted, the same envelope is decoded
// whole, its unknown keys checked.
func TestDecodeForRefusesBeforeUnknownKeys(t *testing.T) {
	e := mustSeal(t, Message("hi"))
	kind := mapOf(tx("body"), tx("hi"), tx("type"), tx("message"))
	// The unknown keys after from and to (first) or before them: the
	// sender chooses the order.
	build := func(unknown int, dup, first bool) []byte {
		var extra [][]byte
		for i := range unknown {
			extra = append(extra, tx(fmt.Sprintf("x%05d", i)), un(1))
		}
		if dup {
			extra = append(extra, tx("x00000"), un(1))
		}
		route := [][]byte{tx("id"), bs(e.ID[:]), tx("from"), bs(e.From[:]), tx("to"), bs(e.To[:])}
		pairs := append(route, extra...)
		if first {
			pairs = append(extra, route...)
		}
		return mapOf(append(pairs, tx("kind"), kind, tx("sig"), bs(e.Sig[:]))...)
	}
	refuse := func(identity.PeerID, identity.PeerID) bool { return false }
	accept := func(identity.PeerID, identity.PeerID) bool { return true }
	for _, first := range []bool{false, true} {
		for _, n := range []int{1, 10, 5000} {
			in := build(n, false, first)
			got, err := DecodeFor(in, refuse)
			if !errors.Is(err, ErrNotAccepted) || got.ID != e.ID || got.From != e.From || got.To != e.To {
				t.Fatalf("%d unknown keys (first: %v), refused: %+v, %v", n, first, got, err)
			}
			allocs := testing.AllocsPerRun(20, func() { _, _ = DecodeFor(in, refuse) })
			if allocs > 1 {
				t.Errorf("%d unknown keys (first: %v), refused: %.0f allocations, want none beyond the envelope's", n, first, allocs)
			}
			if _, err := DecodeFor(in, accept); err != nil {
				t.Fatalf("%d unknown keys (first: %v), accepted: %v", n, first, err)
			}
		}
		// A duplicate unknown key is still found once the sender is
		// accepted (as Decode finds it), and the refusal still comes
		// first for one that is not.
		dup := build(5000, true, first)
		if _, err := DecodeFor(dup, accept); !errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("duplicate unknown key (first: %v), accepted: %v, want %v", first, err, ErrDuplicateKey)
		}
		if _, err := Decode(dup); !errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("duplicate unknown key (first: %v), Decode: %v, want %v", first, err, ErrDuplicateKey)
		}
		if _, err := DecodeFor(dup, refuse); !errors.Is(err, ErrNotAccepted) {
			t.Fatalf("duplicate unknown key (first: %v), refused: %v, want %v", first, err, ErrNotAccepted)
		}
	}
	// The second reading of the keys does not count the items again: an
	// envelope with unknown keys first, at the item limit, decodes.
	var many [][]byte
	for i := 0; 2*(i+1)+15 <= MaxItems; i++ { // the map, 5 keys, 4 values, the kind map and its 4 items: 15
		many = append(many, tx(fmt.Sprintf("y%05d", i)), un(1))
	}
	full := mapOf(append(many, tx("id"), bs(e.ID[:]), tx("from"), bs(e.From[:]), tx("to"), bs(e.To[:]), tx("kind"), kind, tx("sig"), bs(e.Sig[:]))...)
	if _, err := Decode(full); err != nil {
		t.Fatalf("Decode at the item limit: %v", err)
	}
	if _, err := DecodeFor(full, accept); err != nil {
		t.Fatalf("DecodeFor at the item limit, unknown keys first: %v", err)
	}
}
