package identity

import (
	"crypto/ed25519"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// verifyOptions is the one acceptance rule of this package, for
// [PeerID.Verify] and [Batch] alike (see the package doc, "Signatures"):
// the cofactored equation, S below the group order, A and R canonical
// encodings, A not of small order, R of any order. Passing the same value
// to the single and the batch verifier is what makes them agree.
var verifyOptions = &voi.Options{Verify: &voi.VerifyOptions{
	AllowSmallOrderA:   false,
	AllowSmallOrderR:   true,
	AllowNonCanonicalA: false,
	AllowNonCanonicalR: false,
	CofactorlessVerify: false,
}}

// Verify reports whether sig is a valid Ed25519 signature of msg by id,
// under the rule in the package doc, the same one [Batch] applies.
func (id PeerID) Verify(msg, sig []byte) bool {
	if len(sig) != ed25519.SignatureSize {
		return false
	}
	return voi.VerifyWithOptions(voi.PublicKey(id[:]), msg, sig, verifyOptions)
}

// maxCachedKeys bounds the expanded public keys a [Batch] keeps (about
// 1.5 KiB each): more than a node's trusted peers, few enough that keys an
// attacker makes up cost at most this much memory.
const maxCachedKeys = 256

// Batch verifies many signatures at once, faster per signature than
// [PeerID.Verify] when all are valid, under exactly the same rule: an entry
// is accepted by [Batch.Verify] if and only if PeerID.Verify accepts it.
// (The batch equation weights each entry by a fresh random 128-bit
// scalar; an invalid entry slips through only if those scalars happen to
// cancel it, with negligible probability.)
//
// A Batch keeps its memory across [Batch.Reset], and a small bounded cache
// of its signers' expanded public keys, so a long-lived Batch per receive
// loop does the per-key work once per peer. The zero value is an empty
// Batch ready to use. A Batch is not safe for concurrent use.
type Batch struct {
	v *voi.BatchVerifier
	// slot maps each entry to its index in v, or -1 for a key that is not
	// a point at all (it never reaches v, which would then refuse to
	// check the rest of the batch as a whole).
	slot []int
	n    int // entries in v
	keys keyCache
}

// Add adds the signature sig of msg by id to the batch. It does not keep
// msg or sig: the caller may reuse them as soon as Add returns. An entry
// whose sig is not 64 bytes or whose id is not a point is invalid.
func (b *Batch) Add(id PeerID, msg, sig []byte) {
	if b.v == nil {
		b.v = voi.NewBatchVerifier()
	}
	k := b.expanded(id)
	if k == nil || len(sig) != ed25519.SignatureSize {
		b.slot = append(b.slot, -1)
		return
	}
	b.slot = append(b.slot, b.n)
	b.n++
	b.v.AddExpandedWithOptions(k, msg, sig, verifyOptions)
}

// expanded returns id's expanded key from the cache, expanding and caching
// it on a miss, or nil if id is not the encoding of a point.
func (b *Batch) expanded(id PeerID) *voi.ExpandedPublicKey {
	if k, ok := b.keys[id]; ok {
		return k
	}
	return b.keys.add(id)
}

// keyCache holds expanded keys, at most maxCachedKeys of them. It is not
// safe for concurrent use.
type keyCache map[PeerID]*voi.ExpandedPublicKey

// add expands id and keeps it, forgetting an arbitrary key if the cache
// is full; nil if id is not the encoding of a point (nothing is kept).
func (c *keyCache) add(id PeerID) *voi.ExpandedPublicKey {
	k, err := voi.NewExpandedPublicKey(voi.PublicKey(id[:]))
	if err != nil {
		return nil
	}
	if *c == nil {
		*c = make(keyCache)
	}
	if len(*c) >= maxCachedKeys {
		for old := range *c {
			delete(*c, old)
			break
		}
	}
	(*c)[id] = k
	return k
}

// Len returns the number of entries added since the last [Batch.Reset].
func (b *Batch) Len() int { return len(b.slot) }

// Reset empties the batch for reuse; the key cache is kept.
func (b *Batch) Reset() {
	b.slot = b.slot[:0]
	b.n = 0
	if b.v != nil {
		b.v.Reset()
	}
}

// Verify reports whether every entry in the batch is valid; an empty batch
// is. If ok is not nil it must have at least [Batch.Len] elements, and
// ok[i] is set to whether entry i (in the order added) is valid, by the
// same rule as [PeerID.Verify]: when the batch as a whole fails, each
// entry is checked on its own, so only the bad ones are refused. Verify
// does not reset the batch.
func (b *Batch) Verify(ok []bool) bool {
	if len(b.slot) == 0 {
		return true
	}
	if ok != nil {
		ok = ok[:len(b.slot)]
	}
	if b.n == 0 { // no entry's key is a point
		clear(ok)
		return false
	}
	all, valid := b.v.Verify(nil)
	if ok != nil {
		for i, s := range b.slot {
			ok[i] = s >= 0 && valid[s]
		}
	}
	return all && b.n == len(b.slot)
}
