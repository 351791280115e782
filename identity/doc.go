// Package identity holds a node's Ed25519 identity: the [Keypair] that signs,
// the [PeerID] that names a node on the wire and in trust lists, and the
// [UUID] values the Meerkat protocol uses for envelope ids and for the Rust
// reference's peer UUIDs.
//
// # Text forms
//
// A PeerID is written "ed25519:" followed by the standard, padded base64 of
// the 32 raw public-key bytes (44 characters). [ParsePeerID] accepts exactly
// that form and nothing else: no other prefix, no unpadded or URL-safe
// base64, no non-canonical trailing bits, no all-zero key. Each failure has
// its own sentinel error.
//
// # Files
//
// A home directory holds identity.key (the raw 32-byte seed, mode 0600) and
// identity.pub (the raw 32-byte public key). [Keypair.Save] writes both
// atomically; [LoadKeypair] refuses a seed file of the wrong size, a seed
// file other users can read, and a public file that does not match the seed.
//
// # Signatures
//
// [Keypair.Sign] makes pure Ed25519 signatures (RFC 8032): deterministic,
// the same bytes crypto/ed25519 makes. Signatures asked for by several
// goroutines at once are made as one batch, sharing the field inversion
// that encodes each R, with the same bytes (sign.go). [PeerID.Verify] checks one
// signature; a [Batch] checks many at once, faster per signature when all
// are valid. Both apply one rule, so an entry passes in a batch exactly
// when it passes alone. A signature R || S by key A over msg is accepted
// when:
//
//   - it is 64 bytes and S is less than the group order L;
//   - A and R are canonical point encodings (y below 2^255-19, and the
//     sign bit clear when x is 0);
//   - A is not of small order (order 1, 2, 4 or 8): no private key has
//     such a key, and under one a signature holds for every message.
//     R may be of any order;
//   - [8][S]B = [8]R + [8][k]A with k = SHA-512(R || A || msg) mod L: the
//     cofactored equation, the only one a batch can check soundly.
//
// Honestly made signatures pass under this and every other common rule;
// only crafted ones tell the rules apart. crypto/ed25519 and
// ed25519-dalek's verify use the cofactorless equation instead, so,
// unlike this package, they refuse a crafted R with a small-order
// component that only the factor 8 removes (and such an A, unless the
// hash happens to cancel it); and they accept the small-order and
// non-canonical keys this package refuses. docs/protocol.md, section
// "Which signatures are accepted", says the same to users.
//
// # What it is not
//
// identity knows nothing about envelopes, peers' addresses or trust; it only
// creates, stores and checks keys. Errors never contain key material.
//
// # Concurrency
//
// PeerID and UUID are plain values. A *Keypair is immutable after creation
// and safe for concurrent use. A [Batch] belongs to one goroutine at a time.
package identity
