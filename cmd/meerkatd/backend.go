package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// backend is what the CLI commands act on: the running daemon through its
// control socket, or, with no daemon, a node in this process.
type backend interface {
	sendMessage(ctx context.Context, peer, body string, d deliveryOpts) (sendResult, error)
	sendRequest(ctx context.Context, peer, intent string, params json.RawMessage, wait time.Duration, d deliveryOpts) (sendResult, error)
	sendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, d deliveryOpts) (sendResult, error)
	inbox(ctx context.Context, after uint64, wait time.Duration, ack bool) ([]inboxItem, error)
	outbox(ctx context.Context) (outboxInfo, error)
	deadLetters(ctx context.Context) ([]deadLetterInfo, error)
	reviveDead(ctx context.Context, ids []string, all bool) (int, error)
	dropDead(ctx context.Context, ids []string, all bool) (int, error)
	status(ctx context.Context) (statusInfo, error)
	close()
}

// deliveryOpts say how a send is delivered.
type deliveryOpts struct {
	reliable bool          // through the outbox: stored first, retried until acked
	ttl      time.Duration // reliable: time-to-live (0: the configured default)
	noWait   bool          // reliable: return once stored
}

// sendResult is what a send reports.
type sendResult struct {
	ID        string      `json:"id"`
	Peer      string      `json:"peer"`
	Delivery  string      `json:"delivery"`             // "acked", "written" (responses) or "queued" (reliable, not yet acked)
	LastError string      `json:"last_error,omitempty"` // queued: why the last attempt failed
	Responses []inboxItem `json:"responses,omitempty"`  // send request --wait
}

// inboxItem is one received envelope as the CLI and control socket show it.
type inboxItem struct {
	Seq       uint64          `json:"seq,omitempty"`
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	From      string          `json:"from"`
	PeerName  string          `json:"peer,omitempty"`
	Received  time.Time       `json:"received"`
	Body      string          `json:"body,omitempty"`
	Intent    string          `json:"intent,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	InReplyTo string          `json:"in_reply_to,omitempty"`
	Status    string          `json:"status,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	// Fields holds the whole kind, unknown fields included.
	Fields json.RawMessage `json:"fields,omitempty"`
}

// statusInfo is what `meerkatd status` shows.
type statusInfo struct {
	Name      string            `json:"name"`
	PubKey    string            `json:"pubkey"`
	PeerUUID  string            `json:"peer_uuid"`
	Home      string            `json:"home"`
	Listen    []string          `json:"listen"`
	Peers     int               `json:"peers"`
	Inbox     int               `json:"inbox"`
	Accepted  uint64            `json:"accepted"`
	AcksSent  uint64            `json:"acks_sent"`
	Conns     int               `json:"connections"`
	Rejected  map[string]uint64 `json:"rejected"`
	Daemon    bool              `json:"daemon"`
	StartedAt time.Time         `json:"started_at,omitzero"`
	// Reliable sends (daemon only): queued, dead letters, and the peers
	// with something queued or a breaker that is not closed.
	Outbox      int             `json:"outbox"`
	DeadLetters int             `json:"dead_letters"`
	SendPeers   []peerSendState `json:"send_peers,omitempty"`
}

// Error codes shared by the control socket and the exit status.
const (
	codeUnknownPeer = "unknown_peer"
	codePeerOffline = "peer_offline"
	codeBadArgs     = "bad_args"
	codeNoDaemon    = "no_daemon"
	codePairFailed  = "pair_failed"
	codeInternal    = "internal"
)

// codedError carries an error code across the control socket.
type codedError struct {
	code string
	msg  string
}

func (e *codedError) Error() string { return e.msg }

// errorCode classifies an error for the control socket and exit status.
func errorCode(err error) string {
	var ce *codedError
	switch {
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, comms.ErrUnknownPeer):
		return codeUnknownPeer
	case errors.Is(err, comms.ErrPeerOffline):
		return codePeerOffline
	case errors.Is(err, errUsage), errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrBadValue),
		errors.Is(err, wire.ErrType), errors.Is(err, wire.ErrInvalidUTF8), errors.Is(err, wire.ErrTooLarge),
		errors.Is(err, wire.ErrTooDeep), errors.Is(err, wire.ErrUnsupported), errors.Is(err, wire.ErrDuplicateKey),
		errors.Is(err, identity.ErrBadUUID), errors.Is(err, comms.ErrUnknownRequest):
		return codeBadArgs
	}
	return codeInternal
}

func toInboxItem(seq uint64, it comms.Item) inboxItem {
	out := toInboxItemNoFields(seq, it)
	out.Fields, _ = it.Envelope.Kind.Value().MarshalJSON()
	return out
}

// toInboxItemNoFields is toInboxItem without the whole-kind copy.
func toInboxItemNoFields(seq uint64, it comms.Item) inboxItem {
	e := it.Envelope
	out := inboxItem{
		Seq:      seq,
		ID:       e.ID.String(),
		Kind:     e.Kind.Type(),
		From:     e.From.String(),
		PeerName: it.PeerName,
		Received: it.Received.UTC(),
		Body:     e.Kind.Body(),
		Intent:   e.Kind.Intent(),
		Status:   string(e.Kind.Status()),
	}
	if v, ok := e.Kind.Field("params"); ok {
		out.Params, _ = v.MarshalJSON()
	}
	if v, ok := e.Kind.Field("result"); ok {
		out.Result, _ = v.MarshalJSON()
	}
	if u, ok := e.Kind.InReplyTo(); ok {
		out.InReplyTo = u.String()
	}
	return out
}

// maxWaitedResponses bounds the responses `send request --wait` collects
// (a peer could send many "accepted" responses before the final one).
const maxWaitedResponses = 100

// localBackend runs the operations on a node in this process.
type localBackend struct {
	n      *node
	daemon bool
	start  time.Time
}

func (b *localBackend) close() {
	if !b.daemon {
		b.n.stop()
	}
}

func parseJSONArg(what string, raw json.RawMessage) (wire.Value, error) {
	if len(raw) == 0 {
		return wire.Null(), nil
	}
	v, err := wire.ParseJSON(raw)
	if err != nil {
		return wire.Value{}, &codedError{codeBadArgs, fmt.Sprintf("%s is not valid JSON: %v", what, err)}
	}
	return v, nil
}

// send runs one send on the local node and converts the outcome.
func (b *localBackend) send(ctx context.Context, peer string, kind wire.Kind, d deliveryOpts) (sendResult, sendOutcome, error) {
	out, err := b.n.send(ctx, sendSpec{peer: peer, kind: kind, reliable: d.reliable, ttl: d.ttl, noWait: d.noWait})
	if out.id.IsZero() {
		return sendResult{}, out, err
	}
	res := sendResult{ID: out.id.String(), Peer: out.peer.Name, Delivery: out.delivery, LastError: out.lastError}
	return res, out, err
}

func (b *localBackend) sendMessage(ctx context.Context, peer, body string, d deliveryOpts) (sendResult, error) {
	res, _, err := b.send(ctx, peer, wire.Message(body), d)
	return res, err
}

func (b *localBackend) sendRequest(ctx context.Context, peer, intent string, params json.RawMessage, wait time.Duration, d deliveryOpts) (sendResult, error) {
	pv, err := parseJSONArg("params", params)
	if err != nil {
		return sendResult{}, err
	}
	res, out, err := b.send(ctx, peer, wire.Request(intent, pv), d)
	if err != nil || wait <= 0 {
		return res, err
	}
	if out.delivery == deliveryQueued {
		return res, &codedError{codePeerOffline, fmt.Sprintf("request %s is queued for retry (%s); its response will arrive in the inbox", out.id, out.lastError)}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		resp, err := b.n.r.AwaitResponse(wctx, out.id)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return res, &codedError{codePeerOffline, fmt.Sprintf("request %s acked, but no final response within %s", out.id, wait)}
			}
			return res, err
		}
		if len(res.Responses) < maxWaitedResponses {
			res.Responses = append(res.Responses, toInboxItem(0, comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: resp, PeerName: out.peer.Name}))
		}
		if s := resp.Kind.Status(); s == wire.StatusCompleted || s == wire.StatusFailed {
			return res, nil
		}
	}
}

func (b *localBackend) sendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, d deliveryOpts) (sendResult, error) {
	rid, err := identity.ParseUUID(requestID)
	if err != nil {
		return sendResult{}, &codedError{codeBadArgs, fmt.Sprintf("request id %q is not a UUID", requestID)}
	}
	if !wire.Status(status).Valid() {
		return sendResult{}, &codedError{codeBadArgs, fmt.Sprintf("status %q: want accepted, completed or failed", status)}
	}
	rv, err := parseJSONArg("result", result)
	if err != nil {
		return sendResult{}, err
	}
	res, _, err := b.send(ctx, peer, wire.Response(rid, wire.Status(status), rv), d)
	if err != nil {
		return res, err
	}
	if status != string(wire.StatusAccepted) {
		b.n.inbox.markAnswered(rid) // so an MCP client sees it answered
	}
	return res, nil
}

func (b *localBackend) inbox(ctx context.Context, after uint64, wait time.Duration, ack bool) ([]inboxItem, error) {
	if !b.daemon {
		return nil, &codedError{codeNoDaemon, fmt.Sprintf("no daemon is running for %s: the inbox lives in the daemon (start it with: meerkatd run --home %s)", b.n.h.dir, b.n.h.dir)}
	}
	entries := b.n.mail.List(after, 0)
	if len(entries) == 0 && wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		entries, _ = b.n.mail.Wait(wctx, after, 0)
		cancel()
	}
	out := make([]inboxItem, 0, len(entries))
	var seqs []uint64
	for _, en := range entries {
		out = append(out, toInboxItem(en.Seq, en.Item))
		seqs = append(seqs, en.Seq)
	}
	if ack {
		b.n.mail.Ack(seqs...)
	}
	return out, nil
}

func (b *localBackend) status(ctx context.Context) (statusInfo, error) {
	h := b.n.h
	st := b.n.r.Stats()
	s := statusInfo{
		Name:     h.cfg.Name,
		PubKey:   h.kp.ID().String(),
		PeerUUID: h.kp.ID().UUID().String(),
		Home:     h.dir,
		Peers:    b.n.r.Trust().Len(),
		Inbox:    b.n.mail.Len(),
		Accepted: st.Accepted,
		AcksSent: st.AcksSent,
		Conns:    st.Connections,
		Rejected: st.Rejected,
		Daemon:   b.daemon,
	}
	if b.daemon {
		s.StartedAt = b.start.UTC()
	}
	if ob := b.n.ob; ob != nil {
		s.Outbox = ob.Len()
		dl, err := ob.DeadLetters()
		if err != nil {
			return s, err
		}
		s.DeadLetters = len(dl)
		for _, ps := range ob.Peers() {
			s.SendPeers = append(s.SendPeers, toPeerSendState(ps))
		}
	}
	for _, a := range b.n.addrs {
		s.Listen = append(s.Listen, a.String())
	}
	if !b.daemon {
		if ls, err := h.cfg.Resolve(h.dir); err == nil {
			for _, a := range ls.All() {
				s.Listen = append(s.Listen, a.String())
			}
		}
	}
	return s, nil
}
