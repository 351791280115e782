package card

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

func keypair(t testing.TB) *identity.Keypair {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

var goodCard = Card{
	Name:        "reviewer",
	Description: "Reviews pull requests.\nOne at a time.",
	Contact:     "ops@example.org",
	Intents: []Intent{
		{Name: "review-pr", Description: "review one PR", ParamsSchema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`)},
		{Name: "ping"},
	},
}

func TestParse(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	intents := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":"i` + strings.Repeat("x", i) + `"}`)
		}
		return `{"name":"n","intents":[` + b.String() + `]}`
	}
	deep := `{"name":"n","intents":[{"name":"x","params_schema":` + strings.Repeat(`{"a":`, MaxDepth) + `1` + strings.Repeat(`}`, MaxDepth) + `}]}`
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"minimal", `{"name":"n"}`, true},
		{"full", `{"name":"n","description":"d\n\tx","contact":"c","intents":[{"name":"a.b:c/d-e_f","description":"x","params_schema":{"type":"object"}}]}`, true},
		{"empty intents", `{"name":"n","intents":[]}`, true},
		{"64 intents", intents(64), true},
		{"65 intents", intents(65), false},
		{"no name", `{"description":"d"}`, false},
		{"blank name", `{"name":"  "}`, false},
		{"name not text", `{"name":1}`, false},
		{"name too long", `{"name":"` + long(MaxNameLen+1) + `"}`, false},
		{"name at limit", `{"name":"` + long(MaxNameLen) + `"}`, true},
		{"control in name", `{"name":"a\u0007"}`, false},
		{"newline in name", `{"name":"a\nb"}`, false},
		{"newline in description", `{"name":"a","description":"x\ny"}`, true},
		{"description too long", `{"name":"n","description":"` + long(MaxDescriptionLen+1) + `"}`, false},
		{"contact too long", `{"name":"n","contact":"` + long(MaxContactLen+1) + `"}`, false},
		{"unknown member", `{"name":"n","colour":"red"}`, false},
		{"signature in unsigned", `{"name":"n","signature":"x"}`, false},
		{"unknown intent member", `{"name":"n","intents":[{"name":"a","x":1}]}`, false},
		{"intents not array", `{"name":"n","intents":{}}`, false},
		{"intent not object", `{"name":"n","intents":["a"]}`, false},
		{"intent without name", `{"name":"n","intents":[{"description":"d"}]}`, false},
		{"intent name with space", `{"name":"n","intents":[{"name":"a b"}]}`, false},
		{"intent name leading dot", `{"name":"n","intents":[{"name":".a"}]}`, false},
		{"intent name reserved", `{"name":"n","intents":[{"name":"meerkat.card"}]}`, false},
		{"intent name reserved upper", `{"name":"n","intents":[{"name":"Meerkat.x"}]}`, false},
		{"intent name looks reserved but is not", `{"name":"n","intents":[{"name":"meerkatx.card"}]}`, true},
		{"intent name too long", `{"name":"n","intents":[{"name":"` + long(MaxIntentNameLen+1) + `"}]}`, false},
		{"intent repeated", `{"name":"n","intents":[{"name":"a"},{"name":"a"}]}`, false},
		{"schema not object", `{"name":"n","intents":[{"name":"a","params_schema":[1]}]}`, false},
		{"schema true", `{"name":"n","intents":[{"name":"a","params_schema":true}]}`, false},
		{"too deep", deep, false},
		{"duplicate member", `{"name":"n","name":"m"}`, false},
		{"duplicate in schema", `{"name":"n","intents":[{"name":"a","params_schema":{"x":1,"x":2}}]}`, false},
		{"not an object", `["n"]`, false},
		{"trailing data", `{"name":"n"} {}`, false},
		{"truncated", `{"name":"n"`, false},
		{"invalid utf-8", "{\"name\":\"\xff\"}", false},
		{"huge number", `{"name":"n","intents":[{"name":"a","params_schema":{"max":1e999}}]}`, false},
		{"too large", `{"name":"n","description":"` + long(MaxSize) + `"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.in))
			if c.ok && err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !c.ok {
				if err == nil {
					t.Fatal("Parse accepted it")
				}
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v does not match ErrMalformed", err)
				}
			}
		})
	}
}

func TestSignAndParseSigned(t *testing.T) {
	kp := keypair(t)
	s, err := Sign(kp, goodCard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSigned(b)
	if err != nil {
		t.Fatalf("ParseSigned of a fresh card: %v", err)
	}
	if err := got.Check(kp.ID()); err != nil {
		t.Fatal(err)
	}
	if err := got.Check(keypair(t).ID()); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Check with another key: %v, want ErrWrongKey", err)
	}
	if got.Name != goodCard.Name || len(got.Intents) != 2 || got.Intents[0].Name != "review-pr" || got.Contact != goodCard.Contact {
		t.Fatalf("round trip: %+v", got.Card)
	}
	if string(got.Intents[0].ParamsSchema) != `{"properties":{"url":{"type":"string"}},"required":["url"],"type":"object"}` {
		t.Fatalf("schema not canonical: %s", got.Intents[0].ParamsSchema)
	}
	b2, _ := got.MarshalJSON()
	if !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding changed the card:\n%s\n%s", b, b2)
	}
	// Any whitespace and member order verify: only the canonical form is signed.
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	pretty, _ := json.MarshalIndent(generic, "", "   ")
	if _, err := ParseSigned(pretty); err != nil {
		t.Fatalf("indented copy: %v", err)
	}
}

// tamper re-encodes a signed card after change modified its object.
func tamper(t *testing.T, b []byte, change func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	change(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseSignedRefuses(t *testing.T) {
	kp, other := keypair(t), keypair(t)
	s, err := Sign(kp, goodCard)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.MarshalJSON()
	byOther, _ := Sign(other, goodCard)
	otherSig := base64.StdEncoding.EncodeToString(byOther.Signature)
	cases := []struct {
		name   string
		change func(m map[string]any)
		want   error
	}{
		{"name changed", func(m map[string]any) { m["name"] = "evil" }, ErrBadSignature},
		{"intent added", func(m map[string]any) {
			m["intents"] = append(m["intents"].([]any), map[string]any{"name": "rm-rf"})
		}, ErrBadSignature},
		{"schema changed", func(m map[string]any) {
			m["intents"].([]any)[0].(map[string]any)["params_schema"] = map[string]any{"type": "string"}
		}, ErrBadSignature},
		{"member added", func(m map[string]any) { m["x"] = 1 }, ErrBadSignature},
		{"signature of another card", func(m map[string]any) { m["signature"] = otherSig }, ErrBadSignature},
		{"pubkey swapped", func(m map[string]any) { m["pubkey"] = other.ID().String() }, ErrBadSignature},
		{"no signature", func(m map[string]any) { delete(m, "signature") }, ErrMalformed},
		{"no pubkey", func(m map[string]any) { delete(m, "pubkey") }, ErrMalformed},
		{"signature short", func(m map[string]any) { m["signature"] = base64.StdEncoding.EncodeToString(make([]byte, 63)) }, ErrMalformed},
		{"signature not base64", func(m map[string]any) { m["signature"] = "!!!" }, ErrMalformed},
		{"signature zero", func(m map[string]any) { m["signature"] = base64.StdEncoding.EncodeToString(make([]byte, 64)) }, ErrBadSignature},
		{"pubkey bad", func(m map[string]any) { m["pubkey"] = "ed25519:abc" }, ErrMalformed},
		{"name removed", func(m map[string]any) { delete(m, "name") }, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSigned(tamper(t, b, c.change))
			if !errors.Is(err, c.want) {
				t.Fatalf("ParseSigned: %v, want %v", err, c.want)
			}
		})
	}
	// A card another key signed verifies, but not as this peer's.
	ob, _ := byOther.MarshalJSON()
	got, err := ParseSigned(ob)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Check(kp.ID()); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Check: %v, want ErrWrongKey", err)
	}
}

// Members this version does not know are signed too and survive a round trip.
func TestUnknownMembersSurvive(t *testing.T) {
	kp := keypair(t)
	m := map[string]any{"name": "n", "intents": []any{}, "icon": "x", "pubkey": kp.ID().String()}
	msg, err := signingBytes(m)
	if err != nil {
		t.Fatal(err)
	}
	m["signature"] = base64.StdEncoding.EncodeToString(kp.Sign(msg))
	b, _ := appendCanonical(nil, m)
	s, err := ParseSigned(b)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := s.MarshalJSON()
	if !bytes.Contains(out, []byte(`"icon":"x"`)) {
		t.Fatalf("unknown member lost: %s", out)
	}
	if _, err := ParseSigned(bytes.Replace(out, []byte(`"icon":"x"`), []byte(`"icon":"y"`), 1)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("changed unknown member: %v", err)
	}
}

func TestSigningBytes(t *testing.T) {
	got, err := SigningBytes([]byte(`{ "signature":"zz", "name":"n", "pubkey":"k", "intents":[], "b":{"é":1,"z":2.50,"a":[true,null,"\u0001\"/"]} }`))
	if err != nil {
		t.Fatal(err)
	}
	want := "meerkat-card-v1\x00" + `{"b":{"a":[true,null,"\u0001\"/"],"z":2.5,"é":1},"intents":[],"name":"n","pubkey":"k"}`
	if string(got) != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestSignRefusesInvalid(t *testing.T) {
	kp := keypair(t)
	if _, err := Sign(kp, Card{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty card: %v", err)
	}
	big := Card{Name: "n"}
	for i := range MaxIntents {
		big.Intents = append(big.Intents, Intent{Name: "i" + strings.Repeat("x", i), Description: strings.Repeat("d", MaxIntentDescriptionLen)})
	}
	if _, err := Sign(kp, big); !errors.Is(err, ErrMalformed) {
		t.Fatalf("card over MaxSize: %v", err)
	}
	var zero Signed
	if _, err := zero.MarshalJSON(); err == nil {
		t.Fatal("zero Signed encoded")
	}
}

func TestCanonicalNumbers(t *testing.T) {
	cases := []struct {
		f    float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{1, "1"},
		{-1, "-1"},
		{2.5, "2.5"},
		{0.1, "0.1"},
		{1e21, "1e+21"},
		{1e20, "100000000000000000000"},
		{123456789012345680000, "123456789012345680000"},
		{1e-6, "0.000001"},
		{1e-7, "1e-7"},
		{1.5e-7, "1.5e-7"},
		{-1.5e300, "-1.5e+300"},
		{9007199254740993, "9007199254740992"},
		{5e-324, "5e-324"},
		{1.7976931348623157e308, "1.7976931348623157e+308"},
		{333333333.33333329, "333333333.3333333"},
		{0.000001234, "0.000001234"},
	}
	for _, c := range cases {
		got, err := appendNumber(nil, c.f)
		if err != nil || string(got) != c.want {
			t.Errorf("%v: got %s (%v), want %s", c.f, got, err, c.want)
		}
	}
	if _, err := appendNumber(nil, math.NaN()); err == nil {
		t.Error("NaN encoded")
	}
}

func TestCanonicalOrderAndStrings(t *testing.T) {
	// U+E000 sorts after U+1F600 in UTF-8 but before it in UTF-16.
	v, err := parseTree([]byte(`{"😀":1,"\ue000":2,"b":3,"a":4,"":5}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := appendCanonical(nil, v)
	if want := "{\"\":5,\"a\":4,\"b\":3,\"😀\":1,\"\ue000\":2}"; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	s := appendString(nil, "a\"\\\b\f\n\r\t\x01\x1f<>&\u2028é/")
	if want := `"a\"\\\b\f\n\r\t\u0001\u001f<>&` + "\u2028" + `é/"`; string(s) != want {
		t.Fatalf("got %s, want %s", s, want)
	}
}
