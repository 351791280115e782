package wire

import (
	"testing"

	"github.com/meerkatd/meerkatd/identity"
)

// The spec's signed vectors verify on both paths: the raw signable bytes
// and signatures through PeerID.Verify and a Batch, and the decoded
// envelopes through Envelope.Verify and VerifyBatch.
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
	if !VerifyBatch(&b, envs, ok) {
		t.Errorf("VerifyBatch of the vector envelopes = false, ok = %v", ok)
	}
	for i := range ok {
		if !ok[i] {
			t.Errorf("VerifyBatch: ok[%d] = false", i)
		}
	}
}

// VerifyBatch agrees with Envelope.Verify envelope by envelope: one
// tampered envelope among many is refused, and only it.
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
	ok := make([]bool, len(envs))
	for _, bad := range []int{0, 40, 63} {
		saved := *envs[bad]
		envs[bad].To = envs[bad].From // a signed field changed after signing
		if VerifyBatch(&b, envs, ok) {
			t.Errorf("tampered envelope %d: VerifyBatch = true", bad)
		}
		for i, e := range envs {
			single := e.Verify() == nil
			if ok[i] != single || ok[i] != (i != bad) {
				t.Errorf("tampered envelope %d: ok[%d] = %v, Verify says %v", bad, i, ok[i], single)
			}
		}
		*envs[bad] = saved
	}
	if !VerifyBatch(&b, envs, ok) {
		t.Fatalf("restored envelopes: VerifyBatch = false, ok = %v", ok)
	}
	// One envelope, good and bad; and none.
	if !VerifyBatch(&b, envs[:1], ok) || !ok[0] {
		t.Error("one good envelope: VerifyBatch = false")
	}
	bad := *envs[0]
	bad.Sig[0] ^= 1
	if VerifyBatch(&b, []*Envelope{&bad}, ok) || ok[0] {
		t.Error("one bad envelope: VerifyBatch = true")
	}
	if !VerifyBatch(&b, nil, ok) {
		t.Error("no envelopes: VerifyBatch = false")
	}
}
