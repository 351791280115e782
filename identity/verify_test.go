package identity_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"filippo.io/edwards25519"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"

	"github.com/meerkatd/meerkatd/identity"
)

// The eight points of small order, canonically encoded: the identity, the
// point of order 2, the two of order 4 and the four of order 8.
var smallOrder = []struct {
	name  string
	enc   string
	order int
}{
	{"identity", "0100000000000000000000000000000000000000000000000000000000000000", 1},
	{"order2", "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", 2},
	{"order4a", "0000000000000000000000000000000000000000000000000000000000000000", 4},
	{"order4b", "0000000000000000000000000000000000000000000000000000000000000080", 4},
	{"order8a", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", 8},
	{"order8b", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", 8},
	{"order8c", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", 8},
	{"order8d", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", 8},
}

// Non-canonical encodings of small-order points: y at or above
// p = 2^255-19 (y = p+1 is the identity, y = p is a point of order 4), and
// x = 0 with the sign bit set ("-0", for the identity and the point of
// order 2). Other y from p to 2^255-1 encode points of large order (y =
// p+3 is the point with y = 3), but nobody knows their discrete
// logarithms, so these are the only non-canonical encodings a signature
// can be crafted for.
var nonCanonical = []struct{ name, enc string }{
	{"identity_y=p+1", "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"},
	{"order4_y=p", "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"},
	{"order4_y=p_sign", "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"},
	{"identity_minus0", "0100000000000000000000000000000000000000000000000000000000000080"},
	{"order2_minus0", "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"},
}

// groupOrder is L, little-endian.
var groupOrder = mustHex("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		panic("bad hex in test: " + s)
	}
	return b
}

func point(t testing.TB, enc []byte) *edwards25519.Point {
	t.Helper()
	p, err := new(edwards25519.Point).SetBytes(enc)
	if err != nil {
		t.Fatalf("%x is not a point: %v", enc, err)
	}
	return p
}

// scalarFrom derives a scalar from a label, so the crafted cases are the
// same on every run.
func scalarFrom(label string) *edwards25519.Scalar {
	h := sha512.Sum512([]byte(label))
	s, err := new(edwards25519.Scalar).SetUniformBytes(h[:])
	if err != nil {
		panic(err)
	}
	return s
}

// challenge is k = SHA-512(R || A || msg) mod L.
func challenge(rEnc, aEnc, msg []byte) *edwards25519.Scalar {
	h := sha512.New()
	h.Write(rEnc)
	h.Write(aEnc)
	h.Write(msg)
	k, err := new(edwards25519.Scalar).SetUniformBytes(h.Sum(nil))
	if err != nil {
		panic(err)
	}
	return k
}

// craft returns the signature (rEnc, S = r + k*a) for the given encodings:
// aEnc encodes [a]B plus any small-order point, rEnc encodes [r]B plus any
// small-order point. Such a signature satisfies the cofactored equation
// [8]([S]B - R - [k]A) = 0; the cofactorless one only if the small-order
// parts cancel.
func craft(a, r *edwards25519.Scalar, aEnc, rEnc, msg []byte) []byte {
	k := challenge(rEnc, aEnc, msg)
	s := new(edwards25519.Scalar).MultiplyAdd(k, a, r)
	return append(bytes.Clone(rEnc), s.Bytes()...)
}

// kTimes reports whether [k]T is the identity for the k of (rEnc, aEnc, msg).
func kTimesIsIdentity(t testing.TB, tEnc, rEnc, aEnc, msg []byte) bool {
	k := challenge(rEnc, aEnc, msg)
	p := new(edwards25519.Point).ScalarMult(k, point(t, tEnc))
	return p.Equal(edwards25519.NewIdentityPoint()) == 1
}

// addS returns sig with L added to its S (the same value mod L, in 256 bits).
func addS(sig []byte, add []byte) []byte {
	out := bytes.Clone(sig)
	var carry uint16
	for i := range 32 {
		v := uint16(out[32+i]) + uint16(add[i]) + carry
		out[32+i], carry = byte(v), v>>8
	}
	return out
}

type sigCase struct {
	name string
	pub  []byte
	msg  []byte
	sig  []byte
	// want is this package's verdict, on both paths.
	want bool
	// zip215 is the verdict of ZIP 215 (cofactored, any encoding, any
	// order): a case it accepts is a well-formed signature for the
	// cofactored equation, refused here only by the rule under test.
	zip215 bool
	// stdlib is crypto/ed25519's (cofactorless) verdict, when the case
	// pins it down; nil when it depends on the challenge.
	stdlib *bool
}

func ptr(b bool) *bool { return &b }

// sigCases builds the edge cases of the acceptance rule.
func sigCases(t testing.TB) []sigCase {
	t.Helper()
	msg := []byte("a signing input of an envelope")
	a := scalarFrom("a")
	r := scalarFrom("r")
	aEnc := new(edwards25519.Point).ScalarBaseMult(a).Bytes()
	rPoint := new(edwards25519.Point).ScalarBaseMult(r)
	zero := edwards25519.NewScalar()
	var cs []sigCase

	honest := craft(a, r, aEnc, rPoint.Bytes(), msg)
	cs = append(cs, sigCase{"honest", aEnc, msg, honest, true, true, ptr(true)})

	// A key nobody holds: any R and S with [8]([S]B - R) = 0 verify for
	// every message under the cofactored equation.
	for _, so := range smallOrder {
		enc := mustHex(so.enc)
		m := msg
		stdlib := ptr(true)
		if so.order > 1 {
			// Pick a message whose challenge does not kill the key's
			// point, so the cofactorless verdict is fixed (false).
			for i := 0; kTimesIsIdentity(t, enc, rPoint.Bytes(), enc, m); i++ {
				m = fmt.Appendf(nil, "%s %d", msg, i)
			}
			stdlib = ptr(false)
		}
		sig := craft(zero, r, enc, rPoint.Bytes(), m)
		cs = append(cs, sigCase{"small_order_A/" + so.name, enc, m, sig, false, true, stdlib})
	}
	for _, nc := range nonCanonical {
		enc := mustHex(nc.enc)
		sig := craft(zero, r, enc, rPoint.Bytes(), msg)
		// crypto/ed25519 takes a non-canonical encoding of the identity
		// as a key, under which [S]B = R for every message.
		var stdlib *bool
		if strings.HasPrefix(nc.name, "identity") {
			stdlib = ptr(true)
		}
		cs = append(cs, sigCase{"non_canonical_A/" + nc.name, enc, msg, sig, false, true, stdlib})
	}

	// R of small order: S = k*a. Allowed; the cofactorless check agrees
	// only for the identity.
	for _, so := range smallOrder {
		enc := mustHex(so.enc)
		sig := craft(a, zero, aEnc, enc, msg)
		cs = append(cs, sigCase{"small_order_R/" + so.name, aEnc, msg, sig, true, true, ptr(so.order == 1)})
	}
	// R non-canonical (y >= p or "-0"): refused, though the cofactored
	// equation holds.
	for _, nc := range nonCanonical {
		enc := mustHex(nc.enc)
		sig := craft(a, zero, aEnc, enc, msg)
		cs = append(cs, sigCase{"non_canonical_R/" + nc.name, aEnc, msg, sig, false, true, ptr(false)})
	}

	// Mixed order: R' = R + T with T of order 8 holds only under the
	// cofactored equation.
	t8 := point(t, mustHex(smallOrder[4].enc))
	mixedR := new(edwards25519.Point).Add(rPoint, t8).Bytes()
	cs = append(cs, sigCase{"mixed_order_R", aEnc, msg, craft(a, r, aEnc, mixedR, msg), true, true, ptr(false)})
	// A' = [a]B + T: a key with a small-order component, not small order.
	mixedA := new(edwards25519.Point).Add(new(edwards25519.Point).ScalarBaseMult(a), t8).Bytes()
	m := msg
	for i := 0; kTimesIsIdentity(t, mustHex(smallOrder[4].enc), rPoint.Bytes(), mixedA, m); i++ {
		m = fmt.Appendf(nil, "%s %d", msg, i)
	}
	cs = append(cs, sigCase{"mixed_order_A", mixedA, m, craft(a, r, mixedA, rPoint.Bytes(), m), true, true, ptr(false)})
	// Both small-order A and small-order R, S = 0.
	cs = append(cs, sigCase{"small_order_A_and_R", mustHex(smallOrder[4].enc), msg,
		craft(zero, zero, mustHex(smallOrder[4].enc), mustHex(smallOrder[6].enc), msg), false, true, nil})

	// S out of range: S+L is the same scalar, refused by every rule.
	cs = append(cs, sigCase{"S_plus_L", aEnc, msg, addS(honest, groupOrder), false, false, ptr(false)})
	high := bytes.Clone(honest)
	high[63] |= 0x80
	cs = append(cs, sigCase{"S_high_bit", aEnc, msg, high, false, false, ptr(false)})
	// S = L exactly, with R = -[k]A would need k before R; L itself with
	// the honest R is simply out of range.
	eqL := append(bytes.Clone(honest[:32]), groupOrder...)
	cs = append(cs, sigCase{"S_equals_L", aEnc, msg, eqL, false, false, ptr(false)})

	// Encodings that are not points at all.
	notPoint := notAPoint(t)
	cs = append(cs, sigCase{"A_not_a_point", notPoint, msg, honest, false, false, ptr(false)})
	badR := append(bytes.Clone(notPoint), honest[32:]...)
	cs = append(cs, sigCase{"R_not_a_point", aEnc, msg, badR, false, false, ptr(false)})

	// Ordinary failures.
	cs = append(cs, sigCase{"wrong_message", aEnc, []byte("another input"), honest, false, false, ptr(false)})
	cs = append(cs, sigCase{"short_signature", aEnc, msg, honest[:63], false, false, ptr(false)})
	return cs
}

// notAPoint returns a 32-byte string that decodes to no point: a y for
// which x^2 has no square root.
func notAPoint(t testing.TB) []byte {
	t.Helper()
	for i := 2; i < 256; i++ {
		enc := make([]byte, 32)
		enc[0] = byte(i)
		if _, err := new(edwards25519.Point).SetBytes(enc); err != nil {
			return enc
		}
	}
	t.Fatal("no invalid y found")
	return nil
}

var zip215 = &voi.Options{Verify: voi.VerifyOptionsZIP_215}

// honestEntries returns n valid (id, msg, sig) entries by distinct keys.
func honestEntries(t testing.TB, n int) (ids []identity.PeerID, msgs, sigs [][]byte) {
	t.Helper()
	for i := range n {
		seed := make([]byte, 32)
		binary.LittleEndian.PutUint32(seed, uint32(i)+1)
		kp, err := identity.KeypairFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Appendf(nil, "entry %d of an honest batch", i)
		ids, msgs, sigs = append(ids, kp.ID()), append(msgs, msg), append(sigs, kp.Sign(msg))
	}
	return ids, msgs, sigs
}

// The acceptance rule, case by case, on the single path, on a batch of one
// and inside a batch of honest signatures: the same verdict every time.
func TestVerifyRule(t *testing.T) {
	ids, msgs, sigs := honestEntries(t, 8)
	oneID, oneMsgs, oneSigner := oneSignerEntries(8)
	for _, c := range sigCases(t) {
		t.Run(c.name, func(t *testing.T) {
			// The construction is what the case says it is.
			if got := voi.VerifyWithOptions(c.pub, c.msg, c.sig, zip215); got != c.zip215 {
				t.Fatalf("ZIP 215 verdict = %v, want %v: the case is built wrong", got, c.zip215)
			}
			if c.stdlib != nil {
				if got := ed25519.Verify(c.pub, c.msg, c.sig); got != *c.stdlib {
					t.Fatalf("crypto/ed25519 verdict = %v, want %v", got, *c.stdlib)
				}
			}
			id := identity.PeerID(c.pub)
			if got := id.Verify(c.msg, c.sig); got != c.want {
				t.Errorf("PeerID.Verify = %v, want %v", got, c.want)
			}
			var v identity.Verifier
			for range 2 { // the key expanded, then from the cache
				if got := v.Verify(id, c.msg, c.sig); got != c.want {
					t.Errorf("Verifier.Verify = %v, want %v", got, c.want)
				}
			}

			var one identity.Batch
			one.Add(id, c.msg, c.sig)
			ok := []bool{!c.want}
			if all := one.Verify(ok); all != c.want || ok[0] != c.want {
				t.Errorf("batch of one: Verify = %v, ok = %v, want %v", all, ok, c.want)
			}

			var b identity.Batch
			const at = 5
			for i := range ids {
				if i == at {
					b.Add(id, c.msg, c.sig)
				}
				b.Add(ids[i], msgs[i], sigs[i])
			}
			checkBatch(t, "batch of distinct signers", &b, at, c.want)

			// Among honest signatures by the key most cases use, whose
			// terms the batch adds up into one.
			b.Reset()
			for i := range oneSigner {
				if i == at {
					b.Add(id, c.msg, c.sig)
				}
				b.Add(oneID, oneMsgs[i], oneSigner[i])
			}
			checkBatch(t, "batch of one signer", &b, at, c.want)
		})
	}
}

// oneSignerEntries returns n honest signatures by the key the crafted cases
// use, [a]B, over distinct messages.
func oneSignerEntries(n int) (id identity.PeerID, msgs, sigs [][]byte) {
	a := scalarFrom("a")
	aEnc := new(edwards25519.Point).ScalarBaseMult(a).Bytes()
	for i := range n {
		r := scalarFrom(fmt.Sprintf("r%d", i))
		msg := fmt.Appendf(nil, "entry %d by one signer", i)
		msgs = append(msgs, msg)
		sigs = append(sigs, craft(a, r, aEnc, new(edwards25519.Point).ScalarBaseMult(r).Bytes(), msg))
	}
	return identity.PeerID(aEnc), msgs, sigs
}

// checkBatch verifies b, in which every entry but the one at index at is
// honest and that one's verdict is want.
func checkBatch(t *testing.T, what string, b *identity.Batch, at int, want bool) {
	t.Helper()
	ok := make([]bool, b.Len())
	if all := b.Verify(ok); all != want {
		t.Errorf("%s (%d): Verify = %v, want %v", what, b.Len(), all, want)
	}
	for i, got := range ok {
		if w := i != at || want; got != w {
			t.Errorf("%s (%d): ok[%d] = %v, want %v", what, b.Len(), i, got, w)
		}
	}
}

// Two forged signatures whose errors cancel when added up, S1 + d and
// S2 - d: a batch must weigh each entry by its own random scalar, or the
// pair passes as one. Repeated, so that weights drawn from too few bits
// would also be caught.
func TestBatchForgedPairCancelling(t *testing.T) {
	id, msgs, sigs := oneSignerEntries(2)
	d := scalarFrom("d")
	shift := func(sig []byte, neg bool) []byte {
		s, err := new(edwards25519.Scalar).SetCanonicalBytes(sig[32:])
		if err != nil {
			t.Fatal(err)
		}
		if neg {
			s.Subtract(s, d)
		} else {
			s.Add(s, d)
		}
		return append(bytes.Clone(sig[:32]), s.Bytes()...)
	}
	s1, s2 := shift(sigs[0], false), shift(sigs[1], true)
	if id.Verify(msgs[0], s1) || id.Verify(msgs[1], s2) {
		t.Fatal("a shifted signature verifies alone: the case is built wrong")
	}
	var b identity.Batch
	ok := make([]bool, 2)
	for i := range 1000 {
		b.Reset()
		b.Add(id, msgs[0], s1)
		b.Add(id, msgs[1], s2)
		if b.Verify(ok) || ok[0] || ok[1] {
			t.Fatalf("try %d: the cancelling pair passed: Verify true or ok = %v", i, ok)
		}
	}
}

// One bad signature among 64 fails the batch and only its own entry.
func TestBatchFindsTheBadOne(t *testing.T) {
	ids, msgs, sigs := honestEntries(t, 64)
	var b identity.Batch
	ok := make([]bool, 64)
	for _, bad := range []int{0, 17, 63} {
		b.Reset()
		for i := range ids {
			msg := msgs[i]
			if i == bad {
				msg = append(bytes.Clone(msg), '!')
			}
			b.Add(ids[i], msg, sigs[i])
		}
		if b.Len() != 64 {
			t.Fatalf("Len = %d, want 64", b.Len())
		}
		if b.Verify(ok) {
			t.Errorf("bad entry %d: Verify = true", bad)
		}
		for i := range ok {
			if ok[i] != (i != bad) {
				t.Errorf("bad entry %d: ok[%d] = %v", bad, i, ok[i])
			}
		}
		if n := b.VerifyPrefix(); n != bad {
			t.Errorf("bad entry %d: VerifyPrefix = %d", bad, n)
		}
	}
	// And with none bad, the same reused batch passes.
	b.Reset()
	for i := range ids {
		b.Add(ids[i], msgs[i], sigs[i])
	}
	if !b.Verify(ok) {
		t.Fatal("honest batch after reuse: Verify = false")
	}
	if n := b.VerifyPrefix(); n != 64 {
		t.Fatalf("honest batch: VerifyPrefix = %d, want 64", n)
	}
	for i := range ok {
		if !ok[i] {
			t.Errorf("honest batch: ok[%d] = false", i)
		}
	}
}

func TestBatchZeroValue(t *testing.T) {
	var b identity.Batch
	if b.Len() != 0 || !b.Verify(nil) {
		t.Fatalf("empty batch: Len = %d, Verify = false", b.Len())
	}
	ids, msgs, sigs := honestEntries(t, 2)
	b.Add(ids[0], msgs[0], sigs[1])
	if b.Verify(nil) {
		t.Fatal("batch with a wrong signature: Verify(nil) = true")
	}
	b.Reset()
	if b.Len() != 0 {
		t.Fatalf("Len after Reset = %d", b.Len())
	}
	b.Add(ids[1], msgs[1], sigs[1])
	if !b.Verify(nil) {
		t.Fatal("batch after Reset: Verify(nil) = false")
	}
	// A batch whose only entry has a key that is no point.
	b.Reset()
	b.Add(identity.PeerID(notAPoint(t)), msgs[0], sigs[0])
	ok := []bool{true}
	if b.Verify(ok) || ok[0] {
		t.Fatalf("batch of one non-point key: Verify = true or ok = %v", ok)
	}
	if n := b.VerifyPrefix(); n != 0 {
		t.Fatalf("batch of one non-point key: VerifyPrefix = %d", n)
	}
	// Nothing after an entry that cannot be valid counts, good or not.
	b.Add(ids[1], msgs[1], sigs[1])
	if n := b.VerifyPrefix(); n != 0 {
		t.Fatalf("non-point key, then a good entry: VerifyPrefix = %d, want 0", n)
	}
	b.Reset()
	b.Add(ids[1], msgs[1], sigs[1])
	b.Add(identity.PeerID(notAPoint(t)), msgs[0], sigs[0])
	b.Add(ids[1], msgs[1], sigs[1])
	if n := b.VerifyPrefix(); n != 1 {
		t.Fatalf("good, non-point key, good: VerifyPrefix = %d, want 1", n)
	}
	// Add keeps neither msg nor sig.
	b.Reset()
	msg, sig := bytes.Clone(msgs[0]), bytes.Clone(sigs[0])
	b.Add(ids[0], msg, sig)
	clear(msg)
	clear(sig)
	if !b.Verify(nil) {
		t.Fatal("Verify after the caller reused msg and sig = false")
	}
}

// Signatures are RFC 8032's deterministic ones: byte for byte those of
// crypto/ed25519.
func TestSignMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		seed := make([]byte, ed25519.SeedSize)
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		msg := make([]byte, rng.IntN(400))
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		kp, err := identity.KeypairFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		want := ed25519.Sign(ed25519.NewKeyFromSeed(seed), msg)
		if got := kp.Sign(msg); !bytes.Equal(got, want) {
			t.Fatalf("case %d: Sign = %x, crypto/ed25519 gives %x", i, got, want)
		}
		var into [ed25519.SignatureSize]byte
		kp.SignInto(&into, msg)
		if !bytes.Equal(into[:], want) {
			t.Fatalf("case %d: SignInto = %x, crypto/ed25519 gives %x", i, into, want)
		}
	}
}

// FuzzBatchMatchesSingle checks that a batch holding a fuzzed entry among
// honest ones reports, for every entry, what PeerID.Verify says of it.
func FuzzBatchMatchesSingle(f *testing.F) {
	for _, c := range sigCases(f) {
		f.Add(c.pub, c.msg, c.sig, uint8(len(c.name)))
	}
	f.Add(make([]byte, 32), []byte{}, make([]byte, 64), uint8(0))
	ids, msgs, sigs := honestEntries(f, 4)
	f.Fuzz(func(t *testing.T, pub, msg, sig []byte, at uint8) {
		var id identity.PeerID
		copy(id[:], pub)
		var b identity.Batch
		var v identity.Verifier
		var want []bool
		pos := int(at) % (len(ids) + 1)
		add := func(id identity.PeerID, msg, sig []byte) {
			b.Add(id, msg, sig)
			want = append(want, id.Verify(msg, sig))
			if got := v.Verify(id, msg, sig); got != want[len(want)-1] {
				t.Fatalf("Verifier says %v, PeerID.Verify %v", got, want[len(want)-1])
			}
		}
		for i := range ids {
			if i == pos {
				add(id, msg, sig)
			}
			add(ids[i], msgs[i], sigs[i])
		}
		if pos == len(ids) {
			add(id, msg, sig)
		}
		// The fuzzed signature under an honest key too, whose entries
		// the batch equation adds up into one term.
		add(ids[0], msg, sig)
		add(ids[0], msgs[0], sigs[0])
		ok := make([]bool, b.Len())
		all := b.Verify(ok)
		wantAll := true
		for i := range want {
			wantAll = wantAll && want[i]
			if ok[i] != want[i] {
				t.Fatalf("entry %d: batch says %v, PeerID.Verify %v", i, ok[i], want[i])
			}
		}
		if all != wantAll {
			t.Fatalf("batch Verify = %v, entries say %v", all, wantAll)
		}
		prefix := len(want)
		if i := slices.Index(want, false); i >= 0 {
			prefix = i
		}
		if n := b.VerifyPrefix(); n != prefix {
			t.Fatalf("VerifyPrefix = %d, entries say %d (%v)", n, prefix, want)
		}
	})
}

// A Verifier keeps at most 256 expanded keys, and one it forgot is
// expanded again, with the same verdicts.
func TestVerifierBound(t *testing.T) {
	ids, msgs, sigs := honestEntries(t, 300)
	var v identity.Verifier
	for round := range 2 {
		for i := range ids {
			if !v.Verify(ids[i], msgs[i], sigs[i]) {
				t.Fatalf("round %d: entry %d refused", round, i)
			}
			if v.Verify(ids[(i+1)%len(ids)], msgs[i], sigs[i]) {
				t.Fatalf("round %d: entry %d verifies under another key", round, i)
			}
		}
	}
	if n := identity.CachedKeys(&v); n > 256 {
		t.Fatalf("the Verifier holds %d keys", n)
	}
}

// Check refuses exactly the keys no signature is accepted by: every
// small-order point and every non-canonical encoding of one, and the
// all-zero key; a generated key passes.
func TestPeerIDCheck(t *testing.T) {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.ID().Check(); err != nil {
		t.Fatalf("a generated key: %v", err)
	}
	if err := (identity.PeerID{}).Check(); !errors.Is(err, identity.ErrZeroKey) {
		t.Fatalf("the zero key: %v", err)
	}
	for _, c := range append(append([]struct{ name, enc string }{}, nonCanonical...), func() (out []struct{ name, enc string }) {
		for _, so := range smallOrder {
			out = append(out, struct{ name, enc string }{so.name, so.enc})
		}
		return out
	}()...) {
		var id identity.PeerID
		copy(id[:], mustHex(c.enc))
		if err := id.Check(); !errors.Is(err, identity.ErrWeakKey) && !(id.IsZero() && errors.Is(err, identity.ErrZeroKey)) {
			t.Errorf("%s: Check() = %v, want identity.ErrWeakKey", c.name, err)
		}
	}
}
