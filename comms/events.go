package comms

import (
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// Event types reported to [Options.Observe].
const (
	EventReceived  = "received"  // a new envelope was admitted (and acked, if its kind is)
	EventDuplicate = "duplicate" // a repeat was acked again but not delivered
	EventRefused   = "refused"   // refused without an ack; Reason is a Reject… constant
	EventAck       = "ack"       // a verified ack from a trusted peer (acks are not stored)
)

// Event is one inbound envelope's outcome, for an audit log. Fields the
// Router could not learn (a frame that does not decode has no sender) are
// zero.
type Event struct {
	Type string
	Peer string          // sender's trust-list name, if trusted
	From identity.PeerID // sender's key, if the envelope decoded
	Kind string
	// Fields is the whole kind (body, params, result…) of an envelope
	// that decoded, for an observer that records bodies; it is not
	// verified for refused envelopes.
	Fields wire.Kind
	ID     identity.UUID
	CorrID identity.UUID // in_reply_to of acks and responses
	Size   int           // bytes on the wire
	Reason string        // for EventRefused
	// Sealed marks an envelope that came through the relay sealed to this
	// node ([Relay]); Kind and Fields are then the opened inner kind's.
	Sealed bool
}

// observe reports an event about envelope e (nil if it did not decode).
func (r *Router) observe(typ string, e *wire.Envelope, peer string, size int, reason string) {
	if r.opts.Observe != nil {
		r.opts.Observe(eventOf(typ, e, peer, size, reason))
	}
}

// observeSt is observe for an envelope that arrived on st (nil: an
// outbound link), which tells whether it came sealed.
func (r *Router) observeSt(st *inConn, typ string, e *wire.Envelope, peer string, size int, reason string) {
	if r.opts.Observe != nil {
		ev := eventOf(typ, e, peer, size, reason)
		ev.Sealed = st != nil && st.sealed
		r.opts.Observe(ev)
	}
}

// pendingEventSt is pendingEvent for an envelope that arrived on st.
func (r *Router) pendingEventSt(st *inConn, e *wire.Envelope, peer string, size int) *Event {
	ev := r.pendingEvent(e, peer, size)
	if ev != nil {
		ev.Sealed = st != nil && st.sealed
	}
	return ev
}

// pendingEvent is the event of an envelope whose admission is still
// committing, or nil when nobody observes (no cost per message then).
func (r *Router) pendingEvent(e *wire.Envelope, peer string, size int) *Event {
	if r.opts.Observe == nil {
		return nil
	}
	ev := eventOf("", e, peer, size, "")
	return &ev
}

// observeSettled reports a pending event's outcome.
func (r *Router) observeSettled(ev *Event, typ, reason string) {
	if ev != nil && r.opts.Observe != nil {
		ev.Type, ev.Reason = typ, reason
		r.opts.Observe(*ev)
	}
}

func eventOf(typ string, e *wire.Envelope, peer string, size int, reason string) Event {
	ev := Event{Type: typ, Peer: peer, Size: size, Reason: reason}
	if e != nil {
		ev.From, ev.Kind, ev.ID, ev.Fields = e.From, e.Kind.Type(), e.ID, e.Kind
		ev.CorrID, _ = e.Kind.InReplyTo()
	}
	return ev
}
