package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"hash"
	"slices"
	"sync"

	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
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

// maxCachedKeys bounds the expanded public keys a [Batch] or a [Verifier]
// keeps (about 1.5 KiB each): more than a node's trusted peers, few enough
// that keys an attacker makes up cost at most this much memory.
const maxCachedKeys = 256

// Batch verifies many signatures at once, faster per signature than
// [PeerID.Verify] when all are valid, under exactly the same rule: an entry
// is accepted by [Batch.Verify] if and only if PeerID.Verify accepts it.
//
// The batch equation is the sum of every entry's cofactored equation, each
// weighted by a fresh random 128-bit scalar z_i:
//
//	[8]( [-Σ z_i·S_i]B + Σ [z_i]R_i + Σ_A [-Σ_{i by A} z_i·k_i](-A) ) = 0
//
// An invalid entry slips through only if those scalars happen to cancel
// it, with negligible probability. The terms of one signer's key are
// summed into one before the multiplication, which is the same point
// computed with one scalar multiplication by A instead of one per entry:
// the batches a node checks come from one connection, so mostly from one
// key, and that saves about a quarter of the work.
//
// An entry that cannot be valid on its face (a signature that is not 64
// bytes, S not below the group order, R or A not a canonical point
// encoding, A of small order) is refused without entering the equation,
// so it costs the others nothing. When the equation fails, each entry is
// checked on its own, so only the bad ones are refused.
//
// A Batch keeps its memory across [Batch.Reset], and a small bounded cache
// of its signers' expanded public keys, so a long-lived Batch per receive
// loop does the per-key work once per peer. The zero value is an empty
// Batch ready to use. A Batch is not safe for concurrent use.
type Batch struct {
	entries []batchEntry
	keys    map[PeerID]*batchKey
	h       hash.Hash // SHA-512, for every entry's k = H(R || A || msg)
	id      PeerID
	sum     [sha512.Size]byte

	// Scratch for Verify, kept across batches.
	signers []*batchKey
	scal    []scalar.Scalar
	sp      []*scalar.Scalar
	points  []*curve.EdwardsPoint
	tables  []*curve.ExpandedEdwardsPoint
	random  []byte
}

// batchEntry is one signature, decoded. key is nil for an entry that
// cannot be valid; the other fields are then unset.
type batchEntry struct {
	key  *batchKey
	R    curve.EdwardsPoint
	S, k scalar.Scalar
}

// valid checks e alone (its key not nil), cofactored: [k](-A) + [S]B - R
// is of small order.
func (e *batchEntry) valid() bool {
	var d curve.EdwardsPoint
	return d.ExpandedTripleScalarMulBasepointVartime(&e.k, &e.key.negA, &e.S, &e.R).IsSmallOrder()
}

// batchKey is a signer's key, checked and expanded once: -A with its
// multiplication table. sum and summed are Verify's scratch.
type batchKey struct {
	negA   curve.ExpandedEdwardsPoint
	sum    scalar.Scalar // -Σ z_i·k_i over this key's entries
	summed bool          // in Batch.signers for the equation being built
}

// expandedBasepoint is B with its multiplication table, a static term of
// every batch equation.
var expandedBasepoint = sync.OnceValue(func() *curve.ExpandedEdwardsPoint {
	return curve.NewExpandedEdwardsPoint(curve.ED25519_BASEPOINT_POINT)
})

// Add adds the signature sig of msg by id to the batch. It does not keep
// msg or sig: the caller may reuse them as soon as Add returns.
func (b *Batch) Add(id PeerID, msg, sig []byte) {
	b.entries = append(b.entries, batchEntry{})
	e := &b.entries[len(b.entries)-1]
	if len(sig) != ed25519.SignatureSize || !scalar.ScMinimalVartime(sig[32:]) {
		return
	}
	var rc curve.CompressedEdwardsY
	if _, err := rc.SetBytes(sig[:32]); err != nil || !rc.IsCanonicalVartime() {
		return
	}
	if _, err := e.R.SetCompressedY(&rc); err != nil {
		return
	}
	if _, err := e.S.SetBytesModOrder(sig[32:]); err != nil {
		return
	}
	key := b.key(id)
	if key == nil {
		return
	}
	if b.h == nil {
		b.h = sha512.New()
	}
	b.id = id // hashed from the Batch, which is on the heap already
	b.h.Reset()
	b.h.Write(sig[:32])
	b.h.Write(b.id[:])
	b.h.Write(msg)
	if _, err := e.k.SetBytesModOrderWide(b.h.Sum(b.sum[:0])); err != nil {
		return
	}
	e.key = key
}

// key returns id's checked and expanded key, from the cache or made and
// cached on a miss (forgetting an arbitrary key if the cache is full);
// nil if id is not a key this package accepts: not the canonical encoding
// of a point, or a point of small order.
func (b *Batch) key(id PeerID) *batchKey {
	if k, ok := b.keys[id]; ok {
		return k
	}
	var A curve.EdwardsPoint
	if !id.point(&A) {
		return nil
	}
	k := new(batchKey)
	k.negA.SetEdwardsPoint(A.Neg(&A))
	keep(&b.keys, id, k)
	return k
}

// Check returns nil if id is a key whose signatures can be accepted: the
// canonical encoding of a point that is not of small order, the rule
// every verification here applies to a key. Otherwise it returns
// [ErrZeroKey] or [ErrWeakKey]. Anyone can complete a TLS handshake (whose
// signature check is not this package's) as a small-order key, so such
// a key must never be trusted.
func (id PeerID) Check() error {
	if id.IsZero() {
		return ErrZeroKey
	}
	var A curve.EdwardsPoint
	if !id.point(&A) {
		return ErrWeakKey
	}
	return nil
}

// point sets *A to the point id encodes and reports whether id is a key
// this package accepts: a canonical encoding, not of small order.
func (id PeerID) point(A *curve.EdwardsPoint) bool {
	var ac curve.CompressedEdwardsY
	if _, err := ac.SetBytes(id[:]); err != nil || !ac.IsCanonicalVartime() {
		return false
	}
	_, err := A.SetCompressedY(&ac)
	return err == nil && !A.IsSmallOrder()
}

// keep puts v in *m under id, making the map if need be and first
// forgetting an arbitrary entry if it holds maxCachedKeys already.
func keep[V any](m *map[PeerID]V, id PeerID, v V) {
	if *m == nil {
		*m = make(map[PeerID]V)
	}
	if len(*m) >= maxCachedKeys {
		for old := range *m {
			delete(*m, old)
			break
		}
	}
	(*m)[id] = v
}

// Len returns the number of entries added since the last [Batch.Reset].
func (b *Batch) Len() int { return len(b.entries) }

// Reset empties the batch for reuse; the key cache is kept.
func (b *Batch) Reset() {
	clear(b.entries) // drop the entries' keys, which a full cache may have let go
	b.entries = b.entries[:0]
}

// Verify reports whether every entry in the batch is valid; an empty batch
// is. If ok is not nil it must have at least [Batch.Len] elements, and
// ok[i] is set to whether entry i (in the order added) is valid, by the
// same rule as [PeerID.Verify]: when the batch as a whole fails, each
// entry is checked on its own, so only the bad ones are refused. Verify
// does not reset the batch.
func (b *Batch) Verify(ok []bool) bool {
	if ok != nil {
		ok = ok[:len(b.entries)]
	}
	n, all := 0, true // entries that can be valid; whether all can
	for i := range b.entries {
		can := b.entries[i].key != nil
		if ok != nil {
			ok[i] = can
		}
		if can {
			n++
		} else {
			all = false
		}
	}
	if n == 0 {
		return all
	}
	if n > 1 && b.equation(n) {
		return all
	}
	// One entry, or the equation failed: each on its own.
	for i := range b.entries {
		e := &b.entries[i]
		if e.key == nil {
			continue
		}
		valid := e.valid()
		if ok != nil {
			ok[i] = valid
		}
		all = all && valid
	}
	return all
}

// VerifyPrefix reports how many entries, from the first, are valid by
// [PeerID.Verify]'s rule, checking no more than it must: all of them if
// the batch equation holds over them; otherwise each on its own, in
// order, up to the first that is not valid, whose index it returns.
// Nothing after an entry that cannot be valid on its face is checked.
// For a reader that refuses a stream at its first bad signature, a batch
// that fails costs the equation and the checks up to that signature, not
// a check of every entry. VerifyPrefix does not reset the batch.
func (b *Batch) VerifyPrefix() int {
	m := len(b.entries)
	for i := range b.entries {
		if b.entries[i].key == nil {
			m = i
			break
		}
	}
	if m > 1 {
		all := b.entries
		b.entries = all[:m]
		holds := b.equation(m)
		b.entries = all
		if holds {
			return m
		}
	}
	for i := range m {
		if !b.entries[i].valid() {
			return i
		}
	}
	return m
}

// equation checks the batch equation over the n entries that can be valid.
func (b *Batch) equation(n int) bool {
	b.random = slices.Grow(b.random[:0], 16*n)[:16*n]
	if _, err := rand.Read(b.random); err != nil {
		panic("identity: reading random scalars: " + err.Error()) // crypto/rand does not fail
	}
	// scal holds B's scalar, then the z_i; sp points to the z_i, then to
	// the static terms' scalars: B's and one per signer (at most n).
	b.scal = slices.Grow(b.scal[:0], 1+n)[:1+n]
	b.sp = slices.Grow(b.sp[:0], 1+2*n)[:1+2*n]
	b.points = slices.Grow(b.points[:0], n)[:n]
	b.signers = b.signers[:0]
	b.tables = append(b.tables[:0], expandedBasepoint())
	bs := &b.scal[0]
	bs.Zero()
	j := 0
	for i := range b.entries {
		e := &b.entries[i]
		if e.key == nil {
			continue
		}
		z := &b.scal[1+j]
		var wide [32]byte
		copy(wide[:16], b.random[16*j:])
		if _, err := z.SetCanonicalBytes(wide[:]); err != nil {
			panic("identity: a 128-bit scalar is not canonical") // it is below the order
		}
		b.sp[j], b.points[j] = z, &e.R
		var t scalar.Scalar
		bs.Sub(bs, t.Mul(z, &e.S))
		k := e.key
		if !k.summed {
			k.summed = true
			b.signers = append(b.signers, k)
			k.sum.Zero()
			b.tables = append(b.tables, &k.negA)
		}
		k.sum.Sub(&k.sum, t.Mul(z, &e.k))
		j++
	}
	static := append(b.sp[n:n], bs)
	for _, k := range b.signers {
		static = append(static, &k.sum)
		k.summed = false
	}
	var p curve.EdwardsPoint
	p.ExpandedMultiscalarMulVartime(static, b.tables, b.sp[:n], b.points[:n])
	// Hold on to no key the cache may have let go of.
	clear(b.signers)
	clear(b.tables)
	clear(b.sp)
	clear(b.points)
	return p.IsSmallOrder()
}
