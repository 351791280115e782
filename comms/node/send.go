package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/card"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// sendSpec is one send as the node carries it out.
type sendSpec struct {
	peer     string
	kind     wire.Kind
	reliable bool          // through the outbox: stored first, retried until acked
	ttl      time.Duration // reliable: dead letter if not acked by then (0: outbox.default_ttl_secs)
	noWait   bool          // reliable: return once stored, without waiting for the first attempt
	guard    bool          // fanOut: ask the loop guard first (a broadcast copy is the agent's send)
	// call, if not nil, names the call this send belongs to (a send under
	// an idempotency key, callOf): the envelope id is derived from it and
	// the peer, the same at every retry of the call (comms.Router.SealCall).
	call []byte
	// sealed, if set, is called once the envelope is sealed, before it
	// is delivered; an error stops the send.
	sealed func(comms.Sealed) error
}

// sendOutcome is what a send did.
type sendOutcome struct {
	id        identity.UUID
	peer      trust.Peer
	delivery  string
	lastError string    // queued: why the last attempt failed
	behind    int       // queued behind this many of the peer's sends, not attempted
	heldUntil time.Time // queued, not attempted: the peer's breaker is open until then
}

// routerDeliverer makes the outbox's attempts on the Router.
type routerDeliverer struct {
	r *comms.Router
	// meup, if set, is told the outcome of every MEUP attempt and returns
	// the error the outbox gets (a peer that does not speak MEUP makes it
	// permanent).
	meup func(identity.PeerID, error) error
	// ackRTT, if set, is told the round trip of each acknowledged attempt.
	ackRTT func(time.Duration)
	// relayed, if set, holds the ids of the envelopes whose latest
	// attempt went through NATS (Node.relayed).
	relayed *sync.Map
}

func (d routerDeliverer) Deliver(ctx context.Context, a outbox.Attempt) error {
	start := time.Now()
	var relayed func()
	if d.relayed != nil {
		d.relayed.Delete(a.ID) // this attempt's route decides
		relayed = func() { d.relayed.Store(a.ID, struct{}{}) }
	}
	err := d.r.Deliver(ctx, comms.Delivery{To: a.To, ID: a.ID, Payload: a.Payload, WantAck: a.WantAck, Queued: a.Queued, Relayed: relayed})
	if err == nil && a.WantAck && d.ackRTT != nil {
		d.ackRTT(time.Since(start))
	}
	if errors.Is(err, comms.ErrUnknownPeer) {
		return outbox.Permanent(outbox.ReasonUnknownPeer, err)
	}
	if errors.Is(err, wire.ErrTooLarge) {
		// Sealed for a nats: peer it no longer fits: no retry helps.
		return outbox.Permanent(outbox.ReasonRejected, err)
	}
	if errors.Is(err, comms.ErrStoredInBroker) {
		return fmt.Errorf("%w: %w", outbox.ErrStored, err)
	}
	var off *comms.PeerOfflineError
	if errors.As(err, &off) && off.Reason == comms.OfflineRelayNotConnected {
		// This node's NATS connection is down (or not up yet, just
		// after a start): the peer did not fail.
		return fmt.Errorf("%w: %w", outbox.ErrLocal, err)
	}
	if a.Kind == wire.TypeMEUP && d.meup != nil && ctx.Err() == nil {
		return d.meup(a.To, err)
	}
	return err
}

// errOutboxNeedsStore is returned for a reliable send with no daemon and
// no durable store to keep it in.
var errOutboxNeedsStore = &Error{Code: CodeNoDaemon, Msg: "a reliable send needs the running daemon or store.mode = \"sqlite\" to keep it until it is acknowledged"}

// send seals s.kind for s.peer and sends it: directly (one attempt, as
// before the outbox existed) or reliably (stored, then retried).
func (n *Node) send(ctx context.Context, s sendSpec) (sendOutcome, error) {
	if s.reliable && n.ob == nil {
		// Without a running outbox the send is kept in the home's: a
		// home with none fails before an envelope (and its id) exists.
		if _, err := n.outboxStore(); err != nil {
			return sendOutcome{}, err
		}
	}
	var sealed comms.Sealed
	var err error
	if s.call != nil {
		sealed, err = n.r.SealCall(s.peer, s.kind, s.call)
	} else {
		sealed, err = n.r.Seal(s.peer, s.kind)
	}
	if err != nil {
		return sendOutcome{}, err
	}
	if s.reliable && sealed.Peer.Addr.Scheme == transport.SchemeNATS {
		// Reached only through NATS, where it goes sealed: one that does
		// not fit once sealed is refused now, before anything records
		// it, as an envelope too large to seal at all is, not queued to
		// be a dead letter at its first attempt.
		if err := n.r.CheckSealable(sealed.Peer.ID, sealed.ID, sealed.Payload); err != nil {
			return sendOutcome{}, Coded(err)
		}
	}
	if s.sealed != nil {
		if err := s.sealed(sealed); err != nil {
			return sendOutcome{}, err
		}
	}
	out := sendOutcome{id: sealed.ID, peer: sealed.Peer}
	n.sentSealed(sealed, s.kind, s.reliable) // slice B: the send record
	wantAck := sealed.Kind != wire.TypeResponse
	done := DeliveryAcked
	if !wantAck {
		done = DeliveryWritten
	}
	if !s.reliable {
		n.auditSealed(sealed, audit.EventSent, 1, "")
		start := time.Now()
		d := comms.Delivery{To: sealed.Peer.ID, ID: sealed.ID, Payload: sealed.Payload, WantAck: wantAck, SecondTry: true}
		if n.h.Config.NATS.Enabled() {
			d.Relayed = func() { n.relayed.Store(sealed.ID, struct{}{}) }
			defer n.relayed.Delete(sealed.ID) // after its last audit row
		}
		err := n.r.Deliver(ctx, d)
		if errors.Is(err, comms.ErrStoredInBroker) {
			// Its one attempt reached a broker that stored it (NATS
			// JetStream): not failed, the peer gets it when it is back.
			n.auditSealed(sealed, audit.EventStored, 1, "")
			n.sentEvent(sealed.ID, store.SentEventStored, 0, "")
			out.delivery, out.lastError = DeliveryStored, storedNote
			return out, nil
		}
		if err != nil {
			n.auditSealed(sealed, audit.EventRefused, 1, err.Error())
			n.countSend(sendFailed)
			n.sentEvent(sealed.ID, store.SentEventFailed, 0, err.Error())
			if sealed.Kind == wire.TypeRequest && s.sealed != nil && n.lc != nil {
				n.lc.unsent(sealed.ID) // nothing arrived: nothing to answer, time out or cancel
			}
			return out, err
		}
		n.sentEvent(sealed.ID, store.SentEventAcked, 0, "")
		n.countSend(done)
		if wantAck {
			n.metrics.ObserveRoundTrip(time.Since(start))
		}
		n.auditSealed(sealed, audit.EventAcked, 1, "") // responses: written
		out.delivery = done
		return out, nil
	}
	e := outbox.Entry{ID: sealed.ID, To: sealed.Peer.ID, Peer: sealed.Peer.Name, Kind: sealed.Kind, CorrID: sealed.CorrID, Payload: sealed.Payload}
	ttl := s.ttl
	if ttl == 0 {
		ttl = n.h.Config.Outbox.DefaultTTL()
	}
	if ttl > 0 {
		e.Expires = time.Now().Add(ttl)
	}
	if n.ob == nil {
		return n.sendReliableOnce(ctx, e, out, done)
	}
	// Wait for the first attempt only if it starts now: behind a failing
	// backlog or an open breaker it would not start within the caller's
	// patience (a peer's round stops at its first failure, so an envelope
	// behind one that keeps failing is not attempted at all). The wait is
	// bounded all the same: an attempt that starts now ends within
	// SendTimeout, and the breaker may open meanwhile.
	ps := n.ob.Peer(e.To)
	failing := ps.Queued > 0 && ps.Failures > 0
	wait := !s.noWait && !failing && ps.Breaker != outbox.BreakerOpen && !ps.NextAttempt.After(time.Now())
	_, t, err := n.ob.Enqueue(e)
	if errors.Is(err, outbox.ErrQueued) {
		// The same call made again (its idempotency key retried after a
		// crash cut the first short): its envelope is queued from then.
		out.delivery = DeliveryQueued
		return out, nil
	}
	if err != nil {
		n.sentEvent(e.ID, store.SentEventFailed, 0, err.Error())
		return out, err
	}
	out.delivery, out.lastError = DeliveryQueued, ps.LastError // behind a failing queue: why it fails
	if s.noWait {
		out.lastError = "" // not attempted yet, and no word on the peer's other sends
	}
	if !wait {
		if !s.noWait {
			out.behind = ps.Queued - ps.Stored // what a broker holds holds nothing back
			if ps.Breaker == outbox.BreakerOpen {
				out.heldUntil = ps.OpenUntil
			}
		}
		return out, nil
	}
	bound := time.NewTimer(n.SendTimeout())
	defer bound.Stop()
	select {
	case <-t.Attempted():
	case <-ctx.Done():
		return out, nil // still queued; the outbox keeps trying
	case <-bound.C:
		return out, nil
	case <-n.stopped:
		return out, nil // stored: the next start sends it
	}
	select {
	case <-t.Done():
		if err := t.Err(); err != nil {
			out.delivery = "" // a dead letter already: failed, not queued
			return out, Coded(err)
		}
		out.delivery, out.lastError = done, ""
	default:
		out.lastError = t.LastError()
		if t.Stored() {
			out.lastError = storedNote
		}
	}
	return out, nil
}

// storedNote is a queued send's note once a broker on the way (NATS
// JetStream) stored its envelope: it shows as stored_in_broker.
const storedNote = "stored in the broker (stored_in_broker); the peer has not acknowledged it yet"

// sendReliableOnce is a reliable send without a running outbox (no
// daemon): the envelope is stored in the home's outbox, attempted once,
// and left there for the daemon to retry if that attempt fails.
func (n *Node) sendReliableOnce(ctx context.Context, e outbox.Entry, out sendOutcome, done string) (sendOutcome, error) {
	st, err := n.outboxStore()
	if err != nil {
		return out, err
	}
	// Earlier envelopes for this peer still queued, or its breaker open:
	// this one waits its turn (order), for the daemon to send.
	waiting, err := queuedFor(st, e.To, time.Now(), n.outboxBounds())
	if err != nil {
		return out, err
	}
	e.Created = time.Now()
	if e, err = st.Add(e); errors.Is(err, outbox.ErrQueued) {
		out.delivery = DeliveryQueued // the same call again: queued from the first time
		return out, nil
	} else if err != nil {
		n.sentEvent(out.id, store.SentEventFailed, 0, err.Error())
		return out, err
	}
	if waiting != "" {
		out.delivery, out.lastError = DeliveryQueued, waiting
		return out, nil
	}
	err = n.r.Deliver(ctx, comms.Delivery{To: e.To, ID: e.ID, Payload: e.Payload, WantAck: e.Kind != wire.TypeResponse, SecondTry: true})
	switch {
	case err == nil:
		out.delivery = done
		n.sentEvent(e.ID, store.SentEventAcked, 0, "")
		return out, st.Delivered(e.ID)
	case errors.Is(err, comms.ErrUnknownPeer):
		reason := outbox.ReasonUnknownPeer + ": " + err.Error()
		if kerr := st.Kill(e.ID, reason, time.Now()); kerr != nil {
			return out, kerr
		}
		n.sentEvent(e.ID, store.SentEventDead, 0, reason)
		return out, err
	}
	n.sentEvent(e.ID, store.SentEventRetry, 1, err.Error())
	out.delivery, out.lastError = DeliveryQueued, err.Error()
	backoff, _ := n.h.Config.Outbox.BackoffDurations()
	if aerr := st.Attempted(e.ID, 1, time.Now().Add(backoff[0]), err.Error()); aerr != nil {
		return out, aerr
	}
	return out, nil
}

// queuedFor says why a new envelope to peer must wait behind the stored
// outbox ("" if it need not). A stored breaker is bounded as the daemon
// bounds it (outbox.Bounds): one written while the clock was far ahead
// holds the envelope no longer than the daemon would.
func queuedFor(st outbox.Store, peer identity.PeerID, now time.Time, bounds outbox.Bounds) (string, error) {
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
		b = bounds.Breaker(b, now)
		if b.Peer == peer && now.Before(b.OpenUntil) {
			return "the peer's circuit breaker is open until " + b.OpenUntil.Local().Format(time.RFC3339), nil
		}
	}
	return "", nil
}

// outboxStore returns the store of the home's outbox: the serving node's,
// or for a command without a daemon the home's database, opened on first
// use.
func (n *Node) outboxStore() (outbox.Store, error) {
	n.obMu.Lock()
	defer n.obMu.Unlock()
	if n.obStore != nil {
		return n.obStore, nil
	}
	db, err := n.homeDBLocked()
	if err != nil {
		if errors.Is(err, errMemoryHome) {
			return nil, errOutboxNeedsStore
		}
		return nil, err
	}
	n.obStore = db.Outbox()
	return n.obStore, nil
}

// errMemoryHome: the home keeps no database ([store] mode = "memory").
var errMemoryHome = errors.New("node: the home keeps no database")

// homeDBLocked opens the home's database for a node that does not serve
// it (a command run without a daemon), once. n.obMu must be held.
func (n *Node) homeDBLocked() (*store.Store, error) {
	if n.closing() {
		return nil, ErrClosed
	}
	if n.obDB != nil {
		return n.obDB, nil
	}
	if n.h.Config.Store.Mode == config.StoreMemory {
		return nil, errMemoryHome
	}
	st, err := store.Open(filepath.Join(n.h.Dir, DBFileName), store.Options{})
	if err != nil {
		return nil, storeError(err)
	}
	n.obDB = st
	return st, nil
}

// readDB opens the home's database read only, once, for a node that does
// not serve it: what the daemon stored, without changing anything. A home
// without a database yet gives fs.ErrNotExist; a memory-mode home
// errMemoryHome.
func (n *Node) readDB() (*store.Store, error) {
	n.obMu.Lock()
	defer n.obMu.Unlock()
	if n.closing() {
		return nil, ErrClosed
	}
	if n.roDB != nil {
		return n.roDB, nil
	}
	if n.h.Config.Store.Mode == config.StoreMemory {
		return nil, errMemoryHome
	}
	st, err := store.Open(filepath.Join(n.h.Dir, DBFileName), store.Options{ReadOnly: true, SearchText: recordText})
	if err != nil {
		return nil, storeError(err)
	}
	n.roDB = st
	return st, nil
}

// diskMail is the home's stored inbox for a node that does not serve it,
// read only: what the daemon received and has not had acknowledged. It
// is empty for a home without a database yet, and errMemoryHome for a
// memory-mode home.
func (n *Node) diskMail() (mailStore, error) {
	db, err := n.readDB()
	if errors.Is(err, fs.ErrNotExist) {
		return newMemMail(inbox.NewMailbox[comms.Item](1)), nil
	}
	if err != nil {
		return nil, err
	}
	return &durableMail{st: db, log: n.log}, nil
}

// outboxView is the outbox store to read for a node without a running
// outbox: the home's database read only (nil, with no error, for a home
// without a database yet).
func (n *Node) outboxView() (outbox.Store, error) {
	db, err := n.readDB()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, errMemoryHome):
		return nil, errorf(CodeNoDaemon, "no daemon is running for %s, and with [store] mode = \"memory\" its outbox and dead letters live in the daemon's memory: start it with meerkatd run --home %s", n.h.Dir, n.h.Dir)
	case err != nil:
		return nil, err
	}
	return db.Outbox(), nil
}

// newOutbox creates the outbox of a daemon node over st.
func newOutbox(h *Home, r *comms.Router, st outbox.Store, observe func(outbox.Event), onBreaker func(outbox.BreakerEvent), d routerDeliverer, log *slog.Logger) (*outbox.Outbox, error) {
	backoff, err := h.Config.Outbox.BackoffDurations()
	if err != nil {
		return nil, err
	}
	d.r = r
	return outbox.New(st, d, outbox.Options{
		Logger:          log,
		Backoff:         backoff,
		MaxAttempts:     h.Config.Outbox.MaxAttempts,
		BreakerFailures: h.Config.Outbox.BreakerFailures,
		BreakerOpen:     h.Config.Outbox.BreakerOpen(),
		MaxEntries:      h.Config.Outbox.MaxEntries,
		MaxBytes:        int64(h.Config.Outbox.MaxBytes),
		MaxDeadLetters:  h.Config.Outbox.DeadLettersMax,
		DeadLetterAge:   time.Duration(h.Config.Outbox.DeadLetterHours) * time.Hour,
		Observe:         observe,
		OnBreaker:       onBreaker,
	})
}

// sendKind sends kind to peer and reports it as the API does; call (nil
// for none) is sendSpec.call.
func (n *Node) sendKind(ctx context.Context, peer string, kind wire.Kind, opts SendOptions, call []byte) (Sent, sendOutcome, error) {
	return n.sendKindSealed(ctx, peer, kind, opts, call, nil)
}

// sendKindSealed is sendKind calling sealed (if not nil) once the
// envelope is sealed, before it is delivered.
func (n *Node) sendKindSealed(ctx context.Context, peer string, kind wire.Kind, opts SendOptions, call []byte, sealed func(comms.Sealed) error) (Sent, sendOutcome, error) {
	if n.closing() {
		return Sent{}, sendOutcome{}, Coded(ErrClosed)
	}
	if opts.TTL < 0 || opts.TTL > MaxTTL {
		return Sent{}, sendOutcome{}, errorf(CodeBadArgument, "ttl %s: want 0 to %s", opts.TTL, MaxTTL)
	}
	if !opts.Reliable && (opts.TTL != 0 || opts.NoWait) {
		return Sent{}, sendOutcome{}, errorf(CodeBadArgument, "a time-to-live and no-wait apply to reliable sends only")
	}
	if err := n.guardSend(peer); err != nil { // before anything is queued
		return Sent{}, sendOutcome{}, err
	}
	kind, err := withInterrupt(kind, opts.Interrupt) // classes
	if err != nil {
		return Sent{}, sendOutcome{}, err
	}
	if opts.TaskID != "" { // broadcast and tasks slice
		p, err := n.r.ResolvePeer(peer)
		if err != nil {
			return Sent{}, sendOutcome{}, Coded(err)
		}
		if kind, err = n.withTask(kind, p.ID, opts.TaskID); err != nil {
			return Sent{}, sendOutcome{}, err
		}
	}
	if !opts.Deadline.IsZero() && kind.Type() != wire.TypeRequest {
		return Sent{}, sendOutcome{}, errorf(CodeBadArgument, "a deadline applies to requests only")
	}
	out, err := n.send(ctx, sendSpec{peer: peer, kind: kind, reliable: opts.Reliable, ttl: opts.TTL, noWait: opts.NoWait, sealed: sealed, call: call})
	if out.id.IsZero() {
		return Sent{}, out, Coded(err)
	}
	return out.result(err), out, Coded(err)
}

// result is the Sent of a send that sealed its envelope and ended with
// err: a send that failed before any delivery shows as failed.
func (o sendOutcome) result(err error) Sent {
	s := Sent{ID: o.id.String(), Peer: o.peer.Name, Delivery: o.delivery, LastError: userText(o.lastError), Behind: o.behind, BreakerOpenUntil: timeOrNil(o.heldUntil)}
	if s.Delivery == "" && err != nil {
		s.Delivery = DeliveryFailed
	}
	return s
}

// jsonValue parses a JSON argument (empty: null).
func jsonValue(what string, raw json.RawMessage) (wire.Value, error) {
	if len(raw) == 0 {
		return wire.Null(), nil
	}
	v, err := wire.ParseJSON(raw)
	if err != nil {
		return wire.Value{}, errorf(CodeBadArgument, "%s is not valid JSON: %v", what, err)
	}
	return v, nil
}

// SendMessage implements [API].
func (n *Node) SendMessage(ctx context.Context, peer, body string, opts SendOptions) (Sent, error) {
	if opts.IdempotencyKey != "" { // slice B
		return n.idempotentSend(ctx, "send_message", sendArgs{Peer: peer, Body: body}, opts, func(o SendOptions, call []byte) (Sent, error) {
			return n.sendMessage(ctx, peer, body, o, call)
		})
	}
	return n.sendMessage(ctx, peer, body, opts, nil)
}

// sendMessage is SendMessage without a key, sealed under call (nil for
// none: sendSpec.call).
func (n *Node) sendMessage(ctx context.Context, peer, body string, opts SendOptions, call []byte) (Sent, error) {
	if opts.Wait != 0 {
		return Sent{}, errorf(CodeBadArgument, "waiting for responses applies to requests only")
	}
	if body == "" {
		return Sent{}, errorf(CodeBadArgument, "a message needs a body")
	}
	if !utf8.ValidString(body) {
		return Sent{}, errorf(CodeBadArgument, "the body is not valid UTF-8")
	}
	s, _, err := n.sendKind(ctx, peer, wire.Message(body), opts, call)
	return s, err
}

// SendRequest implements [API].
func (n *Node) SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts SendOptions) (Sent, error) {
	if opts.IdempotencyKey != "" { // slice B
		return n.idempotentSend(ctx, "send_request", sendArgs{Peer: peer, Intent: intent, Params: params}, opts, func(o SendOptions, call []byte) (Sent, error) {
			return n.sendRequest(ctx, peer, intent, params, o, call)
		})
	}
	return n.sendRequest(ctx, peer, intent, params, opts, nil)
}

// MaxIntentLen is the longest intent a request may name, in bytes: as
// long as an intent a card may list.
const MaxIntentLen = card.MaxIntentNameLen

// checkIntent checks the intent of a request to send: named, at most
// MaxIntentLen bytes of UTF-8 text on one line, with no control or
// format character (a tab, a right-to-left override, a zero-width
// space), no space at either end, and not one of the nodes' own
// (ReservedIntentPrefix).
func checkIntent(intent string) error {
	switch {
	case intent == "":
		return errorf(CodeBadArgument, "a request needs an intent")
	case len(intent) > MaxIntentLen:
		return errorf(CodeBadArgument, "an intent of %d bytes: at most %d", len(intent), MaxIntentLen)
	case !utf8.ValidString(intent):
		return errorf(CodeBadArgument, "the intent is not valid UTF-8")
	case strings.ContainsFunc(intent, func(r rune) bool { return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Cf) }):
		return errorf(CodeBadArgument, "the intent %q holds a control, format or line-break character", intent)
	case strings.TrimSpace(intent) != intent:
		return errorf(CodeBadArgument, "the intent %q starts or ends with a space", intent)
	case strings.HasPrefix(strings.ToLower(intent), ReservedIntentPrefix):
		return errorf(CodeBadArgument, "intent %q: intents starting with %q (in any letter case) are reserved for the nodes themselves", intent, ReservedIntentPrefix)
	}
	return nil
}

// sendRequest is SendRequest without a key, sealed under call (nil for
// none: sendSpec.call).
func (n *Node) sendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts SendOptions, call []byte) (Sent, error) {
	if err := checkIntent(intent); err != nil {
		return Sent{}, err
	}
	if opts.Wait < 0 {
		return Sent{}, errorf(CodeBadArgument, "wait must not be negative")
	}
	if err := n.checkDeadline(opts.Deadline); err != nil {
		return Sent{}, err
	}
	pv, err := jsonValue("params", params)
	if err != nil {
		return Sent{}, err
	}
	kind, sealed, err := n.lifecycleRequest(peer, intent, pv, opts.Deadline)
	if err != nil {
		return Sent{}, err
	}
	res, out, err := n.sendKindSealed(ctx, peer, kind, opts, call, sealed)
	if err != nil || opts.Wait <= 0 {
		return res, err
	}
	if err := queuedRequest(res, opts.Deadline); err != nil {
		return res, err
	}
	return n.awaitFinal(ctx, res, out.id, opts.Wait, opts.Deadline)
}

// queuedRequest is the error of a wait for the responses of request res
// when it went into the outbox, not to its peer: none can come yet.
func queuedRequest(res Sent, deadline time.Time) error {
	if res.Delivery != DeliveryQueued {
		return nil
	}
	if !deadline.IsZero() {
		return errorf(CodePeerOffline, "request %s is queued for retry (%s); once delivered, its response will arrive in the inbox, and if it is still queued at its deadline (%s) it becomes a dead letter", res.ID, res.LastError, deadline.UTC().Format(time.RFC3339))
	}
	return errorf(CodePeerOffline, "request %s is queued for retry (%s); its response will arrive in the inbox", res.ID, res.LastError)
}

// AwaitSent waits through api, up to wait, for the final response to
// request res, which api.SendRequest returned without waiting (so that
// its id could be shown first): AwaitResponses, except that a queued
// request has no response to wait for yet.
func AwaitSent(ctx context.Context, api API, res Sent, wait time.Duration, deadline time.Time) ([]Message, error) {
	if err := queuedRequest(res, deadline); err != nil {
		return nil, err
	}
	got, err := api.AwaitResponses(ctx, res.ID, wait, deadline)
	return got.Responses, err
}

// AwaitResponses implements [API].
func (n *Node) AwaitResponses(ctx context.Context, requestID string, wait time.Duration, deadline time.Time) (Sent, error) {
	if n.closing() {
		return Sent{}, Coded(ErrClosed)
	}
	id, err := identity.ParseUUID(requestID)
	if err != nil {
		return Sent{}, errorf(CodeBadArgument, "request id %q is not a UUID", requestID)
	}
	if wait <= 0 {
		return Sent{}, errorf(CodeBadArgument, "the wait must be positive")
	}
	peer, ok := n.r.RequestPeer(id)
	if !ok {
		return Sent{}, errorf(CodeUnknownRequest, "no request %s of this node is waiting for its final response: it was answered already, or this node did not send it", requestID)
	}
	p, _ := n.r.Trust().Lookup(peer) // "" if no longer trusted
	return n.awaitFinal(ctx, Sent{ID: requestID, Peer: p.Name, Delivery: DeliveryAcked}, id, wait, deadline)
}

// awaitFinal waits up to wait (at most MaxWait, and not past deadline if
// set) for the final response to request id, sent to the peer res.Peer
// names, adding the responses that come to res.Responses. Accepted
// responses are progress: the wait goes on until a final one.
func (n *Node) awaitFinal(ctx context.Context, res Sent, id identity.UUID, wait time.Duration, deadline time.Time) (Sent, error) {
	asked := wait
	wait = min(wait, MaxWait)
	byDeadline := !deadline.IsZero() && time.Until(deadline) < wait
	if byDeadline {
		wait = max(time.Until(deadline), 0)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		resp, err := n.r.AwaitResponse(wctx, id)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && byDeadline {
				return res, errorf(CodeTimedOut, "request %s: its deadline %s passed with no final response; it is timed out and the peer is told", id, deadline.UTC().Format(time.RFC3339))
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// peer_offline (exit 3) is the documented outcome of a
				// wait with no answer: the message says what was seen.
				return res, errorf(CodePeerOffline, "request %s: no final response within %s; the peer acknowledged the request, which stays open: a later response arrives in the inbox (meerkatd requests shows its state)", id, asked)
			}
			return res, Coded(err)
		}
		if len(res.Responses) < MaxWaitedResponses {
			res.Responses = append(res.Responses, toMessage(inbox.Entry[comms.Item]{Item: comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: resp, PeerName: res.Peer}}))
		}
		if s := resp.Kind.Status(); s == wire.StatusCompleted || s == wire.StatusFailed {
			return res, nil
		}
	}
}

// SendResponse implements [API]: it checks that the request was received
// from peer and, for a final answer, not answered yet. A reliable final
// answer counts as given once it is queued; the reservation is undone
// only if the send fails outright (nothing was queued, or it became a
// dead letter at once).
func (n *Node) SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts SendOptions) (Sent, error) {
	if opts.IdempotencyKey != "" { // slice B
		return n.idempotentSend(ctx, "send_response", sendArgs{Peer: peer, Request: requestID, Status: status, Params: result}, opts, func(o SendOptions, call []byte) (Sent, error) {
			return n.sendResponse(ctx, peer, requestID, status, result, o, call)
		})
	}
	return n.sendResponse(ctx, peer, requestID, status, result, opts, nil)
}

// sendResponse is SendResponse without a key, sealed under call (nil for
// none: sendSpec.call).
func (n *Node) sendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts SendOptions, call []byte) (Sent, error) {
	if opts.Wait != 0 {
		return Sent{}, errorf(CodeBadArgument, "waiting for responses applies to requests only")
	}
	if !wire.Status(status).Valid() {
		return Sent{}, errorf(CodeBadStatus, "status %q: want accepted, completed or failed", status)
	}
	rid, err := identity.ParseUUID(requestID)
	if err != nil {
		return Sent{}, errorf(CodeBadArgument, "%q is not a request id (a UUID)", requestID)
	}
	v, err := jsonValue("result", result)
	if err != nil {
		return Sent{}, err
	}
	if n.closing() {
		return Sent{}, Coded(ErrClosed)
	}
	p, err := n.r.ResolvePeer(peer)
	if err != nil {
		return Sent{}, Coded(err)
	}
	if n.mode != ModeServe {
		n.trackStored()
	}
	final := status != string(wire.StatusAccepted)
	restored, err := n.inbox.checkAnswer(rid, p.ID, final)
	if err != nil {
		return Sent{}, err
	}
	if restored {
		// What this process remembers began at its start: the send
		// record knows the final answers given before (by a daemon
		// since restarted, or a command run without one), after which
		// nothing more is sent.
		if err := n.answeredBefore(rid, p.ID, final); err != nil {
			return Sent{}, err
		}
	}
	sent, _, err := n.sendKind(ctx, p.ID.String(), wire.Response(rid, wire.Status(status), v), opts, call)
	if err != nil && final {
		n.inbox.unreserve(rid)
	}
	return sent, err
}

// answeredBefore fails with CodeAlreadyAnswered if the send record
// holds a final answer to request (received from peer) and marks it
// answered; else it records that none was given and returns nil. A
// record that cannot be read fails the answer (and takes back the mark a
// final answer made): better no answer now than a second final one.
func (n *Node) answeredBefore(request identity.UUID, peer identity.PeerID, final bool) error {
	st, err := n.sentStore()
	if err == nil {
		var done bool
		if done, err = st.Answered(peer, request); err == nil {
			n.inbox.settle(request, done)
			if done {
				return errorf(CodeAlreadyAnswered, "request %s already has a final response", request)
			}
			return nil
		}
	}
	if final {
		n.inbox.unreserve(request)
	}
	return Coded(err)
}

// trackStored records, once, the requests in the home's stored inbox, for
// a command run without a daemon: it may answer those.
func (n *Node) trackStored() {
	n.trackOnce.Do(func() {
		d, err := n.diskMail()
		if err != nil {
			return // a memory-mode home: no request received is known here
		}
		n.inbox.trackStoredRequests(d, n.log)
	})
}
