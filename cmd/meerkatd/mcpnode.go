package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/mcpserver"
)

// maxTrackedRequests bounds the requests remembered for send_response
// checks; the oldest is forgotten first.
const maxTrackedRequests = 1 << 16

// recordingInbox is the node's Admitter: the mailbox, plus a record of the
// requests received, so that answers to unknown or already answered
// requests are refused with a clear error.
type recordingInbox struct {
	mail mailStore

	mu       sync.Mutex
	requests map[identity.UUID]*trackedRequest
	order    []identity.UUID
}

type trackedRequest struct {
	from     identity.PeerID
	answered bool // a final (completed or failed) response was sent
}

func newRecordingInbox(mail mailStore) *recordingInbox {
	return &recordingInbox{mail: mail, requests: map[identity.UUID]*trackedRequest{}}
}

func (ri *recordingInbox) Push(it comms.Item) error {
	if err := ri.mail.Push(it); err != nil {
		return err
	}
	ri.track(it)
	return nil
}

// PushAsync admits through the store's group commit when it has one (the
// durable inbox); the memory inbox admits at once.
func (ri *recordingInbox) PushAsync(it comms.Item) comms.Admission {
	a, ok := ri.mail.(interface {
		PushAsync(comms.Item) comms.Admission
	})
	if !ok {
		return admittedNow(ri.Push(it))
	}
	return &trackedAdmission{Admission: a.PushAsync(it), ri: ri, it: it}
}

// doneAdmission is an admission that already happened.
type doneAdmission struct{ err error }

// admitted is the outcome of every successful admission that already
// happened: one shared value, so the memory inbox allocates nothing per
// envelope for it.
var admitted comms.Admission = doneAdmission{}

// admittedNow returns the admission that already happened with outcome
// err.
func admittedNow(err error) comms.Admission {
	if err == nil {
		return admitted
	}
	return doneAdmission{err}
}

func (d doneAdmission) Ready() bool { return true }
func (d doneAdmission) Wait() error { return d.err }

// trackedAdmission records a request once its admission succeeded.
type trackedAdmission struct {
	comms.Admission
	ri *recordingInbox
	it comms.Item
}

func (t *trackedAdmission) Wait() error {
	err := t.Admission.Wait()
	if err == nil {
		t.ri.track(t.it)
	}
	return err
}

var _ comms.AsyncAdmitter = (*recordingInbox)(nil)

// track records a received request (also those found in a durable inbox
// at start-up).
func (ri *recordingInbox) track(it comms.Item) {
	if it.Type == comms.ItemExternal && it.Envelope.Kind.Type() == wire.TypeRequest {
		ri.mu.Lock()
		if _, ok := ri.requests[it.Envelope.ID]; !ok {
			if len(ri.order) >= maxTrackedRequests {
				delete(ri.requests, ri.order[0])
				ri.order = ri.order[1:]
			}
			ri.requests[it.Envelope.ID] = &trackedRequest{from: it.Envelope.From}
			ri.order = append(ri.order, it.Envelope.ID)
		}
		ri.mu.Unlock()
	}
}

// checkAnswer reports whether request id from peer may be answered now.
// For a final answer it also reserves the request (marks it answered), so
// two concurrent final answers cannot both pass; call unreserve if the
// answer then fails.
func (ri *recordingInbox) checkAnswer(id identity.UUID, peer identity.PeerID, final bool) error {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	r, ok := ri.requests[id]
	switch {
	case !ok || r.from != peer:
		return &mcpserver.Error{Code: mcpserver.CodeUnknownRequest, Msg: fmt.Sprintf("no request %s was received from this peer", id)}
	case r.answered:
		return &mcpserver.Error{Code: mcpserver.CodeAlreadyAnswered, Msg: fmt.Sprintf("request %s already has a final response", id)}
	}
	if final {
		r.answered = true
	}
	return nil
}

// unreserve undoes checkAnswer's reservation after a failed final answer.
func (ri *recordingInbox) unreserve(id identity.UUID) {
	ri.mu.Lock()
	if r, ok := ri.requests[id]; ok {
		r.answered = false
	}
	ri.mu.Unlock()
}

// markAnswered records a final answer sent by other means (the CLI).
func (ri *recordingInbox) markAnswered(id identity.UUID) {
	ri.mu.Lock()
	if r, ok := ri.requests[id]; ok {
		r.answered = true
	}
	ri.mu.Unlock()
}

// mcpNode implements mcpserver.Node on a node in this process.
type mcpNode struct {
	n *node
}

var _ mcpserver.Node = (*mcpNode)(nil)

func (m *mcpNode) Self() mcpserver.Self {
	h := m.n.h
	s := mcpserver.Self{Name: h.cfg.Name, PubKey: h.kp.ID().String(), PeerUUID: h.kp.ID().UUID().String(), Listen: []string{}}
	for _, a := range m.n.addrs {
		s.Listen = append(s.Listen, a.String())
	}
	return s
}

func (m *mcpNode) Peers(context.Context) ([]mcpserver.Peer, error) {
	var out []mcpserver.Peer
	for _, p := range m.n.r.Trust().Peers() {
		mp := mcpserver.Peer{Name: p.Name, PubKey: p.ID.String(), PeerUUID: p.ID.UUID().String(), Addr: p.Addr.String(), Breaker: outbox.BreakerClosed}
		if t := m.n.r.LastSeen(p.ID); !t.IsZero() {
			t = t.UTC()
			mp.LastSeen = &t
		}
		if ob := m.n.ob; ob != nil {
			ps := ob.Peer(p.ID)
			mp.Breaker, mp.Queued, mp.LastError = ps.Breaker, ps.Queued, ps.LastError
		}
		out = append(out, mp)
	}
	return out, nil
}

// mcpError maps node errors to the tool error codes.
func mcpError(err error) error {
	var me *mcpserver.Error
	var ce *codedError
	switch {
	case err == nil, errors.As(err, &me):
		return err
	case errors.Is(err, comms.ErrUnknownPeer):
		return &mcpserver.Error{Code: mcpserver.CodeUnknownPeer, Msg: err.Error()}
	case errors.Is(err, comms.ErrPeerOffline):
		return &mcpserver.Error{Code: mcpserver.CodePeerOffline, Msg: err.Error()}
	case errors.Is(err, outbox.ErrFull):
		return &mcpserver.Error{Code: mcpserver.CodeOutboxFull, Msg: err.Error() + "; see list_outbox (reliable: false sends without queueing)"}
	case errors.Is(err, wire.ErrTooLarge):
		return &mcpserver.Error{Code: mcpserver.CodeBodyTooLarge, Msg: "the envelope would exceed the 1 MiB limit"}
	case errors.Is(err, wire.ErrBadValue):
		return &mcpserver.Error{Code: mcpserver.CodeBadStatus, Msg: err.Error()}
	case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrType), errors.Is(err, wire.ErrInvalidUTF8),
		errors.Is(err, wire.ErrTooDeep), errors.Is(err, wire.ErrUnsupported), errors.Is(err, wire.ErrDuplicateKey):
		return &mcpserver.Error{Code: mcpserver.CodeBadArgument, Msg: err.Error()}
	case errors.As(err, &ce):
		// Errors of the node's send and outbox operations (a reliable send
		// that became a dead letter at once, bad dead-letter ids).
		switch ce.code {
		case codePeerOffline:
			return &mcpserver.Error{Code: mcpserver.CodePeerOffline, Msg: ce.msg}
		case codeUnknownPeer:
			return &mcpserver.Error{Code: mcpserver.CodeUnknownPeer, Msg: ce.msg}
		case codeBadArgs:
			return &mcpserver.Error{Code: mcpserver.CodeBadArgument, Msg: ce.msg}
		case codePairFailed:
			return &mcpserver.Error{Code: mcpserver.CodePairFailed, Msg: ce.msg}
		}
	}
	return err
}

func jsonValue(raw json.RawMessage) (wire.Value, error) {
	if len(raw) == 0 {
		return wire.Null(), nil
	}
	v, err := wire.ParseJSON(raw)
	if err != nil {
		return wire.Value{}, &mcpserver.Error{Code: mcpserver.CodeBadArgument, Msg: err.Error()}
	}
	return v, nil
}

// send sends kind to peer through the node's send path (audited; reliable
// sends go through the outbox).
func (m *mcpNode) send(ctx context.Context, peer string, kind wire.Kind, opts mcpserver.SendOptions) (mcpserver.Sent, error) {
	out, err := m.n.send(ctx, sendSpec{peer: peer, kind: kind, reliable: opts.Reliable, ttl: opts.TTL})
	if err != nil {
		return mcpserver.Sent{}, mcpError(err)
	}
	return mcpserver.Sent{ID: out.id.String(), Peer: out.peer.Name, Delivery: out.delivery, LastError: out.lastError}, nil
}

func (m *mcpNode) SendMessage(ctx context.Context, peer, body string, opts mcpserver.SendOptions) (mcpserver.Sent, error) {
	return m.send(ctx, peer, wire.Message(body), opts)
}

func (m *mcpNode) SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts mcpserver.SendOptions) (mcpserver.Sent, error) {
	v, err := jsonValue(params)
	if err != nil {
		return mcpserver.Sent{}, err
	}
	return m.send(ctx, peer, wire.Request(intent, v), opts)
}

// SendResponse checks that the request was received from peer and, for a
// final answer, not answered yet. A reliable final answer counts as given
// once it is queued; the reservation is undone only if the send fails
// outright (nothing was queued, or it became a dead letter at once).
func (m *mcpNode) SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts mcpserver.SendOptions) (mcpserver.Sent, error) {
	if !wire.Status(status).Valid() {
		return mcpserver.Sent{}, &mcpserver.Error{Code: mcpserver.CodeBadStatus, Msg: fmt.Sprintf("status %q: want accepted, completed or failed", status)}
	}
	rid, err := identity.ParseUUID(requestID)
	if err != nil {
		return mcpserver.Sent{}, &mcpserver.Error{Code: mcpserver.CodeUnknownRequest, Msg: fmt.Sprintf("%q is not a request id", requestID)}
	}
	v, err := jsonValue(result)
	if err != nil {
		return mcpserver.Sent{}, err
	}
	p, err := m.n.r.ResolvePeer(peer)
	if err != nil {
		return mcpserver.Sent{}, mcpError(err)
	}
	final := status != string(wire.StatusAccepted)
	if err := m.n.inbox.checkAnswer(rid, p.ID, final); err != nil {
		return mcpserver.Sent{}, err
	}
	sent, err := m.send(ctx, p.ID.String(), wire.Response(rid, wire.Status(status), v), opts)
	if err != nil && final {
		m.n.inbox.unreserve(rid)
	}
	return sent, err
}

// backend is the node's CLI backend, whose outbox operations the tools
// share.
func (m *mcpNode) backend() *localBackend { return &localBackend{n: m.n, daemon: true} }

func (m *mcpNode) Outbox(ctx context.Context) (mcpserver.Outbox, error) {
	info, err := m.backend().outbox(ctx)
	if err != nil {
		return mcpserver.Outbox{}, mcpError(err)
	}
	o := mcpserver.Outbox{Entries: make([]mcpserver.QueuedSend, 0, len(info.Entries)), Peers: make([]mcpserver.PeerSendState, 0, len(info.Peers))}
	for _, it := range info.Entries {
		o.Entries = append(o.Entries, mcpserver.QueuedSend{ID: it.ID, Peer: it.Peer, PubKey: it.Key, Kind: it.Kind, Created: it.Created,
			Attempts: it.Attempts, NextAttempt: timeOrNil(it.NextAttempt), Expires: timeOrNil(it.Expires), LastError: it.LastError, InFlight: it.InFlight})
	}
	for _, ps := range info.Peers {
		o.Peers = append(o.Peers, mcpserver.PeerSendState{Peer: ps.Peer, PubKey: ps.Key, Queued: ps.Queued, Breaker: ps.Breaker, Failures: ps.Failures,
			OpenUntil: timeOrNil(ps.OpenUntil), NextAttempt: timeOrNil(ps.NextAttempt), LastError: ps.LastError})
	}
	return o, nil
}

func (m *mcpNode) DeadLetters(ctx context.Context) ([]mcpserver.DeadLetter, error) {
	dl, err := m.backend().deadLetters(ctx)
	if err != nil {
		return nil, mcpError(err)
	}
	out := make([]mcpserver.DeadLetter, 0, len(dl))
	for _, d := range dl {
		out = append(out, mcpserver.DeadLetter{ID: d.ID, Peer: d.Peer, PubKey: d.Key, Kind: d.Kind, Created: d.Created,
			Attempts: d.Attempts, Reason: d.Reason, DiedAt: d.DiedAt})
	}
	return out, nil
}

func (m *mcpNode) RetryDeadLetters(ctx context.Context, ids []string, all bool) (int, error) {
	n, err := m.backend().reviveDead(ctx, ids, all)
	return n, mcpError(err)
}

func (m *mcpNode) PairOffer(ctx context.Context) (mcpserver.PairOffer, error) {
	info, _, err := m.n.pairing.open(0, "")
	if err != nil {
		return mcpserver.PairOffer{}, mcpError(err)
	}
	return mcpserver.PairOffer{Line: info.Line, Expires: info.Expires}, nil
}

func (m *mcpNode) PairAccept(ctx context.Context, line, name string) (mcpserver.Paired, error) {
	p, err := m.n.accept(ctx, line, name)
	if err != nil {
		return mcpserver.Paired{}, mcpError(err)
	}
	return mcpserver.Paired{Name: p.Name, Key: p.Key, Addr: p.Addr}, nil
}

// timeOrNil is t, or nil for the zero time (JSON null).
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toMessage(en inbox.Entry[comms.Item]) mcpserver.Message {
	it := toInboxItemNoFields(en.Seq, en.Item)
	m := mcpserver.Message{
		Seq: it.Seq, ID: it.ID, Kind: it.Kind, From: it.From, Peer: it.PeerName, Received: it.Received,
		Body: it.Body, Intent: it.Intent, RequestID: it.InReplyTo, Status: it.Status,
	}
	if it.Params != nil {
		m.Params = it.Params
	}
	if it.Result != nil {
		m.Result = it.Result
	}
	return m
}

// pendingCount counts unacknowledged messages and requests.
func pendingCount(entries []inbox.Entry[comms.Item]) int {
	n := 0
	for _, en := range entries {
		if k := en.Item.Envelope.Kind.Type(); k == wire.TypeMessage || k == wire.TypeRequest {
			n++
		}
	}
	return n
}

func (m *mcpNode) Receive(ctx context.Context, q mcpserver.Query) (mcpserver.Batch, error) {
	var from *identity.PeerID
	if q.From != "" {
		p, err := m.n.r.ResolvePeer(q.From)
		if err != nil {
			return mcpserver.Batch{}, mcpError(err)
		}
		from = &p.ID
	}
	var deadline <-chan time.Time
	if q.Wait > 0 {
		t := time.NewTimer(q.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		changed := m.n.mail.Changed()
		b := mcpserver.Batch{Cursor: q.After, Pending: m.n.mail.Pending(), Messages: []mcpserver.Message{}}
		size := 0
		// Read the inbox a page at a time after the cursor: a durable
		// inbox is not loaded whole for one call.
	scan:
		for {
			page := m.n.mail.List(b.Cursor, receivePage)
			for _, en := range page {
				if !matches(en.Item, q, from) {
					b.Cursor = en.Seq // the cursor passes items the filters skip too
					continue
				}
				if q.Limit > 0 && len(b.Messages) == q.Limit || size >= maxBatchBytes {
					break scan // the cursor stays at the last item returned
				}
				msg := toMessage(en)
				size += itemSize(msg)
				b.Messages = append(b.Messages, msg)
				b.Cursor = en.Seq
			}
			if len(page) < receivePage {
				break
			}
		}
		if len(b.Messages) > 0 || q.Wait <= 0 {
			return b, nil
		}
		select {
		case <-changed:
			if m.n.closing() {
				b.TimedOut = true
				return b, nil
			}
		case <-deadline:
			b.TimedOut = true
			return b, nil
		case <-ctx.Done():
			return mcpserver.Batch{}, ctx.Err()
		}
	}
}

// receivePage is how many inbox items Receive reads at a time.
const receivePage = 256

// maxBatchBytes bounds one receive batch (roughly, by content size); a
// batch always holds at least one item, and the cursor lets the client
// page through the rest.
const maxBatchBytes = 4 << 20

func itemSize(m mcpserver.Message) int {
	n := 256 + len(m.Body) + len(m.Intent)
	for _, v := range []any{m.Params, m.Result} {
		if raw, ok := v.(json.RawMessage); ok {
			n += len(raw)
		}
	}
	return n
}

func matches(it comms.Item, q mcpserver.Query, from *identity.PeerID) bool {
	e := it.Envelope
	if len(q.Kinds) > 0 && !slices.Contains(q.Kinds, e.Kind.Type()) {
		return false
	}
	if from != nil && e.From != *from {
		return false
	}
	if q.RequestID != "" {
		u, ok := e.Kind.InReplyTo()
		if !ok || e.Kind.Type() != wire.TypeResponse || u.String() != q.RequestID {
			return false
		}
	}
	return true
}

func (m *mcpNode) Ack(_ context.Context, ids []string, upTo uint64, filter mcpserver.Query) (int, int, error) {
	var from *identity.PeerID
	if filter.From != "" {
		p, err := m.n.r.ResolvePeer(filter.From)
		if err != nil {
			return 0, 0, mcpError(err)
		}
		from = &p.ID
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[strings.ToLower(id)] = true
	}
	var seqs []uint64
	for _, en := range m.n.mail.List(0, 0) {
		byID := want[en.Item.Envelope.ID.String()]
		// up_to acknowledges only what a read with the same filters
		// could have shown, never items a filtered read skipped.
		byCursor := en.Seq <= upTo && matches(en.Item, filter, from)
		if byID || byCursor {
			seqs = append(seqs, en.Seq)
		}
	}
	acked := m.n.mail.Ack(seqs...)
	return acked, m.n.mail.Pending(), nil
}
