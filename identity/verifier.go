package identity

import (
	"crypto/ed25519"
	"sync"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Verifier checks signatures as [PeerID.Verify] does, under the same rule,
// keeping the expanded form of the keys it has checked, which saves the
// decompression of the key on every later check (about a sixth of a
// verification). It holds at most 256 keys (about 1.5 KiB each); past
// that it forgets one to make room. Callers should only ask it about keys
// they already trust, so that made-up keys cannot take the room of real
// ones. The zero value is ready to use, and a Verifier is safe for
// concurrent use.
type Verifier struct {
	mu   sync.RWMutex
	keys keyCache
}

// Verify reports whether sig is a valid signature of msg by id, exactly
// as [PeerID.Verify] does.
func (v *Verifier) Verify(id PeerID, msg, sig []byte) bool {
	if len(sig) != ed25519.SignatureSize {
		return false
	}
	k := v.expanded(id)
	if k == nil {
		return false // not a point: PeerID.Verify refuses it too
	}
	return voi.VerifyExpandedWithOptions(k, msg, sig, verifyOptions)
}

// expanded returns id's expanded key, expanding and keeping it on a miss;
// nil if id is not the encoding of a point.
func (v *Verifier) expanded(id PeerID) *voi.ExpandedPublicKey {
	v.mu.RLock()
	k, ok := v.keys[id]
	v.mu.RUnlock()
	if ok {
		return k
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.keys.add(id)
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
	keep((*map[PeerID]*voi.ExpandedPublicKey)(c), id, k)
	return k
}
