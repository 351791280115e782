package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// openAudit opens the home's audit log if [audit] enabled (nil otherwise:
// a nil *audit.Log records nothing).
func openAudit(h *Home) (*audit.Log, error) {
	if !h.Config.Audit.Enabled {
		return nil, nil
	}
	return audit.Open(filepath.Join(h.Dir, audit.FileName), audit.Options{Bodies: h.Config.Audit.Bodies, MaxBytes: int64(h.Config.Audit.MaxBytes)})
}

// AuditPeer checks the peer an audit log query is to filter by (meerkatd
// audit --peer) and returns the text the rows carry for it: a key
// ("ed25519:…", trusted or not: rows of a peer since removed carry it),
// a trusted peer's name, or the key of the trusted peer with that UUID.
// A name no trusted peer has is accepted only if a row of the home's
// audit log carries it (a peer since removed or renamed); any other ref
// is an unknown_peer error, as it is for the commands that send. ""
// (no filter) is returned as is.
func AuditPeer(h *Home, ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	id, err := identity.ParsePeerID(ref)
	if err == nil {
		return id.String(), nil
	}
	if !errors.Is(err, identity.ErrBadPrefix) { // written as a key, but not one
		return "", errorf(CodeBadArgument, "%q is not a valid key: %v", ref, err)
	}
	l, err := trust.LoadOrEmpty(h.TrustPath())
	if err != nil {
		return "", err
	}
	// A trusted peer by its name in any letter case, or its peer UUID: a
	// name matches the rows written under the stored name, a UUID those
	// of the key.
	if p, ok := l.Resolve(ref); ok {
		if _, err := identity.ParseUUID(ref); err == nil {
			return p.ID.String(), nil
		}
		return p.Name, nil
	}
	_, st, err := audit.Read(filepath.Join(h.Dir, audit.FileName), audit.Filter{Peer: ref}, 1)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if st.Matched == 0 {
		return "", Coded(fmt.Errorf("%w: %q", comms.ErrUnknownPeer, ref))
	}
	return ref, nil
}

// AuditFilter checks the filters of an audit log query (meerkatd audit)
// as [AuditPeer] and [AuditEvent] do, and returns the filter.
func AuditFilter(h *Home, peer, event, id string) (audit.Filter, error) {
	f := audit.Filter{Event: event, ID: id}
	var err error
	if f.Peer, err = AuditPeer(h, peer); err != nil {
		return f, err
	}
	return f, AuditEvent(h, event)
}

// AuditEvent checks the event an audit log query is to filter by
// (meerkatd audit --event): one of [audit.Events], or an event a row of
// the home's log carries (a newer build's). Any other is a bad_argument
// error listing the events, rather than a query that matches nothing.
// "" (no filter) is accepted.
func AuditEvent(h *Home, event string) error {
	if event == "" || slices.Contains(audit.Events, event) {
		return nil
	}
	_, st, err := audit.Read(filepath.Join(h.Dir, audit.FileName), audit.Filter{Event: event}, 1)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if st.Matched == 0 {
		return errorf(CodeBadArgument, "unknown audit event %q: want one of %s", event, strings.Join(audit.Events, ", "))
	}
	return nil
}

// kindJSON is the audit body of a kind: the whole kind as JSON.
func kindJSON(k wire.Kind) json.RawMessage {
	b, err := k.Value().MarshalJSON()
	if err != nil {
		return nil
	}
	return b
}

// observeInbound records a Router event in the audit log and tells the
// outbox that a peer that just reached us is up.
//
// What a stranger can cause at will is summed, not written a row each
// (see auditSummary): refusals before the signature was checked — their
// rows carry the sender only as Claimed, never its trust-list name, and
// the kind only as a short escaped excerpt, never a body — acks, and
// duplicates past the first few of a sender in a minute (anyone who saw
// an envelope can send it again).
func (n *Node) observeInbound(ev comms.Event) {
	if n.audit != nil {
		switch {
		case ev.Type == comms.EventAck:
			n.auditSum.add(summaryKey{event: audit.EventAcks, key: ev.From}, ev)
		case ev.Type == comms.EventRefused && !verifiedRefusal(ev.Reason):
			n.auditSum.add(summaryKey{event: audit.EventRefused, reason: ev.Reason, key: ev.From}, ev)
		case ev.Type == comms.EventDuplicate:
			if k := (summaryKey{event: audit.EventDuplicate, key: ev.From}); !n.auditSum.ownRow(k) {
				n.auditSum.add(k, ev)
				break
			}
			n.auditEvent(ev)
		default:
			n.auditEvent(ev)
		}
	}
	if ob := n.ob; ob != nil && (ev.Type == comms.EventReceived || ev.Type == comms.EventDuplicate) {
		ob.Kick(ev.From)
	}
}

// auditEvent records an event about a verified envelope as one row.
func (n *Node) auditEvent(ev comms.Event) {
	rec := audit.Record{Dir: audit.DirIn, Event: ev.Type, Peer: ev.Peer, Kind: ev.Kind, Size: ev.Size, Reason: ev.Reason, Sealed: ev.Sealed}
	if !ev.From.IsZero() {
		rec.Key = ev.From.String()
	}
	if !ev.ID.IsZero() {
		rec.ID = ev.ID.String()
	}
	if !ev.CorrID.IsZero() {
		rec.CorrID = ev.CorrID.String()
	}
	if n.h.Config.Audit.Bodies && ev.Kind != "" {
		rec.Body = kindJSON(ev.Fields)
	}
	n.audit.Record(rec)
}

// observeOutbox records an outbox event in the audit log and logs
// retries and dead letters.
func (n *Node) observeOutbox(ev outbox.Event) {
	n.events.logOutbox(ev)
	n.noticeOutbox(ev)
	n.sentOutbox(ev) // slice B: the send record
	e := ev.Entry
	switch ev.Type {
	case outbox.EventAcked:
		if e.Kind == wire.TypeResponse {
			n.countSend(sendWritten)
		} else {
			n.countSend(sendAcked)
		}
	case outbox.EventRetry, outbox.EventExpired, outbox.EventDeadLetter:
		if !withdrawnReason(ev.Reason) { // not a failed delivery: the request was over
			n.countSend(ev.Type)
		}
	}
	n.auditOut(ev.Type, e.Peer, e.To, e.Kind, e.ID, e.CorrID, e.Payload, ev.Attempt, ev.Reason)
	switch ev.Type {
	case outbox.EventAcked, outbox.EventExpired, outbox.EventDeadLetter:
		if n.h.Config.NATS.Enabled() {
			n.relayed.Delete(e.ID) // its last row
		}
	}
}

// auditSealed records a direct (not reliable) send.
func (n *Node) auditSealed(s comms.Sealed, event string, attempt int, reason string) {
	n.auditOut(event, s.Peer.Name, s.Peer.ID, s.Kind, s.ID, s.CorrID, s.Payload, attempt, reason)
}

// auditOut records one step of an outgoing envelope.
func (n *Node) auditOut(event, peer string, to identity.PeerID, kind string, id, corr identity.UUID, payload []byte, attempt int, reason string) {
	if n.audit == nil {
		return
	}
	rec := audit.Record{Dir: audit.DirOut, Event: event, Peer: peer, Key: to.String(), Kind: kind,
		ID: id.String(), Size: len(payload), Reason: reason, Attempt: attempt}
	if p, ok := n.r.Trust().Lookup(to); ok && p.Addr.Scheme == transport.SchemeNATS {
		rec.Sealed = true // sealed to the peer on the way through NATS
	} else if n.h.Config.NATS.Enabled() {
		_, rec.Sealed = n.relayed.Load(id) // through NATS, its direct address failing
	}
	if !corr.IsZero() {
		rec.CorrID = corr.String()
	}
	if n.h.Config.Audit.Bodies {
		if env, err := wire.Decode(payload); err == nil {
			rec.Body = kindJSON(env.Kind)
		}
	}
	n.audit.Record(rec)
}
