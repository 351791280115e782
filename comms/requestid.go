package comms

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// Request ids carry a tag that says this node made them, so a response is
// accepted only if it answers a request this node sent that peer, and
// that without remembering the requests: the in-memory request table
// (requests.go) is lost on a restart and bounded, but a response may come
// days later, to a daemon restarted since, to a request a command run
// without a daemon sent (ModeSend, ModeReplies), or after the outbox
// retried it. Any process holding the node's key recognises the ids the
// node made.
//
// A request id is a version 4 UUID whose first eight bytes are random
// (60 bits, the version nibble fixed) and whose last eight are the tag
// (62 bits, the variant bits fixed): HMAC-SHA-256, keyed by a key derived
// from the node's private key, of the first eight bytes and the peer's
// key. To the peer it is just a random UUID (the Rust reference needs
// nothing else); a peer cannot make a tag for an id this node did not
// send it (one chance in 2^62 per guess, and each wrong guess is refused
// and counted), nor reuse an id this node sent another peer.
//
// Requests sent by a build before this one carry untagged ids: responses
// to those are refused after the upgrade.

// requestIDLabel separates the request-id key from every other use of the
// node's key.
const requestIDLabel = "meerkatd request-id tag key v1"

// requestIDKey derives the key of the request-id tags from kp's private
// key.
func requestIDKey(kp *identity.Keypair) (key [sha256.Size]byte) {
	m := hmac.New(sha256.New, kp.Seed())
	m.Write([]byte(requestIDLabel))
	m.Sum(key[:0])
	return key
}

// requestTag is the tag of a request id whose random half is u[:8], sent
// to peer, with the UUID variant bits set, as it appears in u[8:].
func (r *Router) requestTag(u identity.UUID, peer identity.PeerID) (tag [8]byte) {
	m := hmac.New(sha256.New, r.reqKey[:])
	m.Write(u[:8])
	m.Write(peer[:])
	var sum [sha256.Size]byte
	copy(tag[:], m.Sum(sum[:0]))
	tag[0] = tag[0]&0x3f | 0x80 // RFC 9562 variant
	return tag
}

// newRequestID returns a fresh id for a request to peer, tagged as made
// by this node.
func (r *Router) newRequestID(peer identity.PeerID) identity.UUID {
	return r.tagRequestID(identity.NewUUID(), peer) // random, version 4
}

// tagRequestID returns the id of a request to peer whose first half is
// u's (a version 4 UUID's, random or derived from a call), tagged as made
// by this node.
func (r *Router) tagRequestID(u identity.UUID, peer identity.PeerID) identity.UUID {
	tag := r.requestTag(u, peer)
	copy(u[8:], tag[:])
	return u
}

// ownRequestID reports whether id is a request id this node made for a
// request to peer.
func (r *Router) ownRequestID(id identity.UUID, peer identity.PeerID) bool {
	tag := r.requestTag(id, peer)
	return subtle.ConstantTimeCompare(tag[:], id[8:]) == 1
}

// solicited reports whether response e answers a request this node sent
// its sender.
func (r *Router) solicited(e wire.Envelope) bool {
	id, ok := e.Kind.InReplyTo()
	return ok && r.ownRequestID(id, e.From)
}
