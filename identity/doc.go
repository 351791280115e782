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
// # What it is not
//
// identity knows nothing about envelopes, peers' addresses or trust; it only
// creates, stores and checks keys. Errors never contain key material.
//
// # Concurrency
//
// PeerID and UUID are plain values. A *Keypair is immutable after creation
// and safe for concurrent use.
package identity
