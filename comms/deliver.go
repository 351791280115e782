package comms

import (
	"context"
	"fmt"
	"sync"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Sealed is an envelope signed for one peer, ready to be delivered now or
// again later with the same id, so that the receiver's duplicate check
// makes every repeat harmless ([Router.Deliver]).
type Sealed struct {
	Peer    trust.Peer    // the recipient as the trust list named it when sealed
	ID      identity.UUID // envelope id
	Kind    string        // kind type: message, request, response, …
	CorrID  identity.UUID // in_reply_to for responses; zero otherwise
	Payload []byte        // the envelope's wire bytes, without the frame prefix
}

// Seal resolves peer (a name, key or peer UUID), signs kind for it under a
// new id and returns the envelope's wire bytes. Sealing a request opens its
// correlation, as [Router.SendRequest] does, so [Router.AwaitResponse]
// works for it once it is delivered.
func (r *Router) Seal(peer string, kind wire.Kind) (Sealed, error) {
	return r.seal(peer, kind, nil)
}

// seal is Seal, under an id derived from call if it is not nil
// ([Router.SealCall]).
func (r *Router) seal(peer string, kind wire.Kind, call []byte) (Sealed, error) {
	p, err := r.ResolvePeer(peer)
	if err != nil {
		return Sealed{}, err
	}
	if p.Addr.Scheme == transport.SchemeTCP && r.opts.RefusePlaintext {
		return Sealed{}, fmt.Errorf("%w (comms.tcp_plaintext = \"refuse\"): %s is at the plaintext address %s; if it runs meerkatd, give it the same address as tls://", ErrPlaintextRefused, p.Name, p.Addr)
	}
	if kind.Type() == wire.TypeResponse && !kind.Status().Valid() {
		return Sealed{}, fmt.Errorf("comms: response status %q: %w", kind.Status(), wire.ErrBadValue)
	}
	id := r.envelopeID(p.ID, kind.Type(), call) // a request's: tagged, its responses must name an id this node made
	e, err := wire.Seal(r.kp, id, p.ID, kind)
	if err != nil {
		return Sealed{}, err
	}
	payload, err := e.MarshalBinary()
	if err != nil {
		return Sealed{}, err
	}
	if len(payload) > r.opts.MaxMessageBytes {
		return Sealed{}, fmt.Errorf("comms: envelope of %d bytes: %w (limit %d)", len(payload), wire.ErrTooLarge, r.opts.MaxMessageBytes)
	}
	s := Sealed{Peer: p, ID: id, Kind: kind.Type(), Payload: payload}
	if u, ok := kind.InReplyTo(); ok {
		s.CorrID = u
	}
	if s.Kind == wire.TypeRequest {
		r.reqs.open(id, p.ID)
	}
	return s, nil
}

// Delivery is one attempt to deliver a sealed envelope.
type Delivery struct {
	To      identity.PeerID
	ID      identity.UUID
	Payload []byte // sealed wire bytes ([Sealed.Payload])
	WantAck bool   // false for kinds that are not acknowledged (responses)
	// Queued, if not nil, is called once, when the frame is in a
	// connection's write queue; it is not called if the attempt fails
	// before that. Towards a peer that takes one envelope per connection
	// it is called only once the ack arrived, since separate connections
	// could reorder envelopes. A caller that waits for it (or for Deliver to return)
	// before starting the next delivery to the same peer keeps its
	// envelopes in order on the wire while their acks are outstanding.
	Queued func()
	// SecondTry lets the attempt go on over a fresh connection when the
	// first is lost before the ack, as [Router.SendMessage] does. Callers
	// that retry in their own order (an outbox) leave it false.
	SecondTry bool
	// Relayed, if not nil, is called once the attempt goes through the
	// relay (NATS) rather than a direct link: for a peer reached there
	// only, or one whose direct address could not be connected to.
	Relayed func()
}

// Deliver makes one attempt to deliver a sealed envelope to d.To, which
// must still be trusted ([ErrUnknownPeer] otherwise), and waits for its ack
// up to the ack timeout (or only for the write, if !d.WantAck). Unless
// d.SecondTry, it does not try a second connection when the first is lost
// before the ack: the caller retries, in its own order. Failures
// are a [*PeerOfflineError], [ErrUnknownPeer], [ErrClosed] or ctx's error.
func (r *Router) Deliver(ctx context.Context, d Delivery) error {
	p, ok := r.trust.Load().Lookup(d.To)
	if !ok {
		return fmt.Errorf("%w: %s is not trusted", ErrUnknownPeer, d.To.Short())
	}
	frame, start := transport.StartFrame(make([]byte, 0, len(d.Payload)+4))
	frame = append(frame, d.Payload...)
	if err := transport.FinishFrame(frame, start); err != nil {
		return err
	}
	return r.sendFrame(ctx, p, d.ID, frame, d.WantAck, sendOpts{queued: d.Queued, single: !d.SecondTry, relayed: d.Relayed})
}

// onceFunc returns a function that calls f (if not nil) on its first call
// only.
func onceFunc(f func()) func() {
	if f == nil {
		return func() {}
	}
	return sync.OnceFunc(f)
}
