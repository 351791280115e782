package identity_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// RFC 8032 section 7.1, TEST 1 and TEST 2.
const (
	rfcSeedA   = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	rfcPubA    = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	rfcTextA   = "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
	rfcUUIDA   = "799d7474-517f-5045-9ae5-ca7af62e35c6"
	rfcSigA    = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
	rfcSeedB   = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"
	rfcPubB    = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
	rfcTextB   = "ed25519:PUAXw+hDiVqStwqnTRt+vJyYLM8uxJaMwM1V8Sr0Zgw="
	rfcUUIDB   = "ab2199a8-b104-5d63-8cdf-39b3dffe9f4a"
	zeroKeyTxt = "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
)

// b64A is the base64 part of rfcTextA.
var b64A = strings.TrimPrefix(rfcTextA, "ed25519:")

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	return b
}

func peerID(t testing.TB, hexKey string) identity.PeerID {
	t.Helper()
	id, err := identity.PeerIDFromBytes(unhex(t, hexKey))
	if err != nil {
		t.Fatalf("PeerIDFromBytes(%s): %v", hexKey, err)
	}
	return id
}

func filled(b byte) identity.PeerID {
	var id identity.PeerID
	for i := range id {
		id[i] = b
	}
	return id
}

// replaceAt returns s with the byte at i replaced by r.
func replaceAt(s string, i int, r string) string { return s[:i] + r + s[i+1:] }

type parsePeerIDCase struct {
	name string
	in   string
	want string // hex of the key when err is nil
	err  error
}

// parsePeerIDCases is shared by TestParsePeerID and the FuzzParsePeerID
// seed corpus.
var parsePeerIDCases = []parsePeerIDCase{
	// Valid.
	{name: "rfc8032 test 1", in: rfcTextA, want: rfcPubA},
	{name: "rfc8032 test 2 (has +)", in: rfcTextB, want: rfcPubB},
	{name: "vector 2a", in: "ed25519:KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=", want: strings.Repeat("2a", 32)},
	{name: "vector 01", in: "ed25519:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", want: strings.Repeat("01", 32)},
	{name: "vector 07", in: "ed25519:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=", want: strings.Repeat("07", 32)},
	{name: "all ff", in: "ed25519:" + strings.Repeat("/", 42) + "8=", want: strings.Repeat("ff", 32)},
	{name: "only last byte set", in: "ed25519:" + strings.Repeat("A", 42) + "E=", want: strings.Repeat("00", 31) + "01"},

	// Wrong prefix.
	{name: "empty", in: "", err: identity.ErrBadPrefix},
	{name: "missing prefix", in: b64A, err: identity.ErrBadPrefix},
	{name: "capital E", in: "Ed25519:" + b64A, err: identity.ErrBadPrefix},
	{name: "all caps", in: "ED25519:" + b64A, err: identity.ErrBadPrefix},
	{name: "space instead of colon", in: "ed25519 " + b64A, err: identity.ErrBadPrefix},
	{name: "no separator", in: "ed25519" + b64A, err: identity.ErrBadPrefix},
	{name: "x25519", in: "x25519:" + b64A, err: identity.ErrBadPrefix},
	{name: "ssh form", in: "ssh-ed25519 " + b64A, err: identity.ErrBadPrefix},
	{name: "leading space", in: " " + rfcTextA, err: identity.ErrBadPrefix},
	{name: "leading BOM", in: "\ufeff" + rfcTextA, err: identity.ErrBadPrefix},
	{name: "prefix only, no colon", in: "ed25519", err: identity.ErrBadPrefix},

	// Wrong length.
	{name: "empty after prefix", in: "ed25519:", err: identity.ErrBadLength},
	{name: "43 chars unpadded", in: "ed25519:" + strings.TrimSuffix(b64A, "="), err: identity.ErrBadLength},
	{name: "45 chars extra padding", in: rfcTextA + "=", err: identity.ErrBadLength},
	{name: "45 chars extra data", in: rfcTextA + "A", err: identity.ErrBadLength},
	{name: "trailing newline", in: rfcTextA + "\n", err: identity.ErrBadLength},
	{name: "trailing space", in: rfcTextA + " ", err: identity.ErrBadLength},
	{name: "double colon", in: "ed25519::" + b64A, err: identity.ErrBadLength},
	{name: "base64 of 31 bytes", in: "ed25519:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 31)), err: identity.ErrBadLength},
	{name: "base64 of 33 bytes", in: "ed25519:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 33)), err: identity.ErrBadLength},
	{name: "base64 of 64 bytes", in: "ed25519:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 64)), err: identity.ErrBadLength},
	{name: "hex instead of base64", in: "ed25519:" + rfcPubA, err: identity.ErrBadLength},

	// Non-canonical base64, right length.
	{name: "url-safe underscore", in: strings.ReplaceAll(rfcTextA, "/", "_"), err: identity.ErrBadBase64},
	{name: "url-safe dash", in: strings.ReplaceAll(rfcTextB, "+", "-"), err: identity.ErrBadBase64},
	{name: "trailing bits 01", in: strings.Replace(rfcTextA, "HURo=", "HURp=", 1), err: identity.ErrBadBase64},
	{name: "trailing bits 11", in: strings.Replace(rfcTextA, "HURo=", "HURr=", 1), err: identity.ErrBadBase64},
	{name: "31 bytes with trailing bits", in: "ed25519:" + strings.Repeat("AQEB", 10) + "AR==", err: identity.ErrBadBase64},
	{name: "padding swapped with last char", in: strings.Replace(rfcTextA, "HURo=", "HUR=o", 1), err: identity.ErrBadBase64},
	{name: "padding at start", in: "ed25519:=" + b64A[1:], err: identity.ErrBadBase64},
	{name: "padding in middle", in: "ed25519:" + replaceAt(b64A, 20, "="), err: identity.ErrBadBase64},
	{name: "double padding in middle", in: "ed25519:" + b64A[:20] + "==" + b64A[22:], err: identity.ErrBadBase64},
	{name: "space inside", in: "ed25519:" + replaceAt(b64A, 10, " "), err: identity.ErrBadBase64},
	{name: "tab inside", in: "ed25519:" + replaceAt(b64A, 10, "\t"), err: identity.ErrBadBase64},
	{name: "newline inside", in: "ed25519:" + replaceAt(b64A, 10, "\n"), err: identity.ErrBadBase64},
	{name: "carriage return inside", in: "ed25519:" + replaceAt(b64A, 10, "\r"), err: identity.ErrBadBase64},
	// Go's base64 decoder skips '\r' and '\n'; four of them around 40
	// valid characters decode to 30 bytes, which must still be reported
	// as bad base64 rather than a bad length.
	{name: "four newlines after 40 chars", in: "ed25519:" + b64A[:40] + "\n\n\n\n", err: identity.ErrBadBase64},
	{name: "crlf crlf after 40 chars", in: "ed25519:" + b64A[:40] + "\r\n\r\n", err: identity.ErrBadBase64},
	{name: "newlines spread out", in: "ed25519:" + b64A[:10] + "\n" + b64A[10:20] + "\n" + b64A[20:30] + "\n" + b64A[30:40] + "\n", err: identity.ErrBadBase64},
	{name: "star", in: "ed25519:" + replaceAt(b64A, 5, "*"), err: identity.ErrBadBase64},
	{name: "dot", in: "ed25519:" + replaceAt(b64A, 5, "."), err: identity.ErrBadBase64},
	{name: "NUL byte", in: "ed25519:" + replaceAt(b64A, 5, "\x00"), err: identity.ErrBadBase64},
	{name: "non-ASCII", in: "ed25519:" + b64A[:41] + "é=", err: identity.ErrBadBase64},
	{name: "invalid UTF-8", in: "ed25519:" + replaceAt(b64A, 0, "\xff"), err: identity.ErrBadBase64},
	{name: "44 chars unpadded but 43 data+junk", in: "ed25519:" + strings.TrimSuffix(b64A, "=") + "!", err: identity.ErrBadBase64},

	// All-zero key.
	{name: "all zero", in: zeroKeyTxt, err: identity.ErrZeroKey},
}

var peerIDSentinels = []error{identity.ErrBadPrefix, identity.ErrBadLength, identity.ErrBadBase64, identity.ErrZeroKey}

// base64Part returns the part of a key string after its (possibly wrong)
// prefix: everything after the first ':' or ' ', else s without a leading
// "ed25519".
func base64Part(s string) string {
	if i := strings.IndexAny(s, ": "); i >= 0 {
		return s[i+1:]
	}
	return strings.TrimPrefix(s, "ed25519")
}

func TestParsePeerID(t *testing.T) {
	for _, tc := range parsePeerIDCases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := identity.ParsePeerID(tc.in)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("ParsePeerID(%q): %v", tc.in, err)
				}
				if got := hex.EncodeToString(id[:]); got != tc.want {
					t.Errorf("ParsePeerID(%q) = %s, want %s", tc.in, got, tc.want)
				}
				if got := id.String(); got != tc.in {
					t.Errorf("String() = %q, want %q", got, tc.in)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("ParsePeerID(%q) error = %v, want %v", tc.in, err, tc.err)
			}
			for _, other := range peerIDSentinels {
				if other != tc.err && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if !id.IsZero() {
				t.Errorf("ParsePeerID(%q) returned non-zero %x with error", tc.in, id[:])
			}
			if part := base64Part(tc.in); len(part) >= 4 && strings.Contains(err.Error(), part) {
				t.Errorf("error %q repeats the input %q", err, part)
			}
		})
	}
}

// TestParsePeerIDTable checks the table itself, so a typo in a row cannot
// turn a "wrong length" case into an accidental test of something else.
func TestParsePeerIDTable(t *testing.T) {
	if len(zeroKeyTxt) != len(rfcTextA) {
		t.Errorf("zero key text has length %d, want %d", len(zeroKeyTxt), len(rfcTextA))
	}
	for _, tc := range parsePeerIDCases {
		rest, ok := strings.CutPrefix(tc.in, identity.PeerIDPrefix)
		switch tc.err {
		case identity.ErrBadBase64, identity.ErrZeroKey, nil:
			if !ok || len(rest) != 44 {
				t.Errorf("%s: input %q must have the prefix and 44 characters", tc.name, tc.in)
			}
		case identity.ErrBadLength:
			if !ok || len(rest) == 44 && !strings.HasSuffix(tc.name, "bytes") {
				t.Errorf("%s: input %q must have the prefix and a wrong length", tc.name, tc.in)
			}
		case identity.ErrBadPrefix:
			if ok {
				t.Errorf("%s: input %q must not have the prefix", tc.name, tc.in)
			}
		}
	}
}

func TestPeerIDStringRoundTrip(t *testing.T) {
	ids := []identity.PeerID{peerID(t, rfcPubA), peerID(t, rfcPubB), filled(0xff), filled(0x01), filled(0x3e), filled(0xfb)}
	var last identity.PeerID
	last[31] = 1
	ids = append(ids, last)
	for _, id := range ids {
		s := id.String()
		if !strings.HasPrefix(s, identity.PeerIDPrefix) || len(s) != len(identity.PeerIDPrefix)+44 {
			t.Errorf("String() = %q: want prefix and 44 characters", s)
		}
		got, err := identity.ParsePeerID(s)
		if err != nil {
			t.Fatalf("ParsePeerID(%q): %v", s, err)
		}
		if got != id {
			t.Errorf("round trip of %x gave %x", id[:], got[:])
		}
	}
	if got := peerID(t, rfcPubA).String(); got != rfcTextA {
		t.Errorf("String() = %q, want %q", got, rfcTextA)
	}
}

func TestPeerIDTextMarshal(t *testing.T) {
	id := peerID(t, rfcPubA)
	b, err := id.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != rfcTextA {
		t.Errorf("MarshalText = %q, want %q", b, rfcTextA)
	}
	var got identity.PeerID
	if err := got.UnmarshalText(b); err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Errorf("UnmarshalText gave %x, want %x", got[:], id[:])
	}

	// A failed UnmarshalText leaves the receiver alone.
	before := got
	for _, tc := range parsePeerIDCases {
		if tc.err == nil {
			continue
		}
		if err := got.UnmarshalText([]byte(tc.in)); !errors.Is(err, tc.err) {
			t.Errorf("UnmarshalText(%q) = %v, want %v", tc.in, err, tc.err)
		}
		if got != before {
			t.Fatalf("UnmarshalText(%q) changed the receiver to %x", tc.in, got[:])
		}
	}

	var zero identity.PeerID
	if b, err := zero.MarshalText(); !errors.Is(err, identity.ErrZeroKey) || b != nil {
		t.Errorf("zero MarshalText = %q, %v; want nil, ErrZeroKey", b, err)
	}
}

func TestPeerIDJSON(t *testing.T) {
	type msg struct {
		From identity.PeerID `json:"from"`
		N    int             `json:"n"`
	}
	in := msg{From: peerID(t, rfcPubA), N: 7}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"from":"` + rfcTextA + `","n":7}`
	if string(b) != want {
		t.Errorf("json.Marshal = %s, want %s", b, want)
	}
	var out msg
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("json round trip = %+v, want %+v", out, in)
	}

	// As a map key too.
	m := map[identity.PeerID]int{peerID(t, rfcPubA): 1, peerID(t, rfcPubB): 2}
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var m2 map[identity.PeerID]int
	if err := json.Unmarshal(b, &m2); err != nil {
		t.Fatal(err)
	}
	if len(m2) != 2 || m2[peerID(t, rfcPubA)] != 1 || m2[peerID(t, rfcPubB)] != 2 {
		t.Errorf("map round trip = %v (json %s)", m2, b)
	}

	// Bad values are rejected with the sentinel.
	for _, c := range []struct {
		json string
		err  error
	}{
		{`{"from":"` + zeroKeyTxt + `"}`, identity.ErrZeroKey},
		{`{"from":"` + b64A + `"}`, identity.ErrBadPrefix},
		{`{"from":"ed25519:` + strings.ReplaceAll(b64A, "/", "_") + `"}`, identity.ErrBadBase64},
		{`{"from":"ed25519:AAAA"}`, identity.ErrBadLength},
	} {
		var out msg
		if err := json.Unmarshal([]byte(c.json), &out); !errors.Is(err, c.err) {
			t.Errorf("json.Unmarshal(%s) = %v, want %v", c.json, err, c.err)
		}
	}
	if _, err := json.Marshal(msg{}); !errors.Is(err, identity.ErrZeroKey) {
		t.Errorf("json.Marshal of zero key = %v, want ErrZeroKey", err)
	}
}

func TestPeerIDShortAndLogValue(t *testing.T) {
	id := peerID(t, rfcPubA)
	const wantShort = "ed25519:11qYAYKx"
	if got := id.Short(); got != wantShort {
		t.Errorf("Short() = %q, want %q", got, wantShort)
	}
	if _, err := identity.ParsePeerID(id.Short()); err == nil {
		t.Errorf("Short() form %q parses", id.Short())
	}
	if v := id.LogValue(); v.Kind() != slog.KindString || v.String() != wantShort {
		t.Errorf("LogValue() = %v (%v), want string %q", v, v.Kind(), wantShort)
	}

	for _, tc := range []struct {
		name string
		h    func(*bytes.Buffer) slog.Handler
		want string
	}{
		{"json", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }, `"peer":"` + wantShort + `"`},
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }, `peer=` + wantShort + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			slog.New(tc.h(&buf)).Info("hello", "peer", id)
			out := buf.String()
			if !strings.Contains(out, tc.want) {
				t.Errorf("log line %q does not contain %q", out, tc.want)
			}
			if strings.Contains(out, b64A) {
				t.Errorf("log line %q contains the full key", out)
			}
		})
	}

	if got, want := fmt.Sprintf("%#v", id), `identity.PeerID("`+rfcTextA+`")`; got != want {
		t.Errorf("%%#v = %s, want %s", got, want)
	}
	if got := fmt.Sprint(id); got != rfcTextA {
		t.Errorf("%%v = %s, want %s", got, rfcTextA)
	}
}

func TestPeerIDFromBytes(t *testing.T) {
	for _, n := range []int{0, 1, 31, 33, 64} {
		b := bytes.Repeat([]byte{7}, n)
		if id, err := identity.PeerIDFromBytes(b); !errors.Is(err, identity.ErrBadLength) || !id.IsZero() {
			t.Errorf("PeerIDFromBytes(%d bytes) = %x, %v; want zero, ErrBadLength", n, id[:], err)
		}
	}
	if id, err := identity.PeerIDFromBytes(nil); !errors.Is(err, identity.ErrBadLength) || !id.IsZero() {
		t.Errorf("PeerIDFromBytes(nil) = %x, %v; want zero, ErrBadLength", id[:], err)
	}
	if _, err := identity.PeerIDFromBytes(make([]byte, 32)); !errors.Is(err, identity.ErrZeroKey) {
		t.Errorf("PeerIDFromBytes(zero) error = %v, want ErrZeroKey", err)
	}

	raw := unhex(t, rfcPubA)
	id, err := identity.PeerIDFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(id[:], raw) || id.IsZero() {
		t.Errorf("PeerIDFromBytes = %x, want %x", id[:], raw)
	}
	raw[0] ^= 0xff // the PeerID must not alias the input
	if id[0] == raw[0] {
		t.Errorf("PeerID aliases its input slice")
	}
	if (identity.PeerID{}).IsZero() != true || id.IsZero() {
		t.Errorf("IsZero wrong")
	}
}

func TestPeerIDUUID(t *testing.T) {
	for _, tc := range []struct{ pub, uuid string }{
		{rfcPubA, rfcUUIDA},
		{rfcPubB, rfcUUIDB},
		{strings.Repeat("2a", 32), "efaa3f87-5c92-5a20-a6c2-14a28d5808ca"},
		{strings.Repeat("01", 32), "c2a81ee0-aba0-5e8e-a408-d61864a82361"},
		{strings.Repeat("02", 32), "82021521-a26c-5d7c-887f-709e91f55d31"},
		{strings.Repeat("07", 32), "a6f261d8-9995-5e2d-ac66-444e03e92202"},
	} {
		u := peerID(t, tc.pub).UUID()
		if got := u.String(); got != tc.uuid {
			t.Errorf("UUID of %s = %s, want %s", tc.pub, got, tc.uuid)
		}
		if u[6]>>4 != 5 || u[8]&0xc0 != 0x80 {
			t.Errorf("UUID %s: want version 5, RFC 4122 variant", u)
		}
	}
}

func TestPeerIDVerify(t *testing.T) {
	kp, err := identity.KeypairFromSeed(unhex(t, rfcSeedA))
	if err != nil {
		t.Fatal(err)
	}
	id := kp.ID()
	msg := []byte("meerkat says hi")
	sig := kp.Sign(msg)
	if !id.Verify(msg, sig) {
		t.Fatal("Verify of a real signature = false")
	}
	if !id.Verify(nil, unhex(t, rfcSigA)) {
		t.Error("Verify of the RFC 8032 TEST 1 signature = false")
	}
	for i := 0; i < len(sig)*8; i += 37 {
		bad := bytes.Clone(sig)
		bad[i/8] ^= 1 << (i % 8)
		if id.Verify(msg, bad) {
			t.Errorf("Verify with signature bit %d flipped = true", i)
		}
	}
	badMsg := bytes.Clone(msg)
	badMsg[0] ^= 1
	if id.Verify(badMsg, sig) {
		t.Error("Verify with a message bit flipped = true")
	}
	if peerID(t, rfcPubB).Verify(msg, sig) {
		t.Error("Verify by another key = true")
	}
	for _, n := range []int{0, ed25519.SignatureSize - 1, ed25519.SignatureSize + 1, 2 * ed25519.SignatureSize} {
		s := make([]byte, n)
		copy(s, sig)
		if id.Verify(msg, s) {
			t.Errorf("Verify with %d-byte signature = true", n)
		}
	}
	if id.Verify(msg, nil) {
		t.Error("Verify with nil signature = true")
	}
}

func FuzzParsePeerID(f *testing.F) {
	for _, tc := range parsePeerIDCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := identity.ParsePeerID(s)
		if err != nil {
			matched := 0
			for _, e := range peerIDSentinels {
				if errors.Is(err, e) {
					matched++
				}
			}
			if matched != 1 {
				t.Fatalf("ParsePeerID(%q) error %v matches %d sentinels, want 1", s, err, matched)
			}
			if !id.IsZero() {
				t.Fatalf("ParsePeerID(%q) returned %x with an error", s, id[:])
			}
			return
		}
		if got := id.String(); got != s {
			t.Fatalf("ParsePeerID(%q) = %q: accepted a non-canonical text", s, got)
		}
		if id.IsZero() {
			t.Fatalf("ParsePeerID(%q) accepted the zero key", s)
		}
		b, err := id.MarshalText()
		if err != nil || string(b) != s {
			t.Fatalf("MarshalText = %q, %v; want %q", b, err, s)
		}
	})
}
