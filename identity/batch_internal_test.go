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

// The batch equation itself holds for honest batches, by one signer and by
// many, and fails when any one entry is bad; the terms of one signer's
// entries go into it as one. (Verify falls back to checking each entry
// alone, so without this a batch equation that never held would pass every
// other test, only slower.)
func TestBatchEquation(t *testing.T) {
	const n = 64
	for _, c := range []struct {
		name    string
		es      []benchEntry
		signers int
	}{
		{"one signer", benchEntriesOneKey(t, n), 1},
		{"distinct signers", benchEntries(t, n), n},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b Batch
			for _, bad := range []int{-1, 0, 31, n - 1} {
				b.Reset()
				for i, e := range c.es {
					msg := e.msg
					if i == bad {
						msg = append([]byte{'!'}, msg...)
					}
					b.Add(PeerID(e.pub), msg, e.sig)
				}
				if got := b.equation(n); got != (bad < 0) {
					t.Errorf("bad entry %d: equation = %v", bad, got)
				}
				// B and one table per signer.
				if len(b.tables) != 1+c.signers {
					t.Errorf("bad entry %d: %d static terms, want %d", bad, len(b.tables), 1+c.signers)
				}
			}
		})
	}
}
