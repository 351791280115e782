package identity

import (
	"crypto"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
)

func TestSignerSignsPureEd25519Only(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(0xa0 + i%16)
	}
	kp, err := KeypairFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	s := kp.Signer()
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || PeerID(pub) != kp.ID() {
		t.Fatalf("Public() = %T %x, want the keypair's ed25519.PublicKey", s.Public(), s.Public())
	}
	if _, ok := s.(ed25519.PrivateKey); ok {
		t.Fatal("Signer is the private key itself")
	}
	msg := []byte("hello")
	for _, opts := range []crypto.SignerOpts{crypto.Hash(0), nil, &ed25519.Options{}} {
		sig, err := s.Sign(nil, msg, opts)
		if err != nil {
			t.Fatalf("Sign(%v): %v", opts, err)
		}
		if !ed25519.Verify(pub, msg, sig) {
			t.Fatalf("Sign(%v) made a signature that does not verify", opts)
		}
	}
	for _, opts := range []crypto.SignerOpts{crypto.SHA512, &ed25519.Options{Hash: crypto.SHA512}, &ed25519.Options{Context: "x"}} {
		if _, err := s.Sign(nil, msg, opts); err == nil {
			t.Fatalf("Sign(%v) signed; want only pure Ed25519", opts)
		}
	}
	if got := fmt.Sprintf("%v %+v %#v %x", s, s, s, s); strings.Contains(got, fmt.Sprintf("%x", seed[:8])) {
		t.Fatalf("formatting the Signer printed the seed: %s", got)
	}
}
