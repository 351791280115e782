package wire

import (
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// The spec's signed vectors verify on both paths: the raw signable bytes
// and signatures through PeerID.Verify and a Batch, and the decoded
// envelopes through Envelope.Verify and VerifyBatchPrefix.
func TestVectorsVerifyBothPaths(t *testing.T) {
	vs := loadVectors(t)
	var raw identity.Batch
	var envs []*Envelope
	for _, v := range vs.Derived {
		from := vectorKeypair(t, vs.Keys[v.FromKey]).ID()
		signable, sig := unhex(t, v.Signable), unhex(t, v.Sig)
		if !from.Verify(signable, sig) {
			t.Errorf("%s: PeerID.Verify of the vector signature = false", v.Name)
		}
		raw.Add(from, signable, sig)
		var e Envelope
		if v.Frame != "" {
			var err error
			if e, err = Decode(unhex(t, v.Frame)[4:]); err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		} else {
			var err error
			e, err = Seal(vectorKeypair(t, vs.Keys[v.FromKey]), mustUUID(t, v.ID), vectorKeypair(t, vs.Keys[v.ToKey]).ID(), vectorKind(t, v.Kind))
			if err != nil {
				t.Fatal(err)
			}
			if string(e.Sig[:]) != string(sig) {
				t.Fatalf("%s: sealed signature differs from the vector's", v.Name)
			}
		}
		if err := e.Verify(); err != nil {
			t.Errorf("%s: Envelope.Verify: %v", v.Name, err)
		}
		envs = append(envs, &e)
	}
	ok := make([]bool, len(envs))
	if !raw.Verify(ok) {
		t.Errorf("Batch of the vector signatures: Verify = false, ok = %v", ok)
	}
	var b identity.Batch
	if n := VerifyBatchPrefix(&b, envs); n != len(envs) {
		t.Errorf("VerifyBatchPrefix of the %d vector envelopes = %d", len(envs), n)
	}
}

// VerifyBatchPrefix agrees with Envelope.Verify: with one tampered
// envelope among many, it counts those before it.
func TestVerifyBatchFindsTheBadOne(t *testing.T) {
	var envs []*Envelope
	for i := range 64 {
		kp, to := keyA, keyB.ID()
		if i%3 == 0 {
			kp, to = keyB, keyA.ID()
		}
		e, err := Seal(kp, identity.NewUUID(), to, Message("message "+string(rune('a'+i%26))))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, &e)
	}
	var b identity.Batch
	for _, bad := range []int{0, 40, 63} {
		saved := *envs[bad]
		envs[bad].To = envs[bad].From // a signed field changed after signing
		if envs[bad].Verify() == nil {
			t.Fatalf("tampered envelope %d verifies alone: the case is built wrong", bad)
		}
		if n := VerifyBatchPrefix(&b, envs); n != bad {
			t.Errorf("tampered envelope %d: VerifyBatchPrefix = %d", bad, n)
		}
		*envs[bad] = saved
	}
	if n := VerifyBatchPrefix(&b, envs); n != len(envs) {
		t.Fatalf("restored envelopes: VerifyBatchPrefix = %d", n)
	}
	// One envelope, good and bad; and none.
	if n := VerifyBatchPrefix(&b, envs[:1]); n != 1 {
		t.Errorf("one good envelope: VerifyBatchPrefix = %d", n)
	}
	bad := *envs[0]
	bad.Sig[0] ^= 1
	if n := VerifyBatchPrefix(&b, []*Envelope{&bad}); n != 0 {
		t.Errorf("one bad envelope: VerifyBatchPrefix = %d", n)
	}
	if n := VerifyBatchPrefix(&b, nil); n != 0 {
		t.Errorf("no envelopes: VerifyBatchPrefix = %d", n)
	}
}
