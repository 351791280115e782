package identity

import (
	"testing"

	"github.com/oasisprotocol/curve25519-voi/curve"
)

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
			// An honest batch after bad ones too: what one equation
			// leaves in the signers' scratch must not spoil the next.
			for _, bad := range []int{-1, 0, 31, n - 1, -1} {
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

// A non-canonical encoding of a point of large order (y = p + 3, which
// decodes to the point with y = 3) is refused as a key: nobody can sign
// under it, but the rule says canonical encodings only.
func TestBatchRefusesNonCanonicalKey(t *testing.T) {
	enc := make([]byte, 32) // p + 3 = 2^255 - 16, little-endian
	enc[0] = 0xf0
	for i := 1; i < 31; i++ {
		enc[i] = 0xff
	}
	enc[31] = 0x7f
	var c curve.CompressedEdwardsY
	var A curve.EdwardsPoint
	if _, err := c.SetBytes(enc); err != nil {
		t.Fatal(err)
	}
	if _, err := A.SetCompressedY(&c); err != nil || A.IsSmallOrder() || c.IsCanonicalVartime() {
		t.Fatalf("y = p+3: decodes %v, small order %v, canonical %v: the case is built wrong", err == nil, A.IsSmallOrder(), c.IsCanonicalVartime())
	}
	var b Batch
	if b.key(PeerID(enc)) != nil {
		t.Fatal("a non-canonical key was accepted")
	}
	if len(b.keys) != 0 {
		t.Fatalf("a refused key was cached: %d keys", len(b.keys))
	}
}
