package identity

import (
	"bytes"
	"errors"

	"filippo.io/edwards25519"
)

// Why [PeerID.X25519] refuses a key.
var (
	errNotPoint     = errors.New("not a curve point")
	errNonCanonical = errors.New("non-canonical encoding")
	errSmallOrder   = errors.New("point of small order")
)

// X25519 returns the X25519 public key (RFC 7748) of the Ed25519 public key
// id: the Montgomery u-coordinate of its Edwards point, u = (1+y)/(1−y)
// mod 2^255−19. It refuses an encoding that is not a point, a
// non-canonical encoding, and a point of small order (the identity among
// them), whose shared secrets an attacker would know; the error says
// which.
func (id PeerID) X25519() ([]byte, error) {
	p, err := new(edwards25519.Point).SetBytes(id[:])
	if err != nil {
		return nil, errNotPoint
	}
	// SetBytes accepts y ≥ 2^255−19 and a negative zero x; an honest key
	// never is either.
	if !bytes.Equal(p.Bytes(), id[:]) {
		return nil, errNonCanonical
	}
	// Small order: eight times the point is the identity.
	if new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) == 1 {
		return nil, errSmallOrder
	}
	return p.BytesMontgomery(), nil
}
