package identity

import "testing"

// The key cache stays within maxCachedKeys however many signers a batch
// sees, and evicting keys does not change results.
func TestBatchKeyCacheBounded(t *testing.T) {
	es := benchEntries(t, maxCachedKeys+50)
	var b Batch
	ok := make([]bool, len(es))
	for round := range 2 {
		b.Reset()
		for _, e := range es {
			b.Add(PeerID(e.pub), e.msg, e.sig)
		}
		if len(b.keys) > maxCachedKeys {
			t.Fatalf("round %d: %d cached keys, bound %d", round, len(b.keys), maxCachedKeys)
		}
		if !b.Verify(ok) {
			t.Fatalf("round %d: Verify = false", round)
		}
	}
}

func TestBatchKeyCacheHit(t *testing.T) {
	es := benchEntries(t, 2)
	var b Batch
	b.Add(PeerID(es[0].pub), es[0].msg, es[0].sig)
	k := b.keys[PeerID(es[0].pub)]
	b.Reset()
	b.Add(PeerID(es[0].pub), es[1].msg, es[1].sig)
	b.Add(PeerID(es[0].pub), es[0].msg, es[0].sig)
	if k == nil || b.keys[PeerID(es[0].pub)] != k || len(b.keys) != 1 {
		t.Fatal("a signer's expanded key was not reused across Add and Reset")
	}
	ok := make([]bool, 2)
	if b.Verify(ok) || ok[0] || !ok[1] {
		t.Fatalf("Verify with the cached key: ok = %v, want [false true]", ok)
	}
}
