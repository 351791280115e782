package node

import (
	"context"
	"encoding/json"
	"time"
)

// API is everything a face of the node can ask of it: the CLI (in this
// process or through the control socket), the control socket's clients
// and the MCP tools. [*Node] implements it for a node in this process and
// the control package's Client for a node in another one; both return
// the same result types and, for failures a caller can act on, an
// [*Error] with one of the Code… values.
//
// Every check of an operation (a response answers a request received
// from that peer, a body fits the envelope limit, filters are valid)
// happens in the Node, so each face behaves the same.
type API interface {
	// Self describes this node.
	Self(ctx context.Context) (Self, error)
	// Status reports whether a node serves the home, its addresses and
	// counters, and the reliable sends waiting.
	Status(ctx context.Context) (Status, error)
	// Peers lists the trusted peers with their reliable-send state.
	Peers(ctx context.Context) ([]Peer, error)

	// SendMessage sends body to peer (name, key or peer UUID). A direct
	// send returns once the peer acknowledged it; a reliable one once
	// the first attempt ended, with Delivery "queued" if it failed.
	SendMessage(ctx context.Context, peer, body string, opts SendOptions) (Sent, error)
	// SendRequest sends a request, like SendMessage; with opts.Wait it
	// then waits that long for the final response and returns the
	// responses in Sent.Responses.
	SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts SendOptions) (Sent, error)
	// AwaitResponses waits up to wait for the final response to the
	// request requestID that this node sent (SendRequest without Wait,
	// so that its id is known at once), as SendRequest with Wait does:
	// the responses that came since count. deadline, if not zero, is
	// the request's: a wait that reaches it ends with CodeTimedOut. A
	// request whose final response a wait took already, or not this
	// node's, is CodeUnknownRequest (a final response nobody waited for
	// is still held, and returned).
	AwaitResponses(ctx context.Context, requestID string, wait time.Duration, deadline time.Time) (Sent, error)
	// SendResponse answers a request this node received from peer. A
	// final answer (completed, failed) can be given once; a reliable
	// final answer counts as given once it is queued.
	SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts SendOptions) (Sent, error)

	// Receive lists unacknowledged items matching q, oldest first, a page
	// at a time (q.Limit items, and about MaxBatchBytes of content),
	// waiting up to q.Wait for the first one when none match yet.
	Receive(ctx context.Context, q Query) (Batch, error)
	// Ack marks items handled: those named by id or sequence number, and
	// every item with a sequence number up to a.UpTo that matches a's
	// filters.
	Ack(ctx context.Context, a AckRequest) (Acked, error)

	// Outbox lists the reliable sends not acknowledged yet (without
	// bodies) and the peers' send states.
	Outbox(ctx context.Context) (Outbox, error)
	// RetryOutbox makes the reliable sends queued for peer (name, key or
	// peer UUID; "": every peer) due now, an open circuit breaker letting
	// one probe through, and returns how many it made due. It needs the
	// running node.
	RetryOutbox(ctx context.Context, peer string) (int, error)
	// DropQueued takes the reliable sends with the given envelope ids out
	// of the outbox into the dead letters (reason dropped), and says
	// which it took, and which it left: not queued, or being attempted
	// right now. It needs the running node.
	DropQueued(ctx context.Context, ids []string) (Dropped, error)
	// DeadLetters lists the reliable sends given up on, oldest first.
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
	// RetryDeadLetters queues the dead letters with the given ids again,
	// or every dead letter if all; it returns how many it queued.
	RetryDeadLetters(ctx context.Context, ids []string, all bool) (int, error)
	// DropDeadLetters deletes the dead letters with the given ids, or
	// every dead letter if all; it returns how many it deleted.
	DropDeadLetters(ctx context.Context, ids []string, all bool) (int, error)

	// PairOffer opens a one-time pairing offer and returns the line to
	// hand to the other node; the node completes the pairing (and trusts
	// the other node) when the line is used.
	PairOffer(ctx context.Context, opts PairOptions) (PairOffer, error)
	// PairWait waits for the offer with handle id to be used. It fails
	// with CodePairPending if ctx ends first (the offer stays open).
	PairWait(ctx context.Context, id string) (Paired, error)
	// PairCancel withdraws the offer with handle or line which, or every
	// open offer if which is "", and returns how many it withdrew: none
	// open is CodePairFailed.
	PairCancel(ctx context.Context, which string) (int, error)
	// PairAccept pairs with the node that made the offer line: both end
	// up trusting each other. name is what to call it here ("": its own
	// name).
	PairAccept(ctx context.Context, line, name string) (Paired, error)

	SpacesAPI
	ClassesAPI // item classes: a person's notes (classes)

	// Slice B: delivery status of what this node sent.
	SentAPI
	// Slice C: search.
	SearchAPI
	BroadcastAPI // broadcast and tasks slice
	CardAPI      // slice E: agent cards
	LifecycleAPI // slice F: request deadlines and cancels (lifecycle.go)
	LoopGuardAPI // slice G: loop guard
}

// Limits of the API.
const (
	// MaxTTL is the longest time-to-live a send may ask for (one week,
	// like outbox.default_ttl_secs).
	MaxTTL = 7 * 24 * time.Hour
	// MaxWait is the longest a single call may wait (Receive, SendRequest
	// with Wait, PairWait); longer waits are cut to it.
	MaxWait = 10 * time.Minute
	// MaxBatchBytes bounds one Receive batch by the size of its items'
	// JSON (every byte a peer chose counts, as encoding/json writes it);
	// a batch always holds at least one item (a single larger item comes
	// alone), and the cursor pages through the rest.
	MaxBatchBytes = 4 << 20
	// MaxBatchItems bounds the items of one Receive batch.
	MaxBatchItems = 1000
	// MaxWaitedResponses bounds the responses SendRequest with Wait
	// collects (a peer could send many "accepted" ones before the final).
	MaxWaitedResponses = 100
)

// Self describes a node.
type Self struct {
	Name     string   `json:"name"`
	PubKey   string   `json:"pubkey"`
	PeerUUID string   `json:"peer_uuid"`
	Home     string   `json:"home"`
	Listen   []string `json:"listen"`
	// Embedded is true for a node running inside meerkatd mcp rather
	// than a daemon: it lives as long as its MCP client's session.
	Embedded bool `json:"embedded,omitempty"`
}

// Status is what `meerkatd status` and the MCP status tool show.
type Status struct {
	Self
	// Running is true when a node serves the home (a daemon, or the node
	// embedded in meerkatd mcp); false when the figures come from the
	// home's files with no node running.
	Running   bool       `json:"running"`
	StartedAt *time.Time `json:"started_at"` // null if not running
	Peers     int        `json:"peers"`
	// Inbox counts unacknowledged items; Pending those an agent must
	// look at: all of them (every stored kind, responses included).
	Inbox       int               `json:"inbox"`
	Pending     int               `json:"pending"`
	Accepted    uint64            `json:"accepted"`
	AcksSent    uint64            `json:"acks_sent"`
	Connections int               `json:"connections"`
	Rejected    map[string]uint64 `json:"rejected"`
	// Reliable sends: queued, dead letters, and the peers with something
	// queued or a breaker that is not closed.
	Outbox      int             `json:"outbox"`
	DeadLetters int             `json:"dead_letters"`
	SendPeers   []PeerSendState `json:"send_peers"`
	// DBBytes is the size on disk of the home's database (meerkat.db and
	// its write-ahead log); 0 in memory mode or before it exists.
	DBBytes int64 `json:"db_bytes"`
	// PendingByClass breaks Pending down by item class (every class
	// present).
	PendingByClass map[string]int `json:"pending_by_class"`
	// LoopGuards lists the peers the loop guard holds: sends to them are
	// refused with CodeLoopGuard until held_until or a person's release.
	LoopGuards []LoopGuardState `json:"loop_guards"`
	// NATS is the connection to the [nats] servers; absent when none
	// are configured.
	NATS *NATSStatus `json:"nats,omitempty"`
	// Problems says what keeps a running node from being reached as
	// configured (a listening socket file removed or replaced); absent
	// when nothing does. /readyz fails with the first.
	Problems []string `json:"problems,omitempty"`
	// Warnings says what a running node runs despite, without keeping
	// it from being reached: meerkat.toml changed since it started (or
	// does not load now), a trust or spaces file it could not take in
	// (it keeps what it had). Absent when there is nothing to say.
	Warnings []string `json:"warnings,omitempty"`
}

// Peer is one trusted peer.
type Peer struct {
	Name     string          `json:"name"`
	PubKey   string          `json:"pubkey"`
	PeerUUID string          `json:"peer_uuid"`
	Addr     string          `json:"addr"`
	NATS     bool            `json:"nats,omitempty"` // also reachable through NATS when addr cannot be connected to
	Meta     json.RawMessage `json:"meta,omitempty"`
	LastSeen *time.Time      `json:"last_seen"` // last envelope received from it; null if none yet
	// Reliable sends to it: the circuit breaker ("closed", "open": queued
	// without dialling, "half_open": the next attempt is the probe), how
	// many are queued, and why the last attempt failed.
	Breaker   string `json:"breaker"`
	Queued    int    `json:"queued"`
	LastError string `json:"last_error,omitempty"`
	// Card summarizes the peer's verified agent card, if this node holds
	// one (see DescribePeer); null if not.
	Card *CardSummary `json:"card"`
	// LoopGuard is the loop guard's count of fast replies to it and its
	// hold, if it counts any or holds it.
	LoopGuard *LoopGuardState `json:"loop_guard,omitempty"`
}

// SendOptions say how a send is delivered.
type SendOptions struct {
	// Reliable stores the envelope in the outbox first and retries it
	// until the peer acknowledges it or its time-to-live passes. Without
	// it, a send is one attempt and fails with CodePeerOffline.
	Reliable bool `json:"reliable,omitempty"`
	// TTL is a reliable send's time-to-live; once it passes
	// unacknowledged the envelope becomes a dead letter (0: the node's
	// configured default, outbox.default_ttl_secs).
	TTL time.Duration `json:"ttl,omitempty"`
	// NoWait returns a reliable send once it is stored, without waiting
	// for the first attempt.
	NoWait bool `json:"no_wait,omitempty"`
	// Wait (requests only) waits this long after the ack for the final
	// response.
	Wait time.Duration `json:"wait,omitempty"`
	// Interrupt (messages and requests) marks the envelope
	// handling_mode "steer": the receiver's agent should handle it at
	// its next boundary, before what it has queued.
	Interrupt bool `json:"interrupt,omitempty"`
	// IdempotencyKey makes the send safe to retry: a send with a key
	// used before (within agent.idempotency_window_secs, also after a
	// restart) returns the first send's result with Replayed set and
	// sends nothing; the same key with other arguments fails with
	// CodeIdempotencyConflict. A send that failed is made again by a
	// retry, under the same envelope id (derived from the key and the
	// arguments): a peer whose node got the failed attempt (only its
	// ack was lost) drops the repeat, so it gets the envelope once. See
	// CheckIdempotencyKey.
	IdempotencyKey string `json:"idempotency_key,omitempty"`

	// TaskID (broadcast and tasks slice) sends under a task: the signed
	// field objective_id carries it, and the peer joins the task's
	// participants. At most MaxTaskIDLen bytes of printable text.
	TaskID string `json:"task_id,omitempty"`
	// Deadline (requests only; needs the running node) is when the
	// requester stops waiting: if no final response has arrived by then
	// the request becomes timed_out and the node tells the peer with a
	// meerkat.cancel. It must be in the future and at most MaxTTL away.
	// Peers running meerkatd also receive it (signed, meerkat_deadline).
	Deadline time.Time `json:"deadline,omitzero"`
}

// Delivery outcomes in [Sent].
const (
	DeliveryAcked   = "acked"   // the peer acknowledged it (messages, requests)
	DeliveryWritten = "written" // written to the peer (responses are not acknowledged)
	DeliveryQueued  = "queued"  // reliable, not delivered yet: the outbox retries it
	// DeliveryStored: a direct send whose one attempt a broker on the
	// way (NATS JetStream) stored; the peer gets it when it is back, and
	// has not acknowledged it yet (message_status follows it).
	DeliveryStored = "stored_in_broker"
)

// Sent reports a send.
type Sent struct {
	ID        string `json:"id"`                   // the envelope id (the request id for requests)
	Peer      string `json:"peer"`                 // the peer's trust-list name
	Delivery  string `json:"delivery"`             // a Delivery… value
	LastError string `json:"last_error,omitempty"` // queued: why the last attempt failed
	// Behind (queued) is how many earlier sends to the peer wait in the
	// outbox ahead of this one, which goes after them: it was not
	// attempted, and LastError is why the peer's last attempt failed.
	Behind int `json:"behind,omitempty"`
	// BreakerOpenUntil (queued) is set when the peer's circuit breaker
	// held the send back: it was not attempted, and is tried when the
	// breaker lets a probe through (at once if the peer shows it is back).
	BreakerOpenUntil *time.Time `json:"breaker_open_until,omitempty"`
	// Responses are those SendRequest with Wait saw, as they came, without
	// a Seq: each is in the inbox too, under its own (Query.RequestID
	// reads them there, to acknowledge them).
	Responses []Message `json:"responses,omitempty"`
	// Replayed is true for the result of an earlier send with the same
	// idempotency key, returned without sending again.
	Replayed bool `json:"replayed,omitempty"`
}

// Message is one received item.
//
// Untrusted is true for every item a peer sent (every item but the
// node's own system and user items): its kind, body, intent, params,
// status, result, fields and MEUP envelope are text another agent wrote,
// data to read, never instructions. Seq,
// ID, From, Peer, Received and RequestID are this node's (the sender's
// key is verified, Peer is its name in this node's trust list).
type Message struct {
	Seq       uint64    `json:"seq,omitempty"` // 0 (left out) only in Sent.Responses
	ID        string    `json:"id"`
	Kind      string    `json:"kind"` // message, request, response, meup, or the peer's text for a kind this node does not know
	From      string    `json:"from"` // sender key
	Peer      string    `json:"peer"` // sender's trust-list name
	Received  time.Time `json:"received"`
	Untrusted bool      `json:"untrusted"` // the content is a peer's (see above)
	Body      string    `json:"body,omitempty"`
	Intent    string    `json:"intent,omitempty"`
	Params    any       `json:"params,omitempty"`     // any JSON value (a json.RawMessage)
	RequestID string    `json:"request_id,omitempty"` // responses: the request answered
	Status    string    `json:"status,omitempty"`
	Result    any       `json:"result,omitempty"` // any JSON value (a json.RawMessage)
	// TaskID is the task the sender put the item under (its signed
	// objective_id); BroadcastID the broadcast it is one copy of (its
	// signed meerkat_broadcast). Both are the peer's text.
	TaskID      string `json:"task_id,omitempty"`
	BroadcastID string `json:"broadcast_id,omitempty"`
	// MEUP is set for items of kind "meup": an envelope of a space.
	MEUP *MEUPItem `json:"meup,omitempty"`
	// Deadline is a held request's deadline, as its sender gave it
	// (meerkat_deadline); null if it gave none.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Cancelled is set on a held request its sender cancelled, or gave
	// up on when its deadline passed. Answering it is still allowed.
	Cancelled *Cancellation `json:"cancelled,omitempty"`
	// Fields holds the whole kind of an item that is not a message,
	// request, response or meup (a kind this node does not know), as
	// JSON.
	Fields any `json:"fields,omitempty"`
	// Class is the item's class (Class… values), which orders a
	// priority read. system and user items are the node's own (a notice,
	// a person's note): their Untrusted is false.
	Class string `json:"class,omitempty"`
	// Notice is set on system items: what the node noticed.
	Notice *Notice `json:"notice,omitempty"`
}

// The JSON values of a Message are typed any, not json.RawMessage: the
// output schema generated from this type must admit any JSON value there,
// and a byte slice would be described as an array of integers.

// Query selects items for Receive.
type Query struct {
	After     uint64   `json:"after,omitempty"`      // only items with a sequence number above this
	Limit     int      `json:"limit,omitempty"`      // at most this many (0 or above MaxBatchItems: MaxBatchItems)
	Kinds     []string `json:"kinds,omitempty"`      // only these kinds (empty: all)
	From      string   `json:"from,omitempty"`       // only from this peer (name, key or UUID; empty: all)
	RequestID string   `json:"request_id,omitempty"` // only responses to this request
	MEUPFilter
	Wait time.Duration `json:"wait,omitempty"` // wait this long for the first match
	// Epoch is the Batch.Epoch of the read After came from (optional).
	// If the inbox now has another epoch, After means nothing in it, and
	// Receive reads the inbox from its start as if After were 0.
	Epoch string `json:"epoch,omitempty"`
	// Order is OrderPriority (""; by class, then arrival) or
	// OrderArrival.
	Order string `json:"order,omitempty"`
	// Peek reads for a reader that shows the items to no agent (the
	// pending count, an arrival watch): they are not recorded as shown,
	// so an Ack with UpTo does not take them. Any other read records
	// the items it returns.
	Peek bool `json:"peek,omitempty"`
}

// Batch is what Receive returns.
type Batch struct {
	Messages []Message `json:"messages"`
	Cursor   uint64    `json:"cursor"`    // pass as After to get only newer items
	More     bool      `json:"more"`      // more matching items follow the cursor now
	TimedOut bool      `json:"timed_out"` // waited and nothing came
	Pending  int       `json:"pending"`   // unacknowledged items of every stored kind, responses included
	// Epoch names the inbox the cursor and seqs belong to. It stays the
	// same across restarts of a node with the SQLite inbox (seqs go on);
	// with [store] mode = "memory" each start has a new one (seqs start
	// over). A client whose epoch changes must read again from After 0:
	// its cursor means nothing in the new inbox (Query.Epoch does that).
	Epoch string `json:"epoch"`
	// PendingByClass breaks Pending down by item class (every class
	// present).
	PendingByClass map[string]int `json:"pending_by_class"`
}

// AckRequest names the items Ack marks handled.
type AckRequest struct {
	IDs  []string `json:"ids,omitempty"`  // envelope ids
	Seqs []uint64 `json:"seqs,omitempty"` // sequence numbers (Message.Seq)
	// UpTo acknowledges every item with a sequence number up to it that
	// matches the filters (Kinds, From, RequestID, MEUPFilter: those of
	// Query, applied the same way) and that a read (Receive without
	// Peek) returned since the node started (0: none). An item no read
	// returned stays pending, whatever the filters: a filtered read's
	// cursor passes the items its filters skipped, and acknowledging up
	// to it must not take them unseen. Acked.Unread counts them.
	UpTo      uint64   `json:"up_to,omitempty"`
	Kinds     []string `json:"kinds,omitempty"`
	From      string   `json:"from,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
	MEUPFilter
	// Epoch is the Batch.Epoch UpTo (or Seqs) came from (optional): if
	// the inbox now has another epoch, the seqs count in an inbox that
	// is gone and Ack refuses them (CodeBadArgument); IDs are
	// acknowledged in any epoch.
	Epoch string `json:"epoch,omitempty"`
}

// MEUPFilter selects MEUP items (kind "meup"); any field set leaves out
// every other item.
type MEUPFilter struct {
	Space     string   `json:"space,omitempty"`      // only this space's envelopes
	MEUPKinds []string `json:"meup_kinds,omitempty"` // only these MEUP kinds (e.g. mcp/proposal, chat)
	Context   string   `json:"context,omitempty"`    // only this context (sub-thread)
}

// Acked is what Ack returns.
type Acked struct {
	Acked   int `json:"acked"`
	Pending int `json:"pending"`
	// Unread counts the items up to UpTo matching the filters that no
	// read returned: they stay pending (read them, then acknowledge).
	Unread int `json:"unread,omitempty"`
	// Above, for an UpTo that acknowledged nothing, counts the items
	// reads returned above it, pending: in priority order a read returns
	// items above its cursor (which stays below the oldest item it left
	// out), so acknowledge those by id.
	Above int `json:"above,omitempty"`
	// NotFound lists the ids given that name no pending item, in the
	// order given: acknowledged before, or not an item's id (a request's
	// id names the request, not the responses to it).
	NotFound []string `json:"not_found,omitempty"`
}

// Outbox lists the reliable sends waiting.
type Outbox struct {
	Entries []QueuedSend    `json:"entries"`
	Peers   []PeerSendState `json:"peers"` // peers with something queued or a breaker that is not closed
}

// QueuedSend is one reliable send waiting in the outbox (never its body).
type QueuedSend struct {
	Seq         uint64     `json:"seq"`
	ID          string     `json:"id"`
	Peer        string     `json:"peer"`
	PubKey      string     `json:"pubkey"`
	Kind        string     `json:"kind"`
	Size        int        `json:"size"`
	Created     time.Time  `json:"created"`
	Attempts    int        `json:"attempts"`     // failed attempts so far
	NextAttempt *time.Time `json:"next_attempt"` // null: as soon as the peer's queue allows
	// Due is true when its next attempt time has come (or it has none):
	// it goes as soon as the peer's queue and breaker allow.
	Due     bool       `json:"due"`
	Expires *time.Time `json:"expires"` // null: no time-to-live
	// Expired is true once its time-to-live ran out: it is not attempted
	// again, and becomes a dead letter when the daemon next looks (with
	// none running, when one starts).
	Expired   bool   `json:"expired,omitempty"`
	LastError string `json:"last_error,omitempty"`
	InFlight  bool   `json:"in_flight"`
	// StoredInBroker is true when a NATS JetStream stream on the way
	// holds it (the peer gets it when it is back): it holds back nothing
	// queued behind it.
	StoredInBroker bool `json:"stored_in_broker,omitempty"`
}

// Dropped is what DropQueued did.
type Dropped struct {
	Dropped   []string `json:"dropped"`    // now dead letters
	NotQueued []string `json:"not_queued"` // not in the outbox (delivered, a dead letter already, or never queued)
	InFlight  []string `json:"in_flight"`  // being attempted right now: it may be delivered
	// Stored are held by a NATS JetStream stream on the way, which
	// delivers them when the peer is back: they hold nothing back and
	// cannot be dropped.
	Stored []string `json:"stored_in_broker"`
}

// Err is the error of a DropQueued that left some of the sends given
// (bad_argument, counting them), or nil.
func (d Dropped) Err() error {
	if left := len(d.InFlight) + len(d.NotQueued) + len(d.Stored); left > 0 {
		return errorf(CodeBadArgument, "%d of the sends given not dropped: %d being attempted right now (they may be delivered), %d held by the NATS stream (it delivers them), %d not in the outbox",
			left, len(d.InFlight), len(d.Stored), len(d.NotQueued))
	}
	return nil
}

// PeerSendState is a peer's reliable-send state.
type PeerSendState struct {
	Peer        string     `json:"peer"`
	PubKey      string     `json:"pubkey"`
	Queued      int        `json:"queued"`
	Breaker     string     `json:"breaker"` // closed, open, half_open
	Failures    int        `json:"failures"`
	OpenUntil   *time.Time `json:"open_until"` // an open breaker's probe time; null if not open
	NextAttempt *time.Time `json:"next_attempt"`
	// Due is true when something is queued, its next attempt time has
	// come and the breaker is not open: the peer is being tried now.
	Due       bool   `json:"due"`
	LastError string `json:"last_error,omitempty"`
}

// DeadLetter is a reliable send given up on (never its body).
type DeadLetter struct {
	Seq      uint64    `json:"seq"`
	ID       string    `json:"id"`
	Peer     string    `json:"peer"`
	PubKey   string    `json:"pubkey"`
	Kind     string    `json:"kind"`
	Size     int       `json:"size"`
	Created  time.Time `json:"created"`
	Attempts int       `json:"attempts"`
	Reason   string    `json:"reason"` // "expired…", "retries_exhausted…", "unknown_peer…", "rejected…"
	DiedAt   time.Time `json:"died_at"`
}

// PairOptions configure a pairing offer.
type PairOptions struct {
	TTL         time.Duration `json:"ttl,omitempty"`           // how long the code stays valid (0: pair.DefaultTTL)
	NameForPeer string        `json:"name_for_peer,omitempty"` // what to call the other node here ("": its own name)
	// NATS offers through the node's NATS connection: the line's address
	// is nats:, and the other node answers it through its own.
	NATS bool `json:"nats,omitempty"`
}

// PairOffer is an open pairing offer.
type PairOffer struct {
	ID      string    `json:"id"`      // handle for PairWait and PairCancel
	Line    string    `json:"line"`    // pass it to the other node's pair accept
	Expires time.Time `json:"expires"` // it works once, until then
}

// Paired is the peer a pairing added to the trust list.
type Paired struct {
	Name   string `json:"name"`
	PubKey string `json:"pubkey"`
	Addr   string `json:"addr"`
	// NATS: the peer is also reachable through NATS when Addr cannot be
	// connected to (docs/nats.md).
	NATS bool `json:"nats,omitempty"`
}

// UnmarshalJSON decodes a Message keeping its JSON values (params, result,
// fields) as json.RawMessage, so numbers keep their exact text and integers
// stay integers.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message
	var raw struct {
		plain
		Params json.RawMessage `json:"params,omitempty"`
		Result json.RawMessage `json:"result,omitempty"`
		Fields json.RawMessage `json:"fields,omitempty"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = Message(raw.plain)
	m.Params, m.Result, m.Fields = rawOrNil(raw.Params), rawOrNil(raw.Result), rawOrNil(raw.Fields)
	return nil
}

// rawOrNil is r as an any, nil (not a nil json.RawMessage) when absent.
func rawOrNil(r json.RawMessage) any {
	if r == nil {
		return nil
	}
	return r
}
