package identity

import (
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"
)

// verifiesEverywhere fails unless sig is a valid signature of msg by kp
// for crypto/ed25519, PeerID.Verify, a Verifier and a Batch.
func verifiesEverywhere(t *testing.T, kp *Keypair, msg []byte, sig [ed25519.SignatureSize]byte) {
	t.Helper()
	var v Verifier
	var b Batch
	b.Add(kp.ID(), msg, sig[:])
	ok := make([]bool, 1)
	pub := kp.ID()
	switch {
	case !ed25519.Verify(pub[:], msg, sig[:]):
		t.Fatalf("crypto/ed25519 refuses the signature of %q", msg)
	case !kp.ID().Verify(msg, sig[:]):
		t.Fatalf("PeerID.Verify refuses the signature of %q", msg)
	case !v.Verify(kp.ID(), msg, sig[:]):
		t.Fatalf("a Verifier refuses the signature of %q", msg)
	case !b.Verify(ok) || !ok[0]:
		t.Fatalf("a batch refuses the signature of %q", msg)
	}
}

// A signature with a prepared nonce verifies everywhere, is not the
// deterministic one, and uses the nonce once: the next, with none
// prepared, is the deterministic signature again.
func TestSignIntoPrepared(t *testing.T) {
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("an acks envelope's signing input")
	var det, sig [ed25519.SignatureSize]byte
	kp.SignInto(&det, msg)

	kp.SignIntoPrepared(&sig, msg)
	if sig != det {
		t.Fatal("with no nonce prepared, SignIntoPrepared is not SignInto")
	}
	if !kp.PrepareNonce() {
		t.Fatal("PrepareNonce made no nonce for a key with none")
	}
	kp.SignIntoPrepared(&sig, msg)
	if sig == det {
		t.Fatal("a prepared nonce made the deterministic signature")
	}
	verifiesEverywhere(t, kp, msg, sig)
	kp.SignIntoPrepared(&sig, msg)
	if sig != det {
		t.Fatal("the nonce was used twice, or one was made without PrepareNonce")
	}
}

// A key keeps preparedNonces at most; each makes its own R, used once.
func TestPreparedNoncesAreUsedOnce(t *testing.T) {
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		made := 0
		for kp.PrepareNonce() {
			made++
			if made > preparedNonces {
				t.Fatalf("PrepareNonce made more than %d nonces", preparedNonces)
			}
		}
		if made != preparedNonces {
			t.Fatalf("round %d: %d nonces made, want %d", round, made, preparedNonces)
		}
		seen := map[[32]byte]bool{}
		msg := []byte("the same message each time")
		var det [ed25519.SignatureSize]byte
		kp.SignInto(&det, msg)
		for i := range preparedNonces {
			var sig [ed25519.SignatureSize]byte
			kp.SignIntoPrepared(&sig, msg)
			R := [32]byte(sig[:32])
			if seen[R] || sig == det {
				t.Fatalf("signature %d: R repeated or deterministic", i)
			}
			seen[R] = true
			verifiesEverywhere(t, kp, msg, sig)
		}
	}
}

// Under a burst nonces are neither made nor taken, and signatures are
// the deterministic ones.
func TestPreparedNoncesNotInABurst(t *testing.T) {
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if !kp.PrepareNonce() {
		t.Fatal("no nonce made")
	}
	s := kp.secret()
	s.alone.Store(0) // a burst
	if kp.PrepareNonce() {
		t.Fatal("a nonce made during a burst")
	}
	msg := []byte("m")
	var det, sig [ed25519.SignatureSize]byte
	kp.SignInto(&det, msg)
	s.alone.Store(0) // SignInto alone counts towards the burst's end
	kp.SignIntoPrepared(&sig, msg)
	if sig != det {
		t.Fatal("a prepared nonce taken during a burst")
	}
	s.alone.Store(gatherUntil) // the burst is over
	kp.SignIntoPrepared(&sig, msg)
	if sig == det {
		t.Fatal("the nonce prepared before the burst is gone")
	}
	verifiesEverywhere(t, kp, msg, sig)
}

// Goroutines preparing and signing at once (run with -race): every
// signature verifies, and no two share an R.
func TestPreparedNoncesConcurrently(t *testing.T) {
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 50
	sigs := make([][each][ed25519.SignatureSize]byte, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				kp.PrepareNonce()
				kp.SignIntoPrepared(&sigs[g][i], fmt.Appendf(nil, "%d/%d", g, i))
			}
		})
	}
	wg.Wait()
	seen := map[[32]byte]bool{}
	for g := range goroutines {
		for i := range each {
			verifiesEverywhere(t, kp, fmt.Appendf(nil, "%d/%d", g, i), sigs[g][i])
			R := [32]byte(sigs[g][i][:32])
			if seen[R] {
				t.Fatalf("two signatures of different messages share an R")
			}
			seen[R] = true
		}
	}
}

func TestSignIntoPreparedNilPanics(t *testing.T) {
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("SignIntoPrepared into nil did not panic")
		}
	}()
	kp.SignIntoPrepared(nil, []byte("m"))
}

func BenchmarkSignIntoPrepared(b *testing.B) {
	kp, err := GenerateKeypair()
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 200)
	var sig [ed25519.SignatureSize]byte
	b.Run("deterministic", func(b *testing.B) {
		for b.Loop() {
			kp.SignInto(&sig, msg)
		}
	})
	b.Run("prepare", func(b *testing.B) {
		for b.Loop() {
			kp.PrepareNonce()
			kp.SignIntoPrepared(&sig, msg) // takes it, so the next is made
		}
	})
	b.Run("prepared", func(b *testing.B) { // the signature alone
		for b.Loop() {
			b.StopTimer()
			kp.PrepareNonce()
			b.StartTimer()
			kp.SignIntoPrepared(&sig, msg)
		}
	})
}

// A nonce not used within preparedFor of being made (by either clock) is
// not used at all: the signature is the deterministic one, and the stale
// nonces make room for fresh ones.
func TestPreparedNoncesGoStale(t *testing.T) {
	kp, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var now time.Time
	preparedClock = func() time.Time { return now }
	t.Cleanup(func() { preparedClock = time.Now })
	msg := []byte("m")
	var det, sig [ed25519.SignatureSize]byte
	kp.SignInto(&det, msg)
	for _, c := range []struct {
		name  string
		later time.Time
	}{
		{"monotonic clock past preparedFor", base.Add(preparedFor)},
		{"wall clock moved on (a restored snapshot)", base.Round(0).Add(preparedFor + time.Second)},
		{"wall clock went back", base.Round(0).Add(-time.Second)},
	} {
		now = base
		for kp.PrepareNonce() {
		}
		now = c.later
		kp.SignIntoPrepared(&sig, msg)
		if sig != det {
			t.Errorf("%s: a stale nonce was used", c.name)
		}
		if !kp.PrepareNonce() {
			t.Errorf("%s: the stale nonces left no room for a fresh one", c.name)
		}
		kp.SignIntoPrepared(&sig, msg)
		if sig == det {
			t.Errorf("%s: the fresh nonce was not used", c.name)
		}
		verifiesEverywhere(t, kp, msg, sig)
	}
	now = base
	for kp.PrepareNonce() {
	}
	now = base.Add(preparedFor - time.Millisecond)
	kp.SignIntoPrepared(&sig, msg)
	if sig == det {
		t.Error("a nonce within preparedFor was not used")
	}
}
