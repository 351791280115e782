// Package wire is the Meerkat comms wire format: signed envelopes encoded as
// CBOR, byte-compatible with the Rust reference implementation.
//
// # Envelopes
//
// An [Envelope] carries an id, the sender and recipient keys, a [Kind] and
// an Ed25519 signature. [Seal] builds and signs one; [Open] decodes one and
// verifies it. The signature covers the canonical CBOR of [id, from, to,
// kind], computed from the kind kept as a generic [Value] tree, so fields
// this package does not model still verify and survive re-encoding.
//
// # Two encodings of one tree
//
// The signed bytes use canonical CBOR (definite lengths, shortest forms,
// maps sorted shorter key first then bytewise). The frame bytes follow the
// Rust sender's field order (id, from, to, kind, sig; "type" first inside
// kind; JSON objects sorted bytewise), so frames we send are byte-identical
// to the reference's. A receiver accepts any order.
//
// # Decoding is hostile-input safe
//
// [Decode] bounds size ([MaxEnvelopeSize]), nesting ([MaxDepth]) and value
// count ([MaxItems]), refuses duplicate keys, trailing bytes and anything
// outside the data model, and reports each failure as a [*DecodeError]
// wrapping a reason sentinel. It never panics on any input.
//
// # What it is not
//
// wire does not frame, dial, trust or route: the length prefix lives in
// package transport, and deciding whether a sender may speak lives in
// package comms. Nor does it encrypt: the box of a sealed kind
// ([SealedKind]) is opaque bytes here, made and opened by package
// comms/seal. See docs/protocol.md for the format in prose.
//
// # Concurrency
//
// Values, Kinds and Envelopes are immutable values, safe for concurrent
// reads. All functions are safe for concurrent use.
package wire
