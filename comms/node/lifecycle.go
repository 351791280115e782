package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/transport"
)

// LifecycleAPI is the part of [API] that follows the requests this node
// sends: their deadlines, cancels and final answers.
type LifecycleAPI interface {
	// CancelRequest cancels an open request this node sent: it becomes
	// cancelled here and the peer is told with a meerkat.cancel request
	// (reliable). reason is an optional note for the peer, at most
	// MaxCancelNote bytes. It needs the running node.
	// opts may carry an IdempotencyKey (nothing else): a retry with it
	// returns the first call's result.
	CancelRequest(ctx context.Context, requestID, reason string, opts SendOptions) (Cancelled, error)
	// Requests lists the requests this node sent, newest first, with
	// their states. It needs the running node.
	Requests(ctx context.Context, q RequestQuery) ([]SentRequest, error)
}

// Request states of a [SentRequest].
const (
	RequestOpen      = store.RequestOpen      // waiting for a final response
	RequestAnswered  = store.RequestAnswered  // a final response arrived while it was open
	RequestTimedOut  = store.RequestTimedOut  // its deadline passed first; the peer was told
	RequestCancelled = store.RequestCancelled // cancelled here; the peer was told
)

// Cancel reasons in a meerkat.cancel request and in [Cancellation].
const (
	CancelReasonCancelled = "cancelled" // the requester cancelled it
	CancelReasonDeadline  = "deadline"  // its deadline passed
)

// Reserved request intents the node handles itself.
const (
	// IntentCancel cancels a request the receiver holds from the sender:
	// params {"request_id": UUID, "reason": "cancelled"|"deadline",
	// "note": text (optional)}.
	IntentCancel = "meerkat.cancel"
	// ReservedIntentPrefix starts every intent the nodes reserve; an
	// agent cannot send a request with such an intent.
	ReservedIntentPrefix = "meerkat."
)

// Limits of the request lifecycle.
const (
	// MaxCancelNote bounds the note of a cancel, in bytes.
	MaxCancelNote = 256
	// maxSentRequests bounds the sent requests remembered (the oldest
	// closed go first, then the oldest open).
	maxSentRequests = 1 << 16
	// maxHeldCancels bounds the cancellations remembered for held
	// requests (the oldest go first).
	maxHeldCancels = maxTrackedRequests
	// maxCancelIDs bounds the meerkat.cancel requests whose answers this
	// node swallows (the agent did not send them).
	maxCancelIDs = 4096
	// cancelAnswerQueue bounds the answers to received cancels waiting
	// to be sent; when full, an answer is dropped (and logged): the
	// requester does not depend on it.
	cancelAnswerQueue = 256
	// lifecyclePruneInterval is how often closed sent requests past
	// agent.sent_history_hours are deleted.
	lifecyclePruneInterval = time.Hour
)

// CodeTimedOut is the error code of a SendRequest with Wait whose
// request's deadline passed before a final response.
const CodeTimedOut = "timed_out"

// SentRequest is one request this node sent, as Requests shows it.
type SentRequest struct {
	ID       string     `json:"id"`
	Peer     string     `json:"peer"`   // the peer's trust-list name when sent
	PubKey   string     `json:"pubkey"` // the peer's key
	Intent   string     `json:"intent"`
	Sent     time.Time  `json:"sent"`
	Deadline *time.Time `json:"deadline"` // null: none
	// State is open, answered, timed_out or cancelled; StateAt when it
	// became so.
	State   string    `json:"state"`
	StateAt time.Time `json:"state_at"`
	Note    string    `json:"note,omitempty"` // cancelled: the note sent with the cancel
	// ResponseID and FinalStatus name the first final response that
	// arrived, also one arriving after a timeout or cancel (it is in
	// the inbox like any response; the state stays).
	ResponseID  string `json:"response_id,omitempty"`
	FinalStatus string `json:"final_status,omitempty"`
}

// RequestQuery selects sent requests for Requests.
type RequestQuery struct {
	States []string `json:"states,omitempty"` // only these states (empty: all)
	Peer   string   `json:"peer,omitempty"`   // only to this peer (name, key or UUID)
	Limit  int      `json:"limit,omitempty"`  // at most this many (0: 100; at most MaxBatchItems)
}

// Cancelled is what CancelRequest returns: the request, now cancelled,
// and the meerkat.cancel request sent to tell the peer.
type Cancelled struct {
	Request SentRequest `json:"request"`
	Cancel  *Sent       `json:"cancel,omitempty"` // the meerkat.cancel sent to the peer (nil when Withdrawn)
	// Withdrawn is true when the request was still queued in the outbox
	// (its peer away): it is a dead letter now (reason cancelled), the
	// peer never got it, and no cancel was sent.
	Withdrawn bool `json:"withdrawn,omitempty"`
	// Replayed is true when an idempotency key used before returned the
	// first call's result: nothing was done again.
	Replayed bool `json:"replayed,omitempty"`
}

// Cancellation is shown on a held request its sender cancelled
// (Message.Cancelled): when the cancel arrived, why ("cancelled" or
// "deadline") and the sender's note (its text, untrusted).
type Cancellation struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Note   string    `json:"note,omitempty"`
}

// wireDeadline is the signed request field carrying a deadline (RFC 3339
// UTC text), sent only to peers known to run meerkatd.
const wireDeadline = "meerkat_deadline"

// ParseDeadline reads a deadline as the CLI and MCP take it: an RFC 3339
// time, or a duration from now ("30s", "5m", "1h30m"). It checks only the
// form; SendRequest checks that it is in the future and within MaxTTL.
func ParseDeadline(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("empty deadline")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("deadline %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (30s, 5m)", s)
	}
	// A duration of 0 or less, or above MaxTTL, is a time the node
	// refuses (CodeBadArgument), as it refuses such a time given as
	// RFC 3339.
	return now.Add(d), nil
}

// ParseSince reads a point in the past as the CLI takes it (audit
// --since, search --since and --until): a duration back from now (1h,
// 30m) or an RFC 3339 time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("duration %s is negative", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (1h, 30m) nor an RFC 3339 time", s)
}

// formatWireDeadline is t as meerkat_deadline carries it: RFC 3339 in
// UTC, to the millisecond.
func formatWireDeadline(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
}

// parseWireDeadline reads a peer's meerkat_deadline field: RFC 3339
// text, nothing else, within the years 1 to 9999.
func parseWireDeadline(v wire.Value) (time.Time, bool) {
	s, ok := v.Text()
	if !ok || len(s) > 64 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// lifecycleStore keeps sent requests and held cancellations: the home's
// SQLite store, or memory ([store] mode = "memory").
type lifecycleStore interface {
	PutSentRequest(r store.SentRequest, max int) error
	MoveSentRequest(id, from, to string, at time.Time, note string) (bool, error)
	DropSentRequest(id string) error
	AnswerSentRequest(id, responseID, status string, at time.Time) (bool, error)
	PutHeldCancel(c store.HeldCancel, max int) (bool, error)
	PruneRequests(closedBefore, cancelsBefore time.Time) (int, error)
	SentRequest(id string) (store.SentRequest, bool, error)
	OpenDeadlines() ([]store.SentRequest, error)
	SentRequests(q store.SentRequestQuery) ([]store.SentRequest, error)
	HeldCancel(sender identity.PeerID, id string) (store.HeldCancel, bool, error)
}

var _ lifecycleStore = (*store.Store)(nil)

// dueRequest is an open request with a deadline.
type dueRequest struct {
	peer     identity.PeerID
	deadline time.Time
}

// cancelAnswer is an answer to a received meerkat.cancel, waiting to be
// sent.
type cancelAnswer struct {
	peer   identity.PeerID
	id     identity.UUID // the meerkat.cancel request's id
	status wire.Status
	result wire.Value
}

// lifecycle runs the request lifecycle of a serving node. Its methods
// are safe for concurrent use.
type lifecycle struct {
	n      *Node
	st     lifecycleStore
	speaks func(identity.PeerID) bool // the peer verifies meerkat_deadline
	now    func() time.Time
	kick   chan struct{}     // 1-buffered: the earliest deadline may have changed
	answer chan cancelAnswer // bounded (cancelAnswerQueue)

	mu       sync.Mutex
	due      map[string]dueRequest // open requests with a deadline, by id text
	cancels  map[identity.UUID]bool
	cancelsQ []identity.UUID // cancels' ids, oldest first
}

func newLifecycle(n *Node, st lifecycleStore) (*lifecycle, error) {
	lc := &lifecycle{n: n, st: st, speaks: n.speaksMeerkat, now: time.Now,
		kick: make(chan struct{}, 1), answer: make(chan cancelAnswer, cancelAnswerQueue),
		due: map[string]dueRequest{}, cancels: map[identity.UUID]bool{}}
	open, err := st.OpenDeadlines()
	if err != nil {
		return nil, fmt.Errorf("read open requests: %w", err)
	}
	for _, r := range open {
		lc.due[r.ID] = dueRequest{peer: r.Recipient, deadline: r.Deadline}
	}
	return lc, nil
}

// start runs the deadline and answer loops until ctx ends.
func (lc *lifecycle) start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		lc.deadlineLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		lc.answerLoop(ctx)
	}()
}

// deadlineLoop times out open requests whose deadline passed, waking at
// the earliest deadline or when a new one is added; it also prunes old
// closed requests.
func (lc *lifecycle) deadlineLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	prune := lc.now()
	for {
		next := lc.expire(ctx)
		if now := lc.now(); !now.Before(prune) {
			hist := lc.n.h.Config.Agent.SentHistory()
			if _, err := lc.st.PruneRequests(now.Add(-hist), now.Add(-MaxTTL)); err != nil && ctx.Err() == nil {
				lc.n.log.Warn("request lifecycle: pruning failed", "err", err)
			}
			prune = now.Add(lifecyclePruneInterval)
		}
		wait := time.Until(prune)
		if !next.IsZero() {
			wait = min(wait, next.Sub(lc.now()))
		}
		t.Reset(max(wait, 0))
		select {
		case <-t.C:
		case <-lc.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// expire times out the requests due now and returns the earliest
// deadline still ahead (zero if none).
func (lc *lifecycle) expire(ctx context.Context) time.Time {
	now := lc.now()
	var fire []string
	var next time.Time
	lc.mu.Lock()
	for id, d := range lc.due {
		if !d.deadline.After(now) {
			fire = append(fire, id)
		} else if next.IsZero() || d.deadline.Before(next) {
			next = d.deadline
		}
	}
	lc.mu.Unlock()
	for _, id := range fire {
		lc.timeOut(ctx, id, now)
	}
	return next
}

// timeOut marks request id timed out if it is still open, then tells
// the peer and the agent.
func (lc *lifecycle) timeOut(ctx context.Context, id string, now time.Time) {
	lc.mu.Lock()
	d, ok := lc.due[id]
	lc.mu.Unlock()
	if !ok {
		return
	}
	moved, err := lc.st.MoveSentRequest(id, RequestOpen, RequestTimedOut, now, "")
	if err != nil {
		if ctx.Err() == nil {
			lc.n.log.Warn("request lifecycle: cannot mark a request timed out", "id", id, "err", err)
		}
		return // tried again at the next wake
	}
	lc.forgetDue(id)
	if !moved {
		return // answered or cancelled meanwhile
	}
	name := lc.peerName(d.peer)
	if lc.withdraw(d.peer, id, outbox.ReasonDeadline+": the request's deadline passed before it could be delivered") {
		// Still queued: the peer never had it, so nothing to tell it.
		lc.n.raiseNotice(Notice{Event: NoticeRequestTimedOut, Peer: name, ID: id,
			Text: fmt.Sprintf("request %s to %s timed out: its deadline %s passed before it could be delivered; it is a dead letter now, and %s never got it", id, name, d.deadline.UTC().Format(time.RFC3339), name)})
		return
	}
	lc.n.raiseNotice(Notice{Event: NoticeRequestTimedOut, Peer: name, ID: id,
		Text: fmt.Sprintf("request %s to %s timed out: its deadline %s passed with no final response; %s was told", id, name, d.deadline.UTC().Format(time.RFC3339), name)})
	if _, err := lc.sendCancel(ctx, d.peer, id, CancelReasonDeadline, "", true); err != nil && ctx.Err() == nil {
		lc.n.log.Warn("request lifecycle: cannot tell the peer a request timed out", "id", id, "peer", name, "err", err)
	}
}

// withdraw moves request id, if it is still queued in the outbox for
// peer and not being attempted, to the dead letters with reason, and
// reports whether the peer cannot have it: moved, or a dead letter
// already that was never attempted (it expired while the peer's breaker
// was open, say). A dead letter that was attempted may have reached the
// peer (its ack lost): the peer is told then.
func (lc *lifecycle) withdraw(peer identity.PeerID, id, reason string) bool {
	u, err := identity.ParseUUID(id)
	if err != nil || lc.n.ob == nil {
		return false
	}
	// A peer reached through NATS may have it in the broker's stream
	// already (the outbox knows only of attempts since this node
	// started): the cancel must follow it.
	if p, ok := lc.n.r.Trust().Lookup(peer); !ok || p.NATS || p.Addr.Scheme == transport.SchemeNATS {
		return false
	}
	if lc.n.ob.Withdraw(peer, u, reason) {
		return true
	}
	dead, err := lc.n.ob.DeadLetters()
	return err == nil && slices.ContainsFunc(dead, func(d outbox.DeadLetter) bool { return d.ID == u && d.Attempts == 0 })
}

func (lc *lifecycle) forgetDue(id string) {
	lc.mu.Lock()
	delete(lc.due, id)
	lc.mu.Unlock()
}

func (lc *lifecycle) peerName(id identity.PeerID) string {
	if p, err := lc.n.r.ResolvePeer(id.String()); err == nil {
		return p.Name
	}
	return id.Short()
}

// sendCancel sends a meerkat.cancel for request id to peer, reliably.
func (lc *lifecycle) sendCancel(ctx context.Context, peer identity.PeerID, id, reason, note string, noWait bool) (Sent, error) {
	params := []wire.Member{{Key: "request_id", Value: wire.Text(id)}, {Key: "reason", Value: wire.Text(reason)}}
	if note != "" {
		params = append(params, wire.Member{Key: "note", Value: wire.Text(note)})
	}
	pv, err := wire.Map(params...)
	if err != nil {
		return Sent{}, err
	}
	spec := sendSpec{peer: peer.String(), kind: wire.Request(IntentCancel, pv), reliable: true, noWait: noWait,
		sealed: func(s comms.Sealed) error { lc.rememberCancel(s.ID); return nil }}
	out, err := lc.n.send(ctx, spec)
	if out.id.IsZero() {
		return Sent{}, Coded(err)
	}
	return out.result(err), Coded(err)
}

// rememberCancel notes the id of a meerkat.cancel this node sent: its
// answer is the node's, not the agent's.
func (lc *lifecycle) rememberCancel(id identity.UUID) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.cancelsQ) >= maxCancelIDs {
		delete(lc.cancels, lc.cancelsQ[0])
		lc.cancelsQ = lc.cancelsQ[1:]
	}
	lc.cancels[id] = true
	lc.cancelsQ = append(lc.cancelsQ, id)
}

// sent records a request about to be delivered (before the peer can
// answer it) and, if it has a deadline, schedules its timeout.
func (lc *lifecycle) sent(s comms.Sealed, intent string, deadline time.Time) error {
	now := lc.now()
	r := store.SentRequest{ID: s.ID.String(), Recipient: s.Peer.ID, Peer: s.Peer.Name, Intent: intent,
		Created: now, Deadline: deadline, State: RequestOpen, Updated: now}
	if err := lc.st.PutSentRequest(r, maxSentRequests); err != nil {
		return fmt.Errorf("record the request: %w", err)
	}
	if !deadline.IsZero() {
		lc.mu.Lock()
		lc.due[r.ID] = dueRequest{peer: s.Peer.ID, deadline: deadline}
		lc.mu.Unlock()
		select {
		case lc.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// unsent forgets request id, whose only delivery failed: nothing arrived,
// so there is nothing to time out, answer or cancel.
func (lc *lifecycle) unsent(id identity.UUID) {
	lc.forgetDue(id.String())
	if err := lc.st.DropSentRequest(id.String()); err != nil {
		lc.n.log.Warn("a request whose delivery failed stays recorded as open", "id", id, "err", err)
	}
}

// consumes reports whether a response answers a meerkat.cancel this
// node sent: the node consumes those (they are not stored).
func (lc *lifecycle) consumes(it comms.Item) bool {
	if it.Type != comms.ItemExternal || it.Envelope.Kind.Type() != wire.TypeResponse {
		return false
	}
	id, ok := it.Envelope.Kind.InReplyTo()
	if !ok {
		return false
	}
	lc.mu.Lock()
	ours := lc.cancels[id]
	lc.mu.Unlock()
	if ours {
		if it.Envelope.Kind.Status() == wire.StatusFailed {
			lc.n.log.Info("request lifecycle: a peer refused a cancel", "cancel", id.String(), "peer", it.PeerName)
		}
		return true
	}
	return false
}

// answered records a response stored in the inbox: a final one answers
// its request (if open; a late one is noted all the same).
func (lc *lifecycle) answered(it comms.Item) {
	if it.Type != comms.ItemExternal || it.Envelope.Kind.Type() != wire.TypeResponse {
		return
	}
	s := it.Envelope.Kind.Status()
	if s != wire.StatusCompleted && s != wire.StatusFailed {
		return // accepted: progress, the request stays open
	}
	id, ok := it.Envelope.Kind.InReplyTo()
	if !ok {
		return
	}
	if _, err := lc.st.AnswerSentRequest(id.String(), it.Envelope.ID.String(), string(s), lc.now()); err != nil {
		lc.n.log.Warn("request lifecycle: cannot record a final response", "id", id.String(), "err", err)
		return
	}
	lc.forgetDue(id.String())
}

// cancelParams are a meerkat.cancel request's params.
type cancelParams struct {
	RequestID identity.UUID
	Reason    string
	Note      string
}

// parseCancelParams reads a meerkat.cancel request's params (a peer's:
// every field checked).
func parseCancelParams(v wire.Value) (cancelParams, error) {
	var p cancelParams
	b, err := v.MarshalJSON()
	if err != nil {
		return p, errors.New("params are not JSON")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return p, errors.New("params must be an object")
	}
	text := func(name string) (string, error) {
		r, ok := raw[name]
		if !ok {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return "", fmt.Errorf("%s must be text", name)
		}
		return s, nil
	}
	id, err := text("request_id")
	if err != nil {
		return p, err
	}
	if p.RequestID, err = identity.ParseUUID(id); err != nil {
		return p, errors.New("request_id must be a request id (UUID)")
	}
	if p.Reason, err = text("reason"); err != nil {
		return p, err
	}
	if p.Reason != CancelReasonCancelled && p.Reason != CancelReasonDeadline {
		return p, errors.New(`reason must be "cancelled" or "deadline"`)
	}
	if p.Note, err = text("note"); err != nil {
		return p, err
	}
	if len(p.Note) > MaxCancelNote || !utf8.ValidString(p.Note) {
		return p, fmt.Errorf("note must be UTF-8 text of at most %d bytes", MaxCancelNote)
	}
	return p, nil
}

// handle takes a reserved request the node answers itself: a
// meerkat.cancel. It reports whether it took it; err is an admission
// failure (not acknowledged: the sender retries).
func (lc *lifecycle) handle(it comms.Item) (bool, error) {
	e := it.Envelope
	if it.Type != comms.ItemExternal || e.Kind.Type() != wire.TypeRequest || e.Kind.Intent() != IntentCancel {
		return false, nil
	}
	p, err := parseCancelParams(e.Kind.Params())
	if err == nil && !lc.n.inbox.holds(p.RequestID, e.From) {
		err = fmt.Errorf("no request %s from you is held here", p.RequestID)
	}
	if err != nil {
		lc.queueAnswer(cancelAnswer{peer: e.From, id: e.ID, status: wire.StatusFailed, result: resultValue("error", err.Error())})
		return true, nil
	}
	fresh, err := lc.st.PutHeldCancel(store.HeldCancel{Sender: e.From, ID: p.RequestID.String(), At: lc.now(), Reason: p.Reason, Note: p.Note}, maxHeldCancels)
	if err != nil {
		return true, err
	}
	if fresh {
		what := "cancelled it"
		if p.Reason == CancelReasonDeadline {
			what = "gave up on it: its deadline passed"
		}
		lc.n.raiseNotice(Notice{Event: NoticeRequestCancelled, Peer: it.PeerName, ID: p.RequestID.String(),
			Text: fmt.Sprintf("%s %s (request %s); answering it is still allowed, but %s will not wait for it", it.PeerName, what, p.RequestID, it.PeerName)})
	}
	lc.queueAnswer(cancelAnswer{peer: e.From, id: e.ID, status: wire.StatusCompleted, result: resultValue("request_id", p.RequestID.String())})
	return true, nil
}

// resultValue is the map {k: v}.
func resultValue(k, v string) wire.Value {
	m, _ := wire.Map(wire.Member{Key: k, Value: wire.Text(v)})
	return m
}

func (lc *lifecycle) queueAnswer(a cancelAnswer) {
	select {
	case lc.answer <- a:
	default:
		lc.n.log.Warn("request lifecycle: too many cancels to answer; one answer dropped", "cancel", a.id.String())
	}
}

// answerLoop sends the answers to received cancels: one attempt each
// (the requester does not depend on them, and a peer sending many
// cancels cannot fill the outbox with answers).
func (lc *lifecycle) answerLoop(ctx context.Context) {
	for {
		select {
		case a := <-lc.answer:
			_, err := lc.n.send(ctx, sendSpec{peer: a.peer.String(), kind: wire.Response(a.id, a.status, a.result)})
			if err != nil && ctx.Err() == nil {
				lc.n.log.Warn("request lifecycle: cannot answer a cancel", "cancel", a.id.String(), "err", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// decorate adds what the node knows of a held request to its item: the
// deadline it carried and the sender's cancellation.
func (lc *lifecycle) decorate(m *Message, it comms.Item) {
	e := it.Envelope
	if it.Type != comms.ItemExternal || e.Kind.Type() != wire.TypeRequest {
		return
	}
	if v, ok := e.Kind.Field(wireDeadline); ok {
		if t, ok := parseWireDeadline(v); ok {
			m.Deadline = &t
		}
	}
	if lc == nil {
		return
	}
	c, ok, err := lc.st.HeldCancel(e.From, e.ID.String())
	if err != nil || !ok {
		return
	}
	m.Cancelled = &Cancellation{At: c.At.UTC(), Reason: c.Reason, Note: c.Note}
}

// noLifecycle is the error of lifecycle operations on a node that does
// not serve the home.
func (n *Node) noLifecycle() error {
	return errorf(CodeNoDaemon, "no daemon is running for %s: requests are followed by the running node (start it with meerkatd run --home %s)", n.h.Dir, n.h.Dir)
}

// CancelRequest implements [API].
func (n *Node) CancelRequest(ctx context.Context, requestID, reason string, opts SendOptions) (Cancelled, error) {
	key := opts.IdempotencyKey
	if opts.IdempotencyKey = ""; opts != (SendOptions{}) {
		return Cancelled{}, errorf(CodeBadArgument, "cancel_request takes no send options but an idempotency key")
	}
	if key == "" {
		return n.cancelRequest(ctx, requestID, reason)
	}
	// Kept once the request is cancelled here, also if telling the peer
	// failed: a retry must not find it "not open".
	args := struct{ RequestID, Reason string }{requestID, reason}
	c, replayed, err := idempotentResult(n, ctx, key, "cancel_request", args, func() (Cancelled, bool, error) {
		c, err := n.cancelRequest(ctx, requestID, reason)
		return c, c.Request.ID != "", err
	})
	c.Replayed = replayed
	return c, err
}

func (n *Node) cancelRequest(ctx context.Context, requestID, reason string) (Cancelled, error) {
	if n.closing() {
		return Cancelled{}, Coded(ErrClosed)
	}
	if n.lc == nil {
		return Cancelled{}, n.noLifecycle()
	}
	if len(reason) > MaxCancelNote || !utf8.ValidString(reason) {
		return Cancelled{}, errorf(CodeBadArgument, "reason: at most %d bytes of UTF-8 text", MaxCancelNote)
	}
	id, err := identity.ParseUUID(requestID)
	if err != nil {
		return Cancelled{}, errorf(CodeBadArgument, "%q is not a request id (a UUID)", requestID)
	}
	r, ok, err := n.lc.st.SentRequest(id.String())
	if err != nil {
		return Cancelled{}, Coded(err)
	}
	if !ok {
		return Cancelled{}, errorf(CodeUnknownRequest, "this node sent no request %s (the requests it sent: meerkatd requests, or the MCP tool list_requests)", id)
	}
	moved, err := n.lc.st.MoveSentRequest(r.ID, RequestOpen, RequestCancelled, n.lc.now(), reason)
	if err != nil {
		return Cancelled{}, Coded(err)
	}
	if !moved {
		return Cancelled{}, errorf(CodeBadArgument, "request %s is %s, not open: only an open request can be cancelled", id, r.State)
	}
	n.lc.forgetDue(r.ID)
	if n.lc.withdraw(r.Recipient, r.ID, outbox.ReasonCancelled+": the request was cancelled before it could be delivered") {
		// Still queued: the peer never had it, so nothing to tell it.
		if r2, ok, rerr := n.lc.st.SentRequest(r.ID); rerr == nil && ok {
			r = r2
		}
		return Cancelled{Request: sentRequest(r), Withdrawn: true}, nil
	}
	sent, err := n.lc.sendCancel(ctx, r.Recipient, r.ID, CancelReasonCancelled, reason, false)
	if r2, ok, rerr := n.lc.st.SentRequest(r.ID); rerr == nil && ok {
		r = r2
	}
	return Cancelled{Request: sentRequest(r), Cancel: &sent}, err
}

// Requests implements [API].
func (n *Node) Requests(ctx context.Context, q RequestQuery) ([]SentRequest, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	if n.lc == nil {
		return nil, n.noLifecycle()
	}
	sq := store.SentRequestQuery{States: q.States, Limit: q.Limit}
	if err := CheckRequestStates(q.States); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, errorf(CodeBadArgument, "limit must not be negative")
	}
	if q.Limit > MaxBatchItems {
		sq.Limit = MaxBatchItems
	}
	if q.Peer != "" {
		p, err := n.r.ResolvePeer(q.Peer)
		if err != nil {
			return nil, Coded(err)
		}
		sq.Peer = &p.ID
	}
	rs, err := n.lc.st.SentRequests(sq)
	if err != nil {
		return nil, Coded(err)
	}
	out := make([]SentRequest, 0, len(rs))
	for _, r := range rs {
		out = append(out, sentRequest(r))
	}
	return out, nil
}

func sentRequest(r store.SentRequest) SentRequest {
	s := SentRequest{ID: r.ID, Peer: r.Peer, PubKey: r.Recipient.String(), Intent: r.Intent, Sent: r.Created.UTC(),
		State: r.State, StateAt: r.Updated.UTC(), Note: r.Note, ResponseID: r.ResponseID, FinalStatus: r.FinalStatus}
	if !r.Deadline.IsZero() {
		d := r.Deadline.UTC()
		s.Deadline = &d
	}
	return s
}

// checkDeadline checks a request's deadline option.
func (n *Node) checkDeadline(d time.Time) error {
	if d.IsZero() {
		return nil
	}
	if n.lc == nil {
		return errorf(CodeNoDaemon, "a deadline needs the running node, which times the request out: start it with meerkatd run --home %s", n.h.Dir)
	}
	now := n.lc.now()
	if !d.After(now) {
		return errorf(CodeBadArgument, "deadline %s has passed", d.UTC().Format(time.RFC3339))
	}
	if d.Sub(now) > MaxTTL {
		return errorf(CodeBadArgument, "deadline %s is more than %s away", d.UTC().Format(time.RFC3339), MaxTTL)
	}
	return nil
}

// memLifecycle is the lifecycle store of a memory-mode node: it keeps
// what the SQLite tables would, with the same bounds, until the node
// stops.
type memLifecycle struct {
	mu      sync.Mutex
	sent    map[string]*store.SentRequest
	cancels map[heldKey]store.HeldCancel
}

type heldKey struct {
	sender identity.PeerID
	id     string
}

func newMemLifecycle() *memLifecycle {
	return &memLifecycle{sent: map[string]*store.SentRequest{}, cancels: map[heldKey]store.HeldCancel{}}
}

var _ lifecycleStore = (*memLifecycle)(nil)

func (m *memLifecycle) PutSentRequest(r store.SentRequest, max int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sent[r.ID]; ok {
		return nil
	}
	m.sent[r.ID] = &r
	for len(m.sent) > max {
		var victim *store.SentRequest
		for _, s := range m.sent { // the oldest closed, else the oldest open
			if victim == nil || evictsBefore(s, victim) {
				victim = s
			}
		}
		delete(m.sent, victim.ID)
	}
	return nil
}

// evictsBefore reports whether a goes before b when the sent requests
// are over their bound: closed ones first, then the oldest.
func evictsBefore(a, b *store.SentRequest) bool {
	if ao, bo := a.State == RequestOpen, b.State == RequestOpen; ao != bo {
		return bo
	}
	return a.Created.Before(b.Created)
}

func (m *memLifecycle) MoveSentRequest(id, from, to string, at time.Time, note string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.sent[id]
	if r == nil || r.State != from {
		return false, nil
	}
	r.State, r.Updated, r.Note = to, at, note
	return true, nil
}

func (m *memLifecycle) DropSentRequest(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.sent[id]; r != nil && r.State == RequestOpen {
		delete(m.sent, id)
	}
	return nil
}

func (m *memLifecycle) AnswerSentRequest(id, responseID, status string, at time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.sent[id]
	if r == nil {
		return false, nil
	}
	if r.ResponseID == "" {
		r.ResponseID, r.FinalStatus = responseID, status
	}
	if r.State != RequestOpen {
		return false, nil
	}
	r.State, r.Updated, r.Note = RequestAnswered, at, ""
	return true, nil
}

func (m *memLifecycle) PutHeldCancel(c store.HeldCancel, max int) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := heldKey{c.Sender, c.ID}
	if _, ok := m.cancels[k]; ok {
		return false, nil
	}
	m.cancels[k] = c
	for len(m.cancels) > max {
		var victim heldKey
		var at time.Time
		for k, c := range m.cancels {
			if at.IsZero() || c.At.Before(at) {
				victim, at = k, c.At
			}
		}
		delete(m.cancels, victim)
	}
	return true, nil
}

func (m *memLifecycle) PruneRequests(closedBefore, cancelsBefore time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id, r := range m.sent {
		if r.State != RequestOpen && r.Updated.Before(closedBefore) {
			delete(m.sent, id)
			n++
		}
	}
	for k, c := range m.cancels {
		if c.At.Before(cancelsBefore) {
			delete(m.cancels, k)
			n++
		}
	}
	return n, nil
}

func (m *memLifecycle) SentRequest(id string) (store.SentRequest, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.sent[id]
	if r == nil {
		return store.SentRequest{}, false, nil
	}
	return *r, true, nil
}

func (m *memLifecycle) OpenDeadlines() ([]store.SentRequest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.SentRequest
	for _, r := range m.sent {
		if r.State == RequestOpen && !r.Deadline.IsZero() {
			out = append(out, *r)
		}
	}
	return out, nil
}

func (m *memLifecycle) SentRequests(q store.SentRequestQuery) ([]store.SentRequest, error) {
	m.mu.Lock()
	var out []store.SentRequest
	for _, r := range m.sent {
		switch {
		case len(q.States) > 0 && !slices.Contains(q.States, r.State):
		case q.Peer != nil && r.Recipient != *q.Peer:
		case !q.Before.IsZero() && !r.Created.Before(q.Before):
		default:
			out = append(out, *r)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b store.SentRequest) int { // newest first, as SQLite lists them
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	return out[:min(limit, len(out))], nil
}

func (m *memLifecycle) HeldCancel(sender identity.PeerID, id string) (store.HeldCancel, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.cancels[heldKey{sender, id}]
	return c, ok, nil
}

// lifecycleRequest builds a request's kind (with meerkat_deadline toward
// a peer that verifies it) and, on a serving node, the hook that records
// it once sealed, before the peer can answer.
func (n *Node) lifecycleRequest(peer, intent string, params wire.Value, deadline time.Time) (wire.Kind, func(comms.Sealed) error, error) {
	kind := wire.Request(intent, params)
	if n.lc == nil {
		return kind, nil, nil
	}
	if !deadline.IsZero() {
		p, err := n.r.ResolvePeer(peer)
		if err != nil {
			return kind, nil, Coded(err)
		}
		if n.lc.speaks(p.ID) {
			if kind, err = kind.With(wireDeadline, wire.Text(formatWireDeadline(deadline))); err != nil {
				return kind, nil, Coded(err)
			}
		}
	}
	return kind, func(s comms.Sealed) error { return n.lc.sent(s, intent, deadline) }, nil
}

// CheckRequestStates refuses (bad_argument) a state that is not one of a
// sent request's: open, answered, timed_out, cancelled.
func CheckRequestStates(states []string) error {
	for _, s := range states {
		switch s {
		case RequestOpen, RequestAnswered, RequestTimedOut, RequestCancelled:
		default:
			return errorf(CodeBadArgument, "states: %q is not open, answered, timed_out or cancelled", s)
		}
	}
	return nil
}
