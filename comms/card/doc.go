// Package card is the agent card: what a node says about itself (a name,
// a description, the request intents it accepts with a JSON Schema for
// each one's params, and how to reach its owner), and the signed form in
// which a node hands it to its peers.
//
// # Signed form
//
// A signed card is one JSON object: the card's members plus "pubkey" (the
// signer's key, "ed25519:…") and "signature" (standard padded base64 of a
// detached Ed25519 signature). The signature covers
//
//	"meerkat-card-v1" 0x00 || canonical(object without "signature")
//
// where canonical is the JSON Canonicalization Scheme of RFC 8785
// (members sorted by their names' UTF-16 code units, no whitespace,
// numbers as ECMAScript writes doubles, minimal string escapes).
// Members this version does not know are covered too and survive.
// docs/protocol.md ("Agent cards") gives the same rules for other
// implementations.
//
// A signed card proves only who wrote it: [ParseSigned] checks the
// signature against the key the card names, and [Signed.Check] that this
// key is the one the caller trusts for the peer that handed it over.
//
// # Limits
//
// Everything here reads text another node wrote. A signed card is at
// most [MaxSize] bytes in canonical form, the form [Sign] measures and
// the signature covers, so a card Sign accepts is within the limit
// however it travels (in a wire value and back to JSON, in a file) and
// whatever escapes its text comes with (read up to [MaxText] bytes). It
// nests at most [MaxDepth] levels and lists at most [MaxIntents] intents;
// names, descriptions and contact text have length limits; invalid UTF-8
// and repeated member names are refused. Errors never quote the card's
// text.
//
// The package has no state: its functions are safe for concurrent use.
package card
