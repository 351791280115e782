package comms

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// A send that its caller may make again as the same call (the node's
// sends under an idempotency key) is sealed under an id derived from the
// call rather than a random one: every retry of the call carries the
// same envelope id, so when a first attempt reached the peer but its ack
// was lost, the peer's duplicate filter (keyed by sender and id) drops
// the repeat and acknowledges it again ([Router.SealCall]).
//
// The id is a version 4 UUID whose bits are HMAC-SHA-256, keyed by a key
// derived from the node's private key, of the recipient's key and the
// call. It is the same in every process holding the node's key (a
// restarted daemon, a command run without one) and, to anyone without
// the key, looks like any random id: a peer or a relay cannot tell from
// it what the call was (an idempotency key, its arguments), nor predict
// the ids of the node's next calls. Ids of other senders cannot collide
// with it: a peer's duplicate filter keeps each sender's ids apart, and
// only this node signs envelopes from its key.
//
// A request's id is a call id too, tagged as the node's own
// (requestid.go): its first half comes from the call instead of the
// random source, its second half is the tag.

// callIDLabel separates the call-id key from every other use of the
// node's key.
const callIDLabel = "meerkatd call-id key v1"

// CallID returns the id the call named by call gives its envelope to
// peer: the same for the same call and peer, in any process holding this
// node's key, unrelated for another call or peer. A zero peer gives an id
// of the call itself (a broadcast's id, shared by its copies). call is
// what identifies the call to the caller (for the node: its idempotency
// key and the hash of its operation and arguments); it must not be empty.
func (r *Router) CallID(call []byte, peer identity.PeerID) identity.UUID {
	if len(call) == 0 {
		panic("bug: comms: CallID of an empty call")
	}
	var key [sha256.Size]byte
	k := hmac.New(sha256.New, r.kp.Seed())
	k.Write([]byte(callIDLabel))
	k.Sum(key[:0])
	m := hmac.New(sha256.New, key[:])
	m.Write(peer[:]) // fixed length: peer and call cannot run into each other
	m.Write(call)
	var sum [sha256.Size]byte
	var u identity.UUID
	copy(u[:], m.Sum(sum[:0]))
	u[6] = u[6]&0x0f | 0x40 // version 4, as identity.NewUUID
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// SealCall is [Router.Seal] for a send made as call, which its caller may
// make again: the envelope id is not random but derived from call and the
// recipient ([Router.CallID]), so a retry of the call sealed again carries
// the same id, and a peer that got the first attempt drops the repeat and
// acknowledges it. A request's id is tagged as usual, so its responses are
// accepted. call must not be empty.
func (r *Router) SealCall(peer string, kind wire.Kind, call []byte) (Sealed, error) {
	if len(call) == 0 {
		panic("bug: comms: SealCall with an empty call")
	}
	return r.seal(peer, kind, call)
}

// envelopeID returns the id of a new envelope of type typ to peer:
// derived from call if not nil; otherwise time-ordered (version 7), or,
// for a request, random and tagged as this node's own.
func (r *Router) envelopeID(peer identity.PeerID, typ string, call []byte) identity.UUID {
	switch {
	case call == nil && typ == wire.TypeRequest:
		return r.newRequestID(peer)
	case call == nil:
		return identity.NewTimeUUID() // the receiver's duplicate filter grows at its end
	case typ == wire.TypeRequest:
		return r.tagRequestID(r.CallID(call, peer), peer)
	}
	return r.CallID(call, peer)
}
