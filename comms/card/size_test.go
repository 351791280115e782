package card

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// signedSize is the length of c's signed canonical form (c is valid),
// computed without Sign's limit.
func signedSize(t testing.TB, kp *identity.Keypair, c Card) int {
	t.Helper()
	m, err := toTree(c)
	if err != nil {
		t.Fatal(err)
	}
	m["pubkey"] = kp.ID().String()
	m["signature"] = strings.Repeat("A", 86) + "==" // 64 bytes in base64
	n, err := canonicalSize(m)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cardOfSize returns build(n, pad) for the largest n whose signed card
// takes at most size bytes, and pad so that it takes exactly size bytes.
// build must grow with n, and by one byte for each pad.
func cardOfSize(t testing.TB, kp *identity.Keypair, size int, build func(n, pad int) Card) (c Card, n, pad int) {
	t.Helper()
	fits := func(n int) bool { return signedSize(t, kp, build(n, 0)) <= size }
	// Start where n would be if build grew linearly, then bracket it.
	base := signedSize(t, kp, build(0, 0))
	guess := max(0, (size-base)/max(1, signedSize(t, kp, build(1, 0))-base))
	lo, hi := guess, guess+1
	for step := 1; !fits(lo); step *= 2 {
		hi, lo = lo, max(0, lo-step)
	}
	for step := 1; fits(hi); step *= 2 {
		lo, hi = hi, hi+step
	}
	for hi-lo > 1 { // build(lo) fits, build(hi) does not
		mid := (lo + hi) / 2
		if signedSize(t, kp, build(mid, 0)) <= size {
			lo = mid
		} else {
			hi = mid
		}
	}
	pad = size - signedSize(t, kp, build(lo, 0))
	c = build(lo, pad)
	if got := signedSize(t, kp, c); got != size {
		t.Fatalf("test bug: a card of %d bytes, want %d", got, size)
	}
	return c, lo, pad
}

// schemaCard is a card whose one intent's params schema is schema, as
// JSON.
func schemaCard(t testing.TB, schema map[string]any) Card {
	t.Helper()
	b, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	return Card{Name: "n", Intents: []Intent{{Name: "x", ParamsSchema: b}}}
}

// stringsIn builds cards whose schema holds filler n times in a string,
// then pad bytes of padding.
func stringsIn(t testing.TB, filler string) func(n, pad int) Card {
	return func(n, pad int) Card {
		return schemaCard(t, map[string]any{"s": strings.Repeat(filler, n), "z": strings.Repeat("a", pad)})
	}
}

// allControls is every control character JSON escapes, and DEL.
func allControls() string {
	var b strings.Builder
	for c := range 0x20 {
		b.WriteByte(byte(c))
	}
	return b.String() + "\x7f"
}

// sizeCases are cards at the limit whose text other writers spell with
// more bytes than the canonical form.
func sizeCases(t testing.TB) []struct {
	name  string
	build func(n, pad int) Card
} {
	return []struct {
		name  string
		build func(n, pad int) Card
	}{
		{"backspace", stringsIn(t, "\b")},
		{"form feed", stringsIn(t, "\f")},
		{"every control character", stringsIn(t, allControls())},
		{"html", stringsIn(t, "<>&")},
		{"line separators", stringsIn(t, "\u2028\u2029")},
		{"non-BMP", stringsIn(t, "😀")},
		{"quote and backslash", stringsIn(t, `"\`)},
		{"mixed", stringsIn(t, "a<\b😀\u2028\x00é\f/")},
		{"backspace in member names", func(n, pad int) Card {
			m := map[string]any{"z": strings.Repeat("a", pad)}
			for i := range n {
				m[strings.Repeat("\b", i%50+1)+string(rune('a'+i/50%26))+strings.Repeat("\f", i/1300)] = 0.0
			}
			return schemaCard(t, m)
		}},
		{"member names UTF-16 sorts otherwise", func(n, pad int) Card {
			// U+E000 sorts before U+1F600 in UTF-16, after it in UTF-8
			// (the wire's order).
			m := map[string]any{"z": strings.Repeat("a", pad)}
			for i := range n {
				m[fmt.Sprintf("😀%d", i)] = "\ue000"
				m[fmt.Sprintf("\ue000%d", i)] = "😀"
			}
			return schemaCard(t, m)
		}},
		{"small exponents", func(n, pad int) Card {
			a := make([]any, n)
			for i := range a {
				a[i] = 1e-7
			}
			return schemaCard(t, map[string]any{"n": a, "z": strings.Repeat("a", pad)})
		}},
		{"large fractions", func(n, pad int) Card {
			a := make([]any, n)
			for i := range a {
				a[i] = 1000000.5
			}
			return schemaCard(t, map[string]any{"n": a, "z": strings.Repeat("a", pad)})
		}},
		{"text members", func(n, pad int) Card {
			// < and U+2028 in the description and the intents', which
			// Go's encoding/json escapes (\u003c, \u2028).
			c := Card{Name: "<n>", Contact: strings.Repeat("&", MaxContactLen)}
			fill := func(max int) string {
				k := min(n, max)
				n -= k
				return strings.Repeat("<", k)
			}
			c.Description = fill(MaxDescriptionLen - 3)
			c.Description += "\u2028"
			for i := range MaxIntents {
				in := Intent{Name: "i" + strings.Repeat("x", i%100) + string(rune('a'+i/100))}
				in.Description = fill(MaxIntentDescriptionLen)
				if i == 0 {
					in.ParamsSchema, _ = json.Marshal(map[string]string{"z": strings.Repeat("a", pad)})
				}
				c.Intents = append(c.Intents, in)
			}
			return c
		}},
	}
}

// roundTrip checks that s, which Sign made, reads back on a peer however
// it travels: in a wire value (CBOR) rendered as JSON again, as Go's
// encoding/json writes it, indented; each time within the limits, to the
// same canonical bytes, its signature verifying.
func roundTrip(t testing.TB, kp *identity.Keypair, s Signed) {
	t.Helper()
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxSize {
		t.Fatalf("Sign accepted a card of %d bytes", len(b))
	}
	want, err := SigningBytes(b)
	if err != nil {
		t.Fatalf("SigningBytes of a signed card: %v", err)
	}
	// As a peer fetches it: JSON → wire value → CBOR in an envelope →
	// wire value → JSON.
	v, err := wire.ParseJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	env, err := wire.Seal(kp, identity.NewUUID(), kp.ID(), wire.Response(identity.NewUUID(), wire.StatusCompleted, v))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := env.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := got.Kind.Result().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	escaped, err := json.Marshal(json.RawMessage(b)) // \u003c for <, \u2028
	if err != nil {
		t.Fatal(err)
	}
	indented, err := json.MarshalIndent(json.RawMessage(b), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		text []byte
	}{{"canonical", b}, {"fetched", fetched}, {"escaped", escaped}, {"indented", indented}} {
		r, err := ParseSigned(f.text)
		if err != nil {
			t.Fatalf("%s (%d bytes of text): %v", f.name, len(f.text), err)
		}
		if err := r.Check(kp.ID()); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if out, _ := r.MarshalJSON(); !bytes.Equal(out, b) {
			t.Fatalf("%s: the canonical form changed", f.name)
		}
	}
	// Both ends compute the same signed bytes.
	if sb, err := SigningBytes(fetched); err != nil || !bytes.Equal(sb, want) {
		t.Fatalf("fetched: the signed bytes changed (%v)", err)
	}
}

// A card of exactly MaxSize is signed and read back from any form it
// travels in, though escapes make that text larger; one byte more is
// refused by Sign.
func TestCardSizeAtTheLimit(t *testing.T) {
	kp := keypair(t)
	for _, c := range sizeCases(t) {
		t.Run(c.name, func(t *testing.T) {
			card, n, pad := cardOfSize(t, kp, MaxSize, c.build)
			s, err := Sign(kp, card)
			if err != nil {
				t.Fatalf("Sign of a card of MaxSize bytes: %v", err)
			}
			roundTrip(t, kp, s)
			if _, err := Sign(kp, c.build(n, pad+1)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Sign of a card one byte over: %v", err)
			}
			// The unsigned card as card.json holds it reads back.
			data, err := card.MarshalIndent()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(data); err != nil {
				t.Fatalf("Parse of MarshalIndent (%d bytes): %v", len(data), err)
			}
		})
	}
}

// The limits are on the canonical form: text larger than MaxSize whose
// canonical form fits is read, text within MaxSize whose canonical form
// does not is refused, and text past MaxText is not read at all.
func TestCardSizeIsCanonical(t *testing.T) {
	kp := keypair(t)
	// Unsigned cards.
	at := func(n int, filler string) string {
		return `{"name":"n","intents":[{"name":"x","params_schema":{"s":"` + strings.Repeat(filler, n) + `"}}]}`
	}
	overhead := len(at(0, ""))
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"at the limit", at(MaxSize-overhead, "a"), true},
		{"one byte over", at(MaxSize-overhead+1, "a"), false},
		{"escaped at the limit", at(MaxSize-overhead, `\u003c`), true},
		{"escaped one over", at(MaxSize-overhead+1, `\u003c`), false},
		{"wire escapes at the limit", at((MaxSize-overhead)/2, `\u0008`), true},
		{"wire escapes one over", at((MaxSize-overhead)/2+1, `\u0008`), false},
		{"whitespace", `{"name":"n"` + strings.Repeat(" ", 2*MaxSize) + `}`, true},
		{"past MaxText", `{"name":"n"` + strings.Repeat(" ", MaxText) + `}`, false},
		// 1e20 is written 100000000000000000000: its text is smaller
		// than its canonical form.
		{"numbers that grow", `{"name":"n","intents":[{"name":"x","params_schema":{"n":[1e20` + strings.Repeat(",1e20", MaxSize/20) + `]}}]}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			card, err := Parse([]byte(c.in))
			if c.ok != (err == nil) {
				t.Fatalf("Parse: %v, want ok %v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			if err == nil {
				data, err := card.MarshalIndent()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Parse(data); err != nil {
					t.Fatalf("card.json of it: %v", err)
				}
			}
		})
	}
	// A signed card at the limit, every character of its strings
	// escaped (six bytes for one), reads back.
	card, _, _ := cardOfSize(t, kp, MaxSize, stringsIn(t, "<"))
	s, err := Sign(kp, card)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.MarshalJSON()
	v, err := parseTree(b)
	if err != nil {
		t.Fatal(err)
	}
	text := appendEscapingAll(nil, v)
	if len(text) <= 5*MaxSize {
		t.Fatalf("test bug: %d bytes of text", len(text))
	}
	if r, err := ParseSigned(text); err != nil || r.Check(kp.ID()) != nil {
		t.Fatalf("ParseSigned of %d bytes, all escaped: %v", len(text), err)
	}
	// A signed card whose canonical form is over MaxSize is refused even
	// as smaller text.
	big := map[string]any{"name": "n", "pubkey": kp.ID().String(), "n": []any{}}
	for range MaxSize / 20 {
		big["n"] = append(big["n"].([]any), 1e20)
	}
	msg, err := signingBytes(big)
	if err != nil {
		t.Fatal(err)
	}
	big["signature"] = base64.StdEncoding.EncodeToString(kp.Sign(msg))
	canon, err := appendCanonical(nil, big)
	if err != nil {
		t.Fatal(err)
	}
	text = bytes.ReplaceAll(canon, []byte("100000000000000000000"), []byte("1e20"))
	if len(canon) <= MaxSize || len(text) > MaxSize {
		t.Fatalf("test bug: %d bytes canonical, %d of text", len(canon), len(text))
	}
	if _, err := ParseSigned(text); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseSigned of a card over MaxSize in canonical form: %v", err)
	}
}

// appendEscapingAll writes v as JSON with every character of its strings
// escaped (\uXXXX, surrogate pairs beyond the BMP).
func appendEscapingAll(dst []byte, v any) []byte {
	switch t := v.(type) {
	case string:
		dst = append(dst, '"')
		for _, u := range utf16.Encode([]rune(t)) {
			dst = fmt.Appendf(dst, `\u%04x`, u)
		}
		return append(dst, '"')
	case []any:
		dst = append(dst, '[')
		for i, item := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendEscapingAll(dst, item)
		}
		return append(dst, ']')
	case map[string]any:
		dst = append(dst, '{')
		i := 0
		for k, item := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			i++
			dst = appendEscapingAll(dst, k)
			dst = append(dst, ':')
			dst = appendEscapingAll(dst, item)
		}
		return append(dst, '}')
	}
	out, _ := appendCanonical(dst, v)
	return out
}
