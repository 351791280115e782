package comms

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/seal"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Relay carries envelopes through a message broker (NATS) to the peers
// whose address is nats:. The Router seals what it hands a Relay; the
// Relay moves bytes and knows nothing of keys.
type Relay interface {
	// queued, called once at most, says the envelope is placed in order
	// with the broker: written on the connection, or confirmed stored. A
	// caller that starts its next send only then keeps its envelopes in
	// order.
	// Send hands one envelope's wire bytes (no length prefix) to the
	// broker for peer to. With wantAck, it returns the bytes the peer
	// answered on the message's reply subject (its signed ack, which the
	// Router checks, or an empty answer: refused), or nil with stored true
	// when the broker stored the
	// envelope for later and the ack will arrive as an inbound envelope
	// ([Router.ReceiveRelayed]). Without wantAck it returns once the
	// broker has the envelope. Errors mean the envelope did not reach the
	// broker or no ack came back before ctx ended.
	Send(ctx context.Context, to identity.PeerID, id identity.UUID, payload []byte, wantAck bool, queued func()) (ack []byte, stored bool, err error)
}

// RelayLimit is implemented by a [Relay] whose broker takes messages up
// to a size. MaxEnvelope is the largest envelope (sealed, its wire bytes)
// the relay can send now, 0 when it does not know (not connected yet): a
// larger one is refused with [wire.ErrTooLarge] before it goes out, and
// by [Router.CheckSealable].
type RelayLimit interface {
	MaxEnvelope() int
}

// relayMax is the MaxEnvelope of rl, 0 if it sets none.
func relayMax(rl Relay) int {
	if l, ok := rl.(RelayLimit); ok {
		return max(l.MaxEnvelope(), 0)
	}
	return 0
}

// fitsRelay refuses an envelope (its wire bytes as they go to the
// relay) larger than the relay's broker takes.
func fitsRelay(rl Relay, outer []byte) error {
	if m := relayMax(rl); m > 0 && len(outer) > m {
		return fmt.Errorf("comms: envelope of %d bytes as sent through the relay: %w (its broker takes at most %d: for NATS, the server's max_payload, less room for headers with JetStream)", len(outer), wire.ErrTooLarge, m)
	}
	return nil
}

// Reasons a send through the relay fails with [*PeerOfflineError].
const (
	// OfflineNoRelay: the peer's address is nats: and this node has no
	// NATS connection (none configured, not connected yet, or a command
	// run without the daemon).
	OfflineNoRelay = "the peer is reached through NATS and this node has no NATS connection: only a daemon holds one, and only with [nats] servers in meerkat.toml (a command run without the daemon has none; meerkatd status shows the daemon's)"
	// OfflineRelayNotConnected: the peer's address is nats:, and this
	// node, which has NATS servers set (Options.RelayExpected), is not
	// connected to one now.
	OfflineRelayNotConnected = "the peer is reached through NATS and this node is not connected to NATS now (meerkatd status shows why)"
	// OfflineRelay: the broker did not take the envelope or no ack came
	// back (the peer is not subscribed, the connection is down, a
	// permission refused it).
	OfflineRelay = "NATS did not deliver it"
	// OfflineStored: the broker stored the envelope (JetStream) but the
	// recipient has not acknowledged it yet; the error wraps
	// [ErrStoredInBroker].
	OfflineStored = "stored in the broker; not acknowledged by the peer yet"
)

// ErrStoredInBroker is wrapped by the error of a send whose envelope the
// broker stored for the recipient, who has not acknowledged it (yet).
var ErrStoredInBroker = errors.New("comms: stored in the broker")

// storedAckWait is how long a send waits for the recipient's ack once the
// broker has stored its envelope, before leaving it to the broker.
const storedAckWait = 3 * time.Second

// relayState is the Router's side of the relay: the Relay, the opener for
// sealed envelopes, and the acks awaited or arrived early through it.
type relayState struct {
	mu      sync.Mutex
	relay   Relay
	opener  *seal.Opener
	waiting map[dedupKey]chan struct{} // acks a send waits for: (peer, envelope id)
	// recipients are peers' keys made ready to seal to, converted once.
	recipients map[identity.PeerID]*seal.Recipient
	// late are acks that arrived while no send waited for them (the
	// peer read its stored envelopes while the sender was between
	// attempts): the next attempt finds them and is done at once.
	late  map[dedupKey]time.Time
	lateQ []lateAck // late's keys in arrival order, with stale ones (taken, or kept again since)
}

// lateAck is an entry of relayState.lateQ.
type lateAck struct {
	k  dedupKey
	at time.Time
}

// keepLate keeps k's ack, which arrived at now with no send waiting for
// it, for the next attempt: past maxLateAcks the oldest go first (in
// arrival order, not by scanning), as do those older than lateAckTTL.
// rs.mu is held.
func (rs *relayState) keepLate(k dedupKey, now time.Time) {
	if _, ok := rs.late[k]; ok {
		return
	}
	for len(rs.lateQ) > 0 && (len(rs.late) >= maxLateAcks || now.Sub(rs.lateQ[0].at) > lateAckTTL) {
		old := rs.lateQ[0]
		rs.lateQ = rs.lateQ[1:]
		if at, ok := rs.late[old.k]; ok && at.Equal(old.at) {
			delete(rs.late, old.k)
		}
	}
	rs.late[k] = now
	rs.lateQ = append(rs.lateQ, lateAck{k, now})
	if len(rs.lateQ) > 2*len(rs.late)+1024 {
		// Mostly taken ones: keep those still in late, in order.
		live := rs.lateQ[:0]
		for _, a := range rs.lateQ {
			if at, ok := rs.late[a.k]; ok && at.Equal(a.at) {
				live = append(live, a)
			}
		}
		clear(rs.lateQ[len(live):])
		rs.lateQ = live
	}
}

// maxLateAcks bounds the acks kept for attempts still to come; past it the
// oldest are forgotten (the attempt then waits for the peer to ack a
// repeat).
const maxLateAcks = 1 << 16

// lateAckTTL is how long an ack nobody waited for is kept.
const lateAckTTL = time.Hour

// SetRelay installs the relay that reaches nats: peers (nil removes it).
// The Relay hands what arrives for this node to [Router.ReceiveRelayed].
func (r *Router) SetRelay(rl Relay) error {
	if rl != nil {
		if _, err := r.opener(); err != nil {
			return err
		}
	}
	r.rs.mu.Lock()
	defer r.rs.mu.Unlock()
	r.rs.relay = rl
	if r.rs.waiting == nil {
		r.rs.waiting = map[dedupKey]chan struct{}{}
		r.rs.late = map[dedupKey]time.Time{}
	}
	return nil
}

// opener returns the Router's HPKE opener, making it on first use. The
// relay may deliver envelopes before SetRelay returns (a JetStream
// consumer starts with what the stream stored while the node was away),
// so unseal cannot wait for SetRelay to make it.
func (r *Router) opener() (*seal.Opener, error) {
	r.rs.mu.Lock()
	defer r.rs.mu.Unlock()
	if r.rs.opener == nil {
		o, err := seal.NewOpener(r.kp)
		if err != nil {
			return nil, err
		}
		r.rs.opener = o
	}
	return r.rs.opener, nil
}

func (r *Router) currentRelay() Relay {
	r.rs.mu.Lock()
	defer r.rs.mu.Unlock()
	return r.rs.relay
}

// relaySend delivers a signed envelope's frame to p through the relay,
// sealed to p's key inside a signed envelope of kind sealed with the same
// id, and waits for p's signed ack of id when wantAck.
func (r *Router) relaySend(ctx context.Context, p trust.Peer, id identity.UUID, frame []byte, wantAck bool, so sendOpts) error {
	rl := r.currentRelay()
	if rl == nil {
		if r.opts.RelayExpected {
			return &PeerOfflineError{Peer: p.Name, Reason: OfflineRelayNotConnected}
		}
		return &PeerOfflineError{Peer: p.Name, Reason: OfflineNoRelay}
	}
	if so.relayed != nil {
		so.relayed()
	}
	outer := frame[transport.HeaderSize:]
	if !r.opts.RelayUnsealed {
		var err error
		if outer, err = r.sealFor(p.ID, id, outer); err != nil {
			return err
		}
	}
	if err := fitsRelay(rl, outer); err != nil {
		return err
	}
	k := dedupKey{p.ID, id}
	if wantAck && r.takeLateAck(k) {
		// Its ack came while no attempt waited: acknowledged already.
		so.queued()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.AckTimeout)
	defer cancel()
	ack, stored, err := rl.Send(ctx, p.ID, id, outer, wantAck, so.queued)
	switch {
	case err != nil:
		if r.ctx.Err() != nil {
			return ErrClosed
		}
		return &PeerOfflineError{Peer: p.Name, Reason: OfflineRelay, Err: err}
	case !wantAck:
		return nil
	case stored:
		return r.awaitStoredAck(ctx, p, k)
	case len(ack) == 0:
		// The peer refused the envelope (as a socket closed without an
		// ack): most often it does not trust this node's key.
		return &PeerOfflineError{Peer: p.Name, Reason: OfflineClosed}
	}
	if err := r.checkAck(ack, p.ID, id); err != nil {
		return &PeerOfflineError{Peer: p.Name, Reason: OfflineBadAck, Err: err}
	}
	r.seen(p.ID)
	return nil
}

// awaitStoredAck waits a little for the ack k of an envelope the broker
// stored, then leaves it to the broker: the ack, when it comes, is kept
// for the next attempt.
func (r *Router) awaitStoredAck(ctx context.Context, p trust.Peer, k dedupKey) error {
	arrived, done := r.awaitRelayAck(k) // it may have come already
	if done {
		return nil
	}
	defer r.stopAwaiting(k, arrived)
	t := time.NewTimer(min(r.opts.AckTimeout, storedAckWait))
	defer t.Stop()
	select {
	case <-arrived:
		return nil
	case <-t.C:
	case <-ctx.Done():
	case <-r.ctx.Done():
	}
	if r.ctx.Err() != nil {
		return ErrClosed
	}
	return &PeerOfflineError{Peer: p.Name, Reason: OfflineStored, Err: ErrStoredInBroker}
}

// sealFor wraps a signed envelope's bytes for peer to: a new envelope of
// kind sealed, same id, whose box only to's key opens.
func (r *Router) sealFor(to identity.PeerID, id identity.UUID, inner []byte) ([]byte, error) {
	rcpt, err := r.recipient(to)
	if err != nil {
		return nil, err
	}
	box, err := rcpt.Seal(seal.Info(r.self, to, id), inner)
	if err != nil {
		return nil, err
	}
	if len(box) > r.opts.MaxMessageBytes { // the envelope holding it is larger still
		return nil, fmt.Errorf("comms: sealed box of %d bytes: %w (limit %d)", len(box), wire.ErrTooLarge, r.opts.MaxMessageBytes)
	}
	e, err := wire.Seal(r.kp, id, to, wire.SealedKind(box))
	if err != nil {
		return nil, err
	}
	b, err := e.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if len(b) > r.opts.MaxMessageBytes {
		return nil, fmt.Errorf("comms: sealed envelope of %d bytes: %w (limit %d)", len(b), wire.ErrTooLarge, r.opts.MaxMessageBytes)
	}
	return b, nil
}

// sealSlack bounds what sealing adds to an envelope (the box's key and
// tag, the outer envelope's fields): a payload this far below the frame
// limit always fits once sealed (TestSealSlack).
const sealSlack = 1024

// CheckSealable reports whether the envelope payload (its wire bytes,
// no length prefix), id, fits a frame once sealed for to, as it goes
// through the relay, and what the relay's broker takes ([RelayLimit]): a
// wire.ErrTooLarge error if not. A reliable send to a peer reached only
// through the relay checks this before it is queued, rather than become
// a dead letter at its first attempt. Only a payload within sealSlack of
// a limit is sealed to see.
func (r *Router) CheckSealable(to identity.PeerID, id identity.UUID, payload []byte) error {
	rl := r.currentRelay()
	if r.opts.RelayUnsealed {
		return fitsRelay(rl, payload)
	}
	limit := r.opts.MaxMessageBytes
	if m := relayMax(rl); m > 0 {
		limit = min(limit, m)
	}
	if len(payload)+sealSlack <= limit {
		return nil
	}
	sealed, err := r.sealFor(to, id, payload)
	if err != nil {
		return err
	}
	return fitsRelay(rl, sealed)
}

// maxRecipients bounds the converted keys kept; past it they are
// converted again.
const maxRecipients = 4096

// recipient returns to's key ready to seal to.
func (r *Router) recipient(to identity.PeerID) (*seal.Recipient, error) {
	r.rs.mu.Lock()
	rc := r.rs.recipients[to]
	r.rs.mu.Unlock()
	if rc != nil {
		return rc, nil
	}
	rc, err := seal.NewRecipient(to)
	if err != nil {
		return nil, err
	}
	r.rs.mu.Lock()
	if r.rs.recipients == nil || len(r.rs.recipients) >= maxRecipients {
		r.rs.recipients = map[identity.PeerID]*seal.Recipient{}
	}
	r.rs.recipients[to] = rc
	r.rs.mu.Unlock()
	return rc, nil
}

// takeLateAck reports whether k's ack arrived while no attempt waited
// for it, and forgets it.
func (r *Router) takeLateAck(k dedupKey) bool {
	r.rs.mu.Lock()
	defer r.rs.mu.Unlock()
	if _, ok := r.rs.late[k]; ok {
		delete(r.rs.late, k)
		return true
	}
	return false
}

// awaitRelayAck registers a wait for k's ack; done reports it arrived
// already (between two attempts).
func (r *Router) awaitRelayAck(k dedupKey) (ch chan struct{}, done bool) {
	r.rs.mu.Lock()
	defer r.rs.mu.Unlock()
	if _, ok := r.rs.late[k]; ok {
		delete(r.rs.late, k)
		return nil, true
	}
	ch = make(chan struct{})
	r.rs.waiting[k] = ch
	return ch, false
}

func (r *Router) stopAwaiting(k dedupKey, ch chan struct{}) {
	r.rs.mu.Lock()
	if r.rs.waiting[k] == ch {
		delete(r.rs.waiting, k)
	}
	r.rs.mu.Unlock()
}

// relayLateAck routes an ack that came through the relay as an inbound
// envelope. One that no send waits for is kept for the next attempt, and
// the peer's queue is told to go on at once.
func (r *Router) relayLateAck(e wire.Envelope) {
	waited, late := r.relayAckArrived(e)
	if r.opts.LateAck != nil {
		for _, id := range late {
			r.opts.LateAck(e.From, id)
		}
	}
	if !waited && r.opts.PeerConnected != nil {
		r.opts.PeerConnected(e.From)
	}
}

// relayAckArrived routes an ack (or each id of an acks) that came
// through the relay as an inbound envelope; it reports whether a send was
// waiting for it, and the ids no send waited for.
func (r *Router) relayAckArrived(e wire.Envelope) (waited bool, late []identity.UUID) {
	var buf [1]identity.UUID
	now := time.Now()
	r.rs.mu.Lock()
	defer r.rs.mu.Unlock()
	for _, id := range e.Kind.AckedIDs(buf[:0]) {
		k := dedupKey{e.From, id}
		if ch, ok := r.rs.waiting[k]; ok {
			delete(r.rs.waiting, k)
			close(ch)
			waited = true
			continue
		}
		if r.rs.late != nil {
			r.rs.keepLate(k, now)
		}
		late = append(late, id)
	}
	return waited, late
}

// RelayReply is the outcome of an envelope that arrived through the relay.
type RelayReply struct {
	// Ack is the signed ack to send back (wire bytes, no length prefix),
	// nil for kinds that are not acknowledged and for refusals.
	Ack []byte
	// Reason is the Reject… reason it was refused for; "" if accepted.
	Reason string
	// To is whom Ack goes to: the verified sender.
	To identity.PeerID
}

// ReceiveRelayed runs one envelope that came through the relay through the
// same checks as one read from a socket — size, decode, to, trust,
// signature, then, for a sealed kind, open and the same checks again on
// the envelope inside, duplicate check, admission, fair share — and
// returns a function that waits for its admission and gives the reply.
// Calls made one after another admit their envelopes in that order; the
// returned functions may be called from another goroutine, in the same
// order.
func (r *Router) ReceiveRelayed(payload []byte) func() RelayReply {
	var from identity.PeerID // known once unsealed
	refused := func(reason string) func() RelayReply {
		r.reject(reason)
		r.logRefused(reason, from)
		return func() RelayReply { return RelayReply{Reason: reason} }
	}
	if len(payload) > r.opts.MaxMessageBytes {
		r.observe(EventRefused, nil, "", len(payload), RejectFrame)
		return refused(RejectFrame)
	}
	st := &inConn{relay: true}
	e, reason := r.unseal(payload, st)
	if reason != "" {
		return refused(reason)
	}
	from = e.From
	quiet := time.Since(r.LastSeen(from)) > relayQuiet
	var async []pendingAdmission
	ack, fresh, _, reason := r.receiveDecoded(e, len(payload), st, &async, sigUnchecked)
	if reason != "" {
		return refused(reason)
	}
	if quiet && (fresh || len(async) > 0) && r.opts.PeerConnected != nil {
		// A peer quiet for a while sent again: its queue may go at once.
		r.opts.PeerConnected(from)
	}
	if len(async) == 0 {
		return func() RelayReply {
			if !ack {
				return RelayReply{To: from}
			}
			acks := ackBuf{r: r}
			acks.add(from, e.ID)
			return RelayReply{Ack: ackPayload(acks.take()), To: from}
		}
	}
	pa := async[0]
	return func() RelayReply {
		acks := ackBuf{r: r}
		if reason := r.settle(st, ackJob{adm: pa.adm, key: pa.key, ev: pa.ev, claimed: pa.claimed}, &acks); reason != "" {
			return RelayReply{Reason: reason}
		}
		return RelayReply{Ack: ackPayload(acks.take()), To: from}
	}
}

// ackPayload is the payload of a single ack frame (nil if there is none:
// it could not be sealed).
func ackPayload(frame []byte) []byte {
	if len(frame) <= transport.HeaderSize {
		return nil
	}
	return frame[transport.HeaderSize:]
}

// relayQuiet is how long a peer must have sent nothing before a relayed
// envelope counts as a sign it came back.
const relayQuiet = 5 * time.Second

// unseal checks a relayed envelope and, if it is sealed, opens it: the
// outer envelope must be to this node from a trusted key with a valid
// signature, and the inner one must carry the same from, to and id. It
// returns the envelope receiveDecoded checks next (the input itself when
// not sealed, decoded once), or the reason to refuse.
func (r *Router) unseal(payload []byte, st *inConn) (wire.Envelope, string) {
	var route string
	e, err := wire.DecodeFor(payload, func(from, to identity.PeerID) bool {
		route = r.routeRefusal(st, from, to)
		return route == ""
	})
	switch {
	case errors.Is(err, wire.ErrNotAccepted): // its kind not even decoded, as on a socket
		r.refuseRoute(st, &e, len(payload), route)
		return wire.Envelope{}, route
	case err != nil:
		r.observe(EventRefused, nil, "", len(payload), RejectMalformed)
		return wire.Envelope{}, RejectMalformed
	}
	box, ok := e.Kind.Box()
	if !ok {
		return e, "" // a plain kind: checked as from a socket
	}
	st.sealed = true
	fail := func(reason, peer string) (wire.Envelope, string) {
		r.observeSt(st, EventRefused, &e, peer, len(payload), reason)
		return wire.Envelope{}, reason
	}
	if e.To != r.self {
		return fail(RejectNotForUs, "")
	}
	peer, ok := r.trust.Load().Lookup(e.From)
	if !ok {
		r.logUntrusted(e.From)
		return fail(RejectUntrusted, "")
	}
	if err := e.VerifyWith(&r.keys); err != nil {
		return fail(RejectBadSignature, peer.Name)
	}
	op, err := r.opener()
	if err != nil {
		return fail(RejectSealed, peer.Name)
	}
	inner, err := op.Open(seal.Info(e.From, e.To, e.ID), box)
	if err != nil {
		return fail(RejectSealed, peer.Name)
	}
	in, err := wire.Decode(inner)
	if err != nil || in.From != e.From || in.To != e.To || in.ID != e.ID {
		return fail(RejectSealed, peer.Name)
	}
	if _, nested := in.Kind.Box(); nested {
		return fail(RejectSealed, peer.Name)
	}
	return in, ""
}

// AckTimeout is how long a send waits for a peer's ack.
func (r *Router) AckTimeout() time.Duration { return r.opts.AckTimeout }
