// Package pair makes two nodes trust each other in one step.
//
// The offering node (the responder) opens an [Offer]: a one-time code of
// 128 random bits, shown with the node's address as one [Line] for a
// person to pass on. The other node (the initiator) calls [Accept] with
// that line. It connects to the responder's normal listener — the first
// byte of [Magic] tells a pairing exchange from an envelope frame — and the
// two run a four-message exchange:
//
//	initiator → responder  hello: offer id, key, name, address, nonce
//	responder → initiator  challenge: key, name, nonce, MAC, signature
//	initiator → responder  proof: MAC, signature
//	responder → initiator  done (the responder has trusted the initiator)
//
// The offer id is a hash of the code, so the code never travels. Both MACs
// are keyed with a key derived from the code and cover a transcript of
// everything both sides said (offer id, both keys, names, the initiator's
// address, both nonces); each side also signs the transcript with its
// Ed25519 key. So each side learns that the other knows the code and holds
// the key it presents, and a relay that changes a key, a name or the
// address breaks both checks. An eavesdropper learns the two public keys,
// names and the initiator's address, and cannot replay the exchange (fresh
// nonces) or guess the code from it (128 bits behind HMAC-SHA-256).
//
// An offer works once and expires (default 10 minutes). Attempts are
// counted per source ([SourceKey]: an IPv4 address, an IPv6 /64, a local
// user): five at once and one more every 12 seconds; more fail at once.
// The table of sources is bounded and cannot be exhausted — a spray of
// new sources locks no one out (see limiter).
package pair
