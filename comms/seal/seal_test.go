package seal_test

import (
	"bytes"
	"crypto/ecdh"
	"encoding/hex"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/seal"
	"github.com/meerkatd/meerkatd/identity"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func peer(t testing.TB, s string) identity.PeerID {
	t.Helper()
	var id identity.PeerID
	if copy(id[:], unhex(t, s)) != len(id) {
		t.Fatalf("%s is not 32 bytes", s)
	}
	return id
}

func newKeypair(t testing.TB) *identity.Keypair {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func newOpener(t testing.TB, kp *identity.Keypair) *seal.Opener {
	t.Helper()
	o, err := seal.NewOpener(kp)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// montgomeryU computes the X25519 form of an Ed25519 public key with plain
// big-integer arithmetic, independently of the package: u = (1+y)/(1−y)
// mod 2^255−19, where y is the key's low 255 bits read little-endian.
func montgomeryU(id identity.PeerID) []byte {
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	le := id
	le[31] &= 0x7f // the sign bit of x
	var be [32]byte
	for i := range le {
		be[31-i] = le[i]
	}
	y := new(big.Int).SetBytes(be[:])
	num := new(big.Int).Add(big.NewInt(1), y)
	den := new(big.Int).Sub(big.NewInt(1), y)
	den.Mod(den, p)
	u := new(big.Int).Mul(num, new(big.Int).ModInverse(den, p))
	u.Mod(u, p)
	out := make([]byte, 32)
	u.FillBytes(out) // big-endian
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// basepoint is the X25519 base point, u = 9.
var basepoint = append([]byte{9}, make([]byte, 31)...)

// The conversion of the RFC 8032 test 1 key. The expected X25519 keys were
// computed with an independent implementation (big-integer arithmetic and a
// Montgomery ladder written from RFC 7748) and are checked here against the
// package and against montgomeryU.
func TestConversionKnownAnswer(t *testing.T) {
	kp, err := identity.KeypairFromSeed(unhex(t, "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
	if err != nil {
		t.Fatal(err)
	}
	ed := peer(t, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
	if kp.ID() != ed {
		t.Fatalf("RFC 8032 seed gives public key %x", kp.ID())
	}
	wantPub := unhex(t, "d85e07ec22b0ad881537c2f44d662d1a143cf830c57aca4305d85c7a90f6b62e")
	wantPriv := unhex(t, "307c83864f2833cb427a2ef1c00a013cfdff2768d980c0a3a520f006904de94f")

	if u := montgomeryU(ed); !bytes.Equal(u, wantPub) {
		t.Fatalf("big-integer u = %x, want %x", u, wantPub)
	}
	pub, err := seal.PublicKey(ed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pub.Bytes(), wantPub) {
		t.Fatalf("PublicKey = %x, want %x", pub.Bytes(), wantPub)
	}
	priv, err := seal.PrivateKey(kp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(priv.Bytes(), wantPriv) {
		t.Fatalf("PrivateKey = %x, want %x", priv.Bytes(), wantPriv)
	}
	// X25519(private, 9) is the converted public key.
	base, err := ecdh.X25519().NewPublicKey(basepoint)
	if err != nil {
		t.Fatal(err)
	}
	got, err := priv.ECDH(base)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantPub) {
		t.Fatalf("X25519(private, 9) = %x, want %x", got, wantPub)
	}
}

// For any keypair the two conversions agree, and the public one matches the
// big-integer formula.
func TestConversionsAgree(t *testing.T) {
	for i := range 300 {
		kp := newKeypair(t)
		pub, err := seal.PublicKey(kp.ID())
		if err != nil {
			t.Fatalf("key %d (%x): %v", i, kp.ID(), err)
		}
		priv, err := seal.PrivateKey(kp)
		if err != nil {
			t.Fatal(err)
		}
		if !priv.PublicKey().Equal(pub) {
			t.Fatalf("key %x: PrivateKey(kp).PublicKey() = %x, PublicKey(id) = %x", kp.ID(), priv.PublicKey().Bytes(), pub.Bytes())
		}
		if u := montgomeryU(kp.ID()); !bytes.Equal(pub.Bytes(), u) {
			t.Fatalf("key %x: PublicKey = %x, big-integer u = %x", kp.ID(), pub.Bytes(), u)
		}
		b := priv.Bytes()
		if b[0]&7 != 0 || b[31]&0x80 != 0 || b[31]&0x40 == 0 {
			t.Fatalf("key %x: private scalar %x is not clamped", kp.ID(), b)
		}
	}
}

func TestPublicKeyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, key, reason string
	}{
		{"identity point", "0100000000000000000000000000000000000000000000000000000000000000", "small order"},
		{"all zero (order 4)", "0000000000000000000000000000000000000000000000000000000000000000", "small order"},
		{"order 4, x negative", "0000000000000000000000000000000000000000000000000000000000000080", "small order"},
		{"order 2 (y = -1)", "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", "small order"},
		{"order 8", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", "small order"},
		{"order 8, x negative", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", "small order"},
		{"order 8, other y", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", "small order"},
		{"order 8, other y, x negative", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", "small order"},
		{"not on the curve (y = 2)", "0200000000000000000000000000000000000000000000000000000000000000", "not a curve point"},
		{"not on the curve (y = 7)", "0700000000000000000000000000000000000000000000000000000000000000", "not a curve point"},
		{"y = p + 3", "f0ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", "non-canonical"},
		{"negative zero x", "0100000000000000000000000000000000000000000000000000000000000080", "non-canonical"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := peer(t, tc.key)
			pub, err := seal.PublicKey(id)
			if !errors.Is(err, seal.ErrBadKey) {
				t.Fatalf("PublicKey = %v, %v; want ErrBadKey", pub, err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %q does not say %q", err, tc.reason)
			}
			if box, err := seal.Seal(id, nil, []byte("x")); !errors.Is(err, seal.ErrBadKey) {
				t.Fatalf("Seal to it = %x, %v; want ErrBadKey", box, err)
			}
		})
	}
	// The canonical encoding of the y = p + 3 point above is an ordinary
	// point, so it is the encoding that was refused.
	if _, err := seal.PublicKey(peer(t, "0300000000000000000000000000000000000000000000000000000000000000")); err != nil {
		t.Fatalf("y = 3: %v", err)
	}
}

func TestInfoLayout(t *testing.T) {
	from := peer(t, strings.Repeat("a1", 32))
	to := peer(t, strings.Repeat("b2", 32))
	id := identity.UUID(unhex(t, "00112233445566778899aabbccddeeff"))
	want := unhex(t, hex.EncodeToString([]byte("meerkat-sealed-v1"))+"00"+
		strings.Repeat("a1", 32)+strings.Repeat("b2", 32)+"00112233445566778899aabbccddeeff")
	got := seal.Info(from, to, id)
	if !bytes.Equal(got, want) {
		t.Fatalf("Info =\n%x\nwant\n%x", got, want)
	}
	if len(got) != 98 {
		t.Fatalf("Info is %d bytes, want 98", len(got))
	}
	if bytes.Equal(seal.Info(to, from, id), got) {
		t.Fatal("Info does not tell sender from recipient")
	}
}

func TestRoundTrip(t *testing.T) {
	a, b := newKeypair(t), newKeypair(t)
	ob := newOpener(t, b)
	info := seal.Info(a.ID(), b.ID(), identity.NewUUID())
	for _, tc := range []struct {
		name string
		pt   []byte
	}{
		{"empty", nil},
		{"one byte", []byte{0}},
		{"text", []byte("hello, sealed world")},
		{"256 bytes", bytes.Repeat([]byte{0xa5}, 256)},
		{"1 MiB", bytes.Repeat([]byte("meerkat "), 1<<17)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box, err := seal.Seal(b.ID(), info, tc.pt)
			if err != nil {
				t.Fatal(err)
			}
			if len(box) != len(tc.pt)+seal.Overhead {
				t.Fatalf("box is %d bytes for %d of plaintext, want %d more", len(box), len(tc.pt), seal.Overhead)
			}
			if len(tc.pt) >= 16 && bytes.Contains(box, tc.pt[:16]) {
				t.Fatal("the box shows the plaintext")
			}
			got, err := ob.Open(info, box)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.pt) {
				t.Fatalf("opened %q, want %q", got, tc.pt)
			}
			again, err := seal.Seal(b.ID(), info, tc.pt)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(again, box) {
				t.Fatal("sealing twice gave the same box")
			}
		})
	}
}

// The RFC 8032 key's opener opens a box sealed to its Ed25519 public key,
// tying the fixed conversion vectors to a working box.
func TestRoundTripKnownKey(t *testing.T) {
	kp, err := identity.KeypairFromSeed(unhex(t, "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
	if err != nil {
		t.Fatal(err)
	}
	box, err := seal.Seal(peer(t, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"), []byte("i"), []byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := newOpener(t, kp).Open([]byte("i"), box); err != nil || string(got) != "p" {
		t.Fatalf("Open = %q, %v", got, err)
	}
}

// A Recipient made once seals boxes that open like Seal's, each with its
// own ephemeral key.
func TestRecipientReused(t *testing.T) {
	kp := newKeypair(t)
	rc, err := seal.NewRecipient(kp.ID())
	if err != nil {
		t.Fatal(err)
	}
	ob := newOpener(t, kp)
	var prev []byte
	for i := range 3 {
		msg := []byte{byte('a' + i)}
		box, err := rc.Seal([]byte("info"), msg)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ob.Open([]byte("info"), box); err != nil || string(got) != string(msg) {
			t.Fatalf("box %d opens to %q, %v", i, got, err)
		}
		if prev != nil && string(prev[:seal.Overhead-16]) == string(box[:seal.Overhead-16]) {
			t.Fatal("two boxes share an encapsulated key")
		}
		prev = box
	}
	var zero identity.PeerID
	if _, err := seal.NewRecipient(zero); err == nil {
		t.Fatal("a recipient for the all-zero key")
	}
}

func TestOpenRefuses(t *testing.T) {
	a, b, c := newKeypair(t), newKeypair(t), newKeypair(t)
	ob := newOpener(t, b)
	id := identity.NewUUID()
	info := seal.Info(a.ID(), b.ID(), id)
	pt := []byte("the inner envelope")
	box, err := seal.Seal(b.ID(), info, pt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Open(info, box); err != nil {
		t.Fatalf("the valid box does not open: %v", err)
	}
	flippedInfo := bytes.Clone(info)
	flippedInfo[len(flippedInfo)-1] ^= 1
	for _, tc := range []struct {
		name   string
		opener *seal.Opener
		info   []byte
		box    []byte
	}{
		{"wrong recipient", newOpener(t, c), info, box},
		{"sender's own key", newOpener(t, a), info, box},
		{"info for another envelope id", ob, seal.Info(a.ID(), b.ID(), identity.NewUUID()), box},
		{"info from another sender", ob, seal.Info(c.ID(), b.ID(), id), box},
		{"info with sender and recipient swapped", ob, seal.Info(b.ID(), a.ID(), id), box},
		{"info with a bit flipped", ob, flippedInfo, box},
		{"no info", ob, nil, box},
		{"info with a byte more", ob, append(bytes.Clone(info), 0), box},
		{"byte appended to the box", ob, info, append(bytes.Clone(box), 0)},
		{"empty box", ob, info, nil},
		{"overhead only", ob, info, box[:seal.Overhead]},
		{"enc swapped for another box's", ob, info, func() []byte {
			other, err := seal.Seal(b.ID(), info, pt)
			if err != nil {
				t.Fatal(err)
			}
			return append(other[:32:32], box[32:]...)
		}()},
		{"all-zero enc", ob, info, append(make([]byte, 32), box[32:]...)},
		{"zero Opener", &seal.Opener{}, info, box},
		{"nil Opener", nil, info, box},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.opener.Open(tc.info, tc.box)
			if !errors.Is(err, seal.ErrOpen) {
				t.Fatalf("Open = %q, %v; want ErrOpen", got, err)
			}
			if got != nil {
				t.Fatalf("Open returned %q with its error", got)
			}
		})
	}
	t.Run("each byte flipped", func(t *testing.T) {
		for i := range box {
			for _, mask := range []byte{0x01, 0x80, 0xff} {
				bad := bytes.Clone(box)
				bad[i] ^= mask
				if got, err := ob.Open(info, bad); !errors.Is(err, seal.ErrOpen) {
					t.Fatalf("byte %d ^ %#x: Open = %q, %v; want ErrOpen", i, mask, got, err)
				}
			}
		}
	})
	t.Run("truncated", func(t *testing.T) {
		for n := range len(box) {
			if got, err := ob.Open(info, box[:n]); !errors.Is(err, seal.ErrOpen) {
				t.Fatalf("first %d bytes: Open = %q, %v; want ErrOpen", n, got, err)
			}
		}
	})
}

func FuzzOpen(f *testing.F) {
	a, b, c := newKeypair(f), newKeypair(f), newKeypair(f)
	ob, oc := newOpener(f, b), newOpener(f, c)
	info := seal.Info(a.ID(), b.ID(), identity.NewUUID())
	box, err := seal.Seal(b.ID(), info, []byte("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(info, box)
	f.Add(info, box[:len(box)-1])
	f.Add([]byte{}, box)
	f.Add(info, make([]byte, seal.Overhead))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, in, bx []byte) {
		got, err := ob.Open(in, bx)
		if err == nil {
			// Only the one box sealed to b, with its own info, opens.
			if !bytes.Equal(bx, box) || !bytes.Equal(in, info) || string(got) != "fuzz" {
				t.Fatalf("opened a box never sealed: info %x box %x → %q", in, bx, got)
			}
		} else if !errors.Is(err, seal.ErrOpen) || got != nil {
			t.Fatalf("Open = %q, %v; want nil and ErrOpen", got, err)
		}
		if got, err := oc.Open(in, bx); err == nil {
			t.Fatalf("a key nothing was sealed to opened info %x box %x → %q", in, bx, got)
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	to := newKeypair(b).ID()
	info := seal.Info(newKeypair(b).ID(), to, identity.NewUUID())
	pt := make([]byte, 256)
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		if _, err := seal.Seal(to, info, pt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	kp := newKeypair(b)
	o := newOpener(b, kp)
	info := seal.Info(newKeypair(b).ID(), kp.ID(), identity.NewUUID())
	pt := make([]byte, 256)
	box, err := seal.Seal(kp.ID(), info, pt)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		if _, err := o.Open(info, box); err != nil {
			b.Fatal(err)
		}
	}
}
