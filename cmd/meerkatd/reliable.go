package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/trust"
)

// Delivery outcomes of a send, as the CLI, the control socket and the MCP
// tools report them.
const (
	deliveryAcked   = "acked"   // the peer acknowledged it (messages, requests)
	deliveryWritten = "written" // written to the peer (responses are not acknowledged)
	deliveryQueued  = "queued"  // in the outbox: not acknowledged yet, being retried
)

// sendSpec is one send as the node carries it out.
type sendSpec struct {
	peer     string
	kind     wire.Kind
	reliable bool          // through the outbox: stored first, retried until acked
	ttl      time.Duration // reliable: dead letter if not acked by then (0: outbox.default_ttl_secs)
	noWait   bool          // reliable: return once stored, without waiting for the first attempt
}

// sendOutcome is what a send did.
type sendOutcome struct {
	id        identity.UUID
	peer      trust.Peer
	delivery  string
	lastError string // queued: why the last attempt failed
}

// routerDeliverer makes the outbox's attempts on the Router.
type routerDeliverer struct{ r *comms.Router }

func (d routerDeliverer) Deliver(ctx context.Context, a outbox.Attempt) error {
	err := d.r.Deliver(ctx, comms.Delivery{To: a.To, ID: a.ID, Payload: a.Payload, WantAck: a.WantAck, Queued: a.Queued})
	if errors.Is(err, comms.ErrUnknownPeer) {
		return outbox.Permanent(outbox.ReasonUnknownPeer, err)
	}
	return err
}

// errOutboxNeedsStore is returned for a reliable send with no daemon and
// no durable store to keep it in.
var errOutboxNeedsStore = &codedError{codeBadArgs, "a reliable send needs the running daemon or store.mode = \"sqlite\" to keep it until it is acknowledged"}

// send seals s.kind for s.peer and sends it: directly (one attempt, as
// before the outbox existed) or reliably (stored, then retried).
func (n *node) send(ctx context.Context, s sendSpec) (sendOutcome, error) {
	sealed, err := n.r.Seal(s.peer, s.kind)
	if err != nil {
		return sendOutcome{}, err
	}
	out := sendOutcome{id: sealed.ID, peer: sealed.Peer}
	wantAck := sealed.Kind != wire.TypeResponse
	done := deliveryAcked
	if !wantAck {
		done = deliveryWritten
	}
	if !s.reliable {
		n.auditSealed(sealed, audit.EventSent, 1, "")
		err := n.r.Deliver(ctx, comms.Delivery{To: sealed.Peer.ID, ID: sealed.ID, Payload: sealed.Payload, WantAck: wantAck, SecondTry: true})
		if err != nil {
			n.auditSealed(sealed, audit.EventRefused, 1, err.Error())
			return out, err
		}
		n.auditSealed(sealed, audit.EventAcked, 1, "") // responses: written
		out.delivery = done
		return out, nil
	}
	e := outbox.Entry{ID: sealed.ID, To: sealed.Peer.ID, Peer: sealed.Peer.Name, Kind: sealed.Kind, CorrID: sealed.CorrID, Payload: sealed.Payload}
	ttl := s.ttl
	if ttl == 0 {
		ttl = n.h.cfg.Outbox.DefaultTTL()
	}
	if ttl > 0 {
		e.Expires = time.Now().Add(ttl)
	}
	if n.ob == nil {
		return n.sendReliableOnce(ctx, e, out, done)
	}
	// Wait for the first attempt only if it starts now: behind a backlog
	// or an open breaker it would not start within the caller's patience.
	ps := n.ob.Peer(e.To)
	wait := !s.noWait && ps.Breaker != outbox.BreakerOpen && !ps.NextAttempt.After(time.Now())
	_, t, err := n.ob.Enqueue(e)
	if err != nil {
		return out, err
	}
	out.delivery, out.lastError = deliveryQueued, ps.LastError
	if !wait {
		return out, nil
	}
	select {
	case <-t.Attempted():
	case <-ctx.Done():
		return out, nil // still queued; the outbox keeps trying
	}
	select {
	case <-t.Done():
		if err := t.Err(); err != nil {
			return out, deadLetterError(err)
		}
		out.delivery, out.lastError = done, ""
	default:
		out.lastError = t.LastError()
	}
	return out, nil
}

// sendReliableOnce is a reliable send without a running outbox (no
// daemon): the envelope is stored in the home's outbox, attempted once,
// and left there for the daemon to retry if that attempt fails.
func (n *node) sendReliableOnce(ctx context.Context, e outbox.Entry, out sendOutcome, done string) (sendOutcome, error) {
	st, err := n.outboxStore()
	if err != nil {
		return out, err
	}
	// Earlier envelopes for this peer still queued, or its breaker open:
	// this one waits its turn (order), for the daemon to send.
	waiting, err := queuedFor(st, e.To, time.Now())
	if err != nil {
		return out, err
	}
	e.Created = time.Now()
	if e, err = st.Add(e); err != nil {
		return out, err
	}
	if waiting != "" {
		out.delivery, out.lastError = deliveryQueued, waiting
		return out, nil
	}
	err = n.r.Deliver(ctx, comms.Delivery{To: e.To, ID: e.ID, Payload: e.Payload, WantAck: e.Kind != wire.TypeResponse, SecondTry: true})
	switch {
	case err == nil:
		out.delivery = done
		return out, st.Delivered(e.ID)
	case errors.Is(err, comms.ErrUnknownPeer):
		if kerr := st.Kill(e.ID, outbox.ReasonUnknownPeer+": "+err.Error(), time.Now()); kerr != nil {
			return out, kerr
		}
		return out, err
	}
	out.delivery, out.lastError = deliveryQueued, err.Error()
	backoff, _ := n.h.cfg.Outbox.BackoffDurations()
	if aerr := st.Attempted(e.ID, 1, time.Now().Add(backoff[0]), err.Error()); aerr != nil {
		return out, aerr
	}
	return out, nil
}

// queuedFor says why a new envelope to peer must wait behind the stored
// outbox ("" if it need not).
func queuedFor(st outbox.Store, peer identity.PeerID, now time.Time) (string, error) {
	es, err := st.Entries()
	if err != nil {
		return "", err
	}
	n := 0
	for _, e := range es {
		if e.To == peer {
			n++
		}
	}
	if n > 0 {
		return fmt.Sprintf("behind %d earlier envelope(s) to this peer, which the daemon sends first", n), nil
	}
	bs, err := st.Breakers()
	if err != nil {
		return "", err
	}
	for _, b := range bs {
		if b.Peer == peer && now.Before(b.OpenUntil) {
			return "the peer's circuit breaker is open until " + b.OpenUntil.Local().Format(time.RFC3339), nil
		}
	}
	return "", nil
}

// outboxStore returns the store of the home's outbox: the daemon's, or for
// a command without a daemon the home's database, opened on first use.
func (n *node) outboxStore() (outbox.Store, error) {
	if n.obStore != nil {
		return n.obStore, nil
	}
	if n.h.cfg.Store.Mode == config.StoreMemory {
		return nil, errOutboxNeedsStore
	}
	st, err := store.Open(filepath.Join(n.h.dir, dbFileName), store.Options{})
	if err != nil {
		return nil, err
	}
	n.obStore, n.obDB = st.Outbox(), st
	return n.obStore, nil
}

// newOutbox creates the outbox of a daemon node over st.
func newOutbox(h *home, r *comms.Router, st outbox.Store, observe func(outbox.Event)) (*outbox.Outbox, error) {
	backoff, err := h.cfg.Outbox.BackoffDurations()
	if err != nil {
		return nil, err
	}
	return outbox.New(st, routerDeliverer{r}, outbox.Options{
		Backoff:         backoff,
		MaxAttempts:     h.cfg.Outbox.MaxAttempts,
		BreakerFailures: h.cfg.Outbox.BreakerFailures,
		BreakerOpen:     h.cfg.Outbox.BreakerOpen(),
		MaxEntries:      h.cfg.Outbox.MaxEntries,
		MaxBytes:        int64(h.cfg.Outbox.MaxBytes),
		Observe:         observe,
	})
}

// openAudit opens the home's audit log if [audit] enabled (nil otherwise:
// a nil *audit.Log records nothing).
func openAudit(h *home) (*audit.Log, error) {
	if !h.cfg.Audit.Enabled {
		return nil, nil
	}
	return audit.Open(filepath.Join(h.dir, audit.FileName), audit.Options{Bodies: h.cfg.Audit.Bodies, MaxBytes: int64(h.cfg.Audit.MaxBytes)})
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
func (n *node) observeInbound(ev comms.Event) {
	if n.audit != nil {
		rec := audit.Record{Dir: audit.DirIn, Event: ev.Type, Peer: ev.Peer, Kind: ev.Kind, Size: ev.Size, Reason: ev.Reason}
		if !ev.From.IsZero() {
			rec.Key = ev.From.String()
		}
		if !ev.ID.IsZero() {
			rec.ID = ev.ID.String()
		}
		if !ev.CorrID.IsZero() {
			rec.CorrID = ev.CorrID.String()
		}
		if n.h.cfg.Audit.Bodies && ev.Kind != "" {
			rec.Body = kindJSON(ev.Fields)
		}
		n.audit.Record(rec)
	}
	if ob := n.ob; ob != nil && (ev.Type == comms.EventReceived || ev.Type == comms.EventDuplicate) {
		ob.Kick(ev.From)
	}
}

// observeOutbox records an outbox event in the audit log.
func (n *node) observeOutbox(ev outbox.Event) {
	e := ev.Entry
	n.auditOut(ev.Type, e.Peer, e.To, e.Kind, e.ID, e.CorrID, e.Payload, ev.Attempt, ev.Reason)
}

// auditSealed records a direct (not reliable) send.
func (n *node) auditSealed(s comms.Sealed, event string, attempt int, reason string) {
	n.auditOut(event, s.Peer.Name, s.Peer.ID, s.Kind, s.ID, s.CorrID, s.Payload, attempt, reason)
}

// auditOut records one step of an outgoing envelope.
func (n *node) auditOut(event, peer string, to identity.PeerID, kind string, id, corr identity.UUID, payload []byte, attempt int, reason string) {
	if n.audit == nil {
		return
	}
	rec := audit.Record{Dir: audit.DirOut, Event: event, Peer: peer, Key: to.String(), Kind: kind,
		ID: id.String(), Size: len(payload), Reason: reason, Attempt: attempt}
	if !corr.IsZero() {
		rec.CorrID = corr.String()
	}
	if n.h.cfg.Audit.Bodies {
		if env, err := wire.Decode(payload); err == nil {
			rec.Body = kindJSON(env.Kind)
		}
	}
	n.audit.Record(rec)
}

// deadLetterError reports a reliable send that became a dead letter at
// once (its peer is no longer trusted, say).
func deadLetterError(err error) error {
	var de *outbox.DeadError
	if errors.As(err, &de) {
		return &codedError{codePeerOffline, fmt.Sprintf("moved to the dead letters: %s", de.Reason)}
	}
	return err
}
