package comms

import (
	"context"
	"errors"
	"fmt"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// ResolvePeer finds a trusted peer by name (in any letter case), key
// string ("ed25519:…") or the Rust reference's peer UUID. A reference
// written as a key that does not parse is ErrBadPeerKey, not
// ErrUnknownPeer.
func (r *Router) ResolvePeer(ref string) (trust.Peer, error) {
	if p, ok := r.trust.Load().Resolve(ref); ok {
		return p, nil
	}
	if _, err := identity.ParsePeerID(ref); err != nil && !errors.Is(err, identity.ErrBadPrefix) {
		return trust.Peer{}, fmt.Errorf("%w: %q: %v", ErrBadPeerKey, ref, err)
	}
	return trust.Peer{}, fmt.Errorf("%w: %q", ErrUnknownPeer, ref)
}

// SendMessage sends a message to peer (a name, key or peer UUID) and waits
// for its ack. It returns the envelope id.
func (r *Router) SendMessage(ctx context.Context, peer, body string) (identity.UUID, error) {
	return r.send(ctx, peer, wire.Message(body), true)
}

// SendRequest sends a request and waits for its ack. It returns the request
// id; [Router.AwaitResponse] waits for the answer.
func (r *Router) SendRequest(ctx context.Context, peer, intent string, params wire.Value) (identity.UUID, error) {
	p, err := r.ResolvePeer(peer)
	if err != nil {
		return identity.UUID{}, err
	}
	id := r.newRequestID(p.ID)
	r.reqs.open(id, p.ID)
	if err := r.sendTo(ctx, p, id, wire.Request(intent, params), true); err != nil {
		r.reqs.forget(id)
		return identity.UUID{}, err
	}
	return id, nil
}

// SendResponse answers request inReplyTo from peer. Responses are not
// acknowledged: it returns once the envelope is written.
func (r *Router) SendResponse(ctx context.Context, peer string, inReplyTo identity.UUID, status wire.Status, result wire.Value) (identity.UUID, error) {
	if !status.Valid() {
		return identity.UUID{}, fmt.Errorf("comms: response status %q: %w", status, wire.ErrBadValue)
	}
	return r.send(ctx, peer, wire.Response(inReplyTo, status, result), false)
}

// AwaitResponse waits for the next response to request id, sent by
// SendRequest from this Router. Responses that arrived before the call are
// returned first. An "accepted" response may be followed by a final one.
func (r *Router) AwaitResponse(ctx context.Context, id identity.UUID) (wire.Envelope, error) {
	return r.reqs.await(ctx, id)
}

// RequestPeer returns the peer request id was sent to while its
// responses are held for AwaitResponse (until its final response is
// taken, or it is forgotten among the oldest).
func (r *Router) RequestPeer(id identity.UUID) (identity.PeerID, bool) { return r.reqs.peer(id) }

func (r *Router) send(ctx context.Context, peer string, kind wire.Kind, wantAck bool) (identity.UUID, error) {
	p, err := r.ResolvePeer(peer)
	if err != nil {
		return identity.UUID{}, err
	}
	id := r.envelopeID(p.ID, kind.Type(), nil)
	return id, r.sendTo(ctx, p, id, kind, wantAck)
}

func (r *Router) sendTo(ctx context.Context, p trust.Peer, id identity.UUID, kind wire.Kind, wantAck bool) error {
	frame, err := r.sealOn(p, id, kind)
	if err != nil {
		return err
	}
	return r.sendFrame(ctx, p, id, frame, wantAck, sendOpts{})
}

// sealOn seals kind to p and encodes its frame, counted as sealing on
// p's link (coalescer) so that frames ready meanwhile wait to go out with
// this one.
func (r *Router) sealOn(p trust.Peer, id identity.UUID, kind wire.Kind) ([]byte, error) {
	seal := wire.Seal
	if p.Addr.Scheme != transport.SchemeNATS {
		if lk, err := r.link(p); err == nil { // an error is sendFrame's to report
			lk.co.beginSeal()
			defer lk.co.endSeal()
			if lk.acksKinds.Load() {
				seal = wire.SealPrepared // a meerkatd node
			}
		}
	}
	e, err := seal(r.kp, id, p.ID, kind)
	if err != nil {
		return nil, err
	}
	// The frame lives until the send ends, so it gets its own buffer,
	// sized for a short message at once rather than grown in steps.
	return appendFrame(make([]byte, 0, frameSizeHint), &e)
}

// frameSizeHint is the starting capacity of a frame being sealed: the
// fixed part of an envelope is about 170 bytes, leaving room for a
// message body of a few hundred.
const frameSizeHint = 512

// sendOpts are sendFrame's options for callers that retry themselves.
type sendOpts struct {
	// queued, if not nil, is called once, when the frame is in a
	// connection's write queue (not if the send fails before that).
	queued func()
	// single makes one attempt: no second try on a fresh connection when
	// the connection is lost with the envelope unacknowledged.
	single bool
	// inline lets the frame be written by the sending goroutine when the
	// connection's writer is idle, saving a hand-off. Set by sendFrame
	// for callers that do not order their sends through queued: an
	// inline frame may overtake one the writer has just taken.
	inline bool
	// relayed, if not nil, is called when the send goes through the
	// relay.
	relayed func()
}

// sendFrame writes a sealed envelope's frame on p's link and, if wantAck,
// waits for the ack.
func (r *Router) sendFrame(ctx context.Context, p trust.Peer, id identity.UUID, frame []byte, wantAck bool, so sendOpts) error {
	so.inline = so.queued == nil // a caller that orders its sends gets no inline writes
	so.queued = onceFunc(so.queued)
	if p.Addr.Scheme == transport.SchemeNATS {
		return r.relaySend(ctx, p, id, frame, wantAck, so)
	}
	for attempt := 0; ; attempt++ {
		lk, err := r.link(p)
		if err != nil {
			return err
		}
		err = lk.send(ctx, id, frame, wantAck, so)
		// A link closed under us by a trust change (not by Close) is
		// replaced: send again on the new one, same envelope id.
		if errors.Is(err, errLinkClosed) && attempt == 0 && r.ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errLinkClosed) {
			if r.ctx.Err() != nil {
				return ErrClosed
			}
			return &PeerOfflineError{Peer: p.Name, Reason: OfflineClosed, Plaintext: p.Addr.Scheme == transport.SchemeTCP}
		}
		if err != nil && lk.peer.NATS && r.currentRelay() != nil { // unreachable allocates: only when it may matter
			if off := unreachable(err); off != nil {
				return r.natsFallback(ctx, lk.peer, off, id, frame, wantAck, so)
			}
		}
		return err
	}
}

// natsFallback sends through NATS to p, whose direct address could not be
// connected to (off) and which is also reachable through NATS
// (docs/nats.md). An envelope too large for the relay is not too large
// for the peer: the send then fails as the direct address did, to be
// tried again, not refused for good (the size error is not wrapped).
func (r *Router) natsFallback(ctx context.Context, p trust.Peer, off *PeerOfflineError, id identity.UUID, frame []byte, wantAck bool, so sendOpts) error {
	err := r.relaySend(ctx, p, id, frame, wantAck, so)
	if !errors.Is(err, wire.ErrTooLarge) {
		return err
	}
	o := *off
	o.Err = fmt.Errorf("and too large to go through NATS (%v)", err)
	if off.Err != nil {
		o.Err = fmt.Errorf("%w; %v", off.Err, o.Err)
	}
	return &o
}

// unreachable returns the error of a send that failed because the
// peer's direct address could not be connected to (nothing was
// written), nil for any other.
func unreachable(err error) *PeerOfflineError {
	var off *PeerOfflineError
	if errors.As(err, &off) && off.Reason == OfflineRefused {
		return off
	}
	return nil
}

// errLinkClosed means the link was closed (trust change or Close) while a
// send used it.
var errLinkClosed = errors.New("comms: link closed")

// link returns the outbound link to p, creating it.
func (r *Router) link(p trust.Peer) (*link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	// The peer may have changed (or gone) since the caller resolved it;
	// a link always follows the trust list in force now.
	cur, ok := r.trust.Load().Lookup(p.ID)
	if !ok {
		return nil, fmt.Errorf("%w: %s is no longer trusted", ErrUnknownPeer, p.Name)
	}
	lk := r.links[p.ID]
	if lk == nil || !sameRoute(lk.peer, cur) {
		if lk != nil {
			go lk.close()
		}
		lk = &link{r: r, peer: cur}
		r.links[p.ID] = lk
	}
	return lk, nil
}

// handleAck routes an ack that arrived on an inbound connection to the
// link that waits for it.
func (r *Router) handleAck(e wire.Envelope) {
	r.mu.Lock()
	lk := r.links[e.From]
	r.mu.Unlock()
	if lk != nil {
		lk.ackArrived(e)
	}
}
