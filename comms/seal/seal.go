// Package seal encrypts an envelope's content to its recipient, so that a
// broker relaying it between nodes reads nothing.
//
// A box is HPKE (RFC 9180) in base mode, single shot, with the suite
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and ChaCha20-Poly1305. Its bytes
// are the 32-byte encapsulated key followed by the ciphertext, whose last 16
// bytes are the Poly1305 tag: a box is [Overhead] bytes longer than what it
// seals.
//
// # Keys
//
// Nodes have Ed25519 keys only; the X25519 keys HPKE needs are derived from
// them, as the age and libsodium projects do:
//
//   - public ([PublicKey]): the Edwards point of the Ed25519 public key is
//     decoded and mapped to the Montgomery curve, u = (1+y)/(1−y) mod
//     2^255−19. Encodings that are not a point, not canonical, or a point of
//     small order are refused.
//   - private ([PrivateKey]): the first 32 bytes of SHA-512 of the Ed25519
//     seed, clamped (the low three bits cleared, bit 255 cleared, bit 254
//     set). This is the scalar the Ed25519 public key is made with, so the
//     two conversions agree.
//
// # Info
//
// The HPKE info binds a box to the envelope that carries it ([Info]): the
// 17 ASCII bytes "meerkat-sealed-v1", one 0x00 byte, the sender's 32-byte
// Ed25519 public key, the recipient's 32-byte Ed25519 public key and the
// envelope's 16-byte id, 98 bytes in all. A box lifted into another
// envelope, or aimed at another recipient, does not open.
//
// # Concurrency
//
// All functions are safe for concurrent use, and so is an [Opener].
package seal

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/sha512"
	"errors"
	"fmt"

	"github.com/meerkatd/meerkatd/identity"
)

// Overhead is how much longer a box is than its plaintext: the 32-byte
// encapsulated key and the 16-byte authentication tag.
const Overhead = 32 + 16

// infoLabel starts every [Info].
const infoLabel = "meerkat-sealed-v1"

// infoLen is the length of an [Info]: label, 0x00, from, to, id.
const infoLen = len(infoLabel) + 1 + 32 + 32 + 16

// Errors returned by this package.
var (
	// ErrOpen means a box did not open: it is too short, was sealed to
	// another key or with another info, or was altered.
	ErrOpen = errors.New("seal: box does not open")
	// ErrBadKey means an Ed25519 public key has no usable X25519 form: it
	// is not a canonical encoding of a curve point, or the point has small
	// order.
	ErrBadKey = errors.New("seal: unusable Ed25519 public key")
)

// The suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305.
var (
	kem  = hpke.DHKEM(ecdh.X25519())
	kdf  = hpke.HKDFSHA256()
	aead = hpke.ChaCha20Poly1305()
)

// PublicKey returns the X25519 public key of the Ed25519 public key id: the
// Montgomery u-coordinate of its Edwards point. It returns [ErrBadKey] for
// an encoding that is not a point, a non-canonical encoding, and points of
// small order (the identity among them), whose shared secrets an attacker
// would know.
func PublicKey(id identity.PeerID) (*ecdh.PublicKey, error) {
	u, err := id.X25519()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	pub, err := ecdh.X25519().NewPublicKey(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	return pub, nil
}

// PrivateKey returns the X25519 private key of kp: the first half of
// SHA-512 of its seed, clamped. Its public key is [PublicKey] of kp.ID().
func PrivateKey(kp *identity.Keypair) (*ecdh.PrivateKey, error) {
	seed := kp.Seed()
	h := sha512.Sum512(seed)
	clear(seed)
	s := h[:32]
	s[0] &= 248
	s[31] &= 127
	s[31] |= 64
	priv, err := ecdh.X25519().NewPrivateKey(s)
	clear(h[:])
	if err != nil {
		return nil, fmt.Errorf("seal: private key: %w", err)
	}
	return priv, nil
}

// Info returns the HPKE info binding a box to the envelope with id id from
// from to to: "meerkat-sealed-v1", 0x00, from, to, id (98 bytes).
func Info(from, to identity.PeerID, id identity.UUID) []byte {
	b := make([]byte, 0, infoLen)
	b = append(b, infoLabel...)
	b = append(b, 0)
	b = append(b, from[:]...)
	b = append(b, to[:]...)
	return append(b, id[:]...)
}

// Seal encrypts plaintext to the node whose Ed25519 key is to, bound to
// info (see [Info]). It returns the box: encapsulated key, then ciphertext.
// Each call uses a fresh ephemeral key, so sealing the same plaintext twice
// gives different boxes.
func Seal(to identity.PeerID, info, plaintext []byte) ([]byte, error) {
	r, err := NewRecipient(to)
	if err != nil {
		return nil, err
	}
	return r.Seal(info, plaintext)
}

// Recipient is a node's key made ready to seal to: the conversion and
// checks of [PublicKey] done once. It is safe for concurrent use.
type Recipient struct {
	pk hpke.PublicKey
}

// NewRecipient converts to's key for sealing; it fails as [PublicKey]
// does.
func NewRecipient(to identity.PeerID) (*Recipient, error) {
	pub, err := PublicKey(to)
	if err != nil {
		return nil, err
	}
	pk, err := kem.NewPublicKey(pub.Bytes())
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return &Recipient{pk: pk}, nil
}

// Seal is [Seal] to this recipient.
func (r *Recipient) Seal(info, plaintext []byte) ([]byte, error) {
	box, err := hpke.Seal(r.pk, kdf, aead, info, plaintext)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return box, nil
}

// Opener opens boxes sealed to one node. Make one per node with
// [NewOpener]; it is safe for concurrent use.
type Opener struct {
	key hpke.PrivateKey
}

// NewOpener returns an Opener for boxes sealed to kp.ID().
func NewOpener(kp *identity.Keypair) (*Opener, error) {
	priv, err := PrivateKey(kp)
	if err != nil {
		return nil, err
	}
	key, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return &Opener{key: key}, nil
}

// Open decrypts box, which must have been sealed to this node with the same
// info. Anything that does not open — too short, sealed to another key or
// with another info, altered in any byte — gives an error wrapping
// [ErrOpen]. Open never panics, whatever box and info hold.
func (o *Opener) Open(info, box []byte) ([]byte, error) {
	if o == nil || o.key == nil {
		return nil, fmt.Errorf("%w: no key (use NewOpener)", ErrOpen)
	}
	if len(box) < Overhead {
		return nil, fmt.Errorf("%w: %d bytes, shorter than %d", ErrOpen, len(box), Overhead)
	}
	pt, err := hpke.Open(o.key, kdf, aead, info, box)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOpen, err)
	}
	return pt, nil
}
