package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Node is what the MCP server needs from a meerkatd node. cmd/meerkatd
// provides one backed by a node in the same process and one that talks to
// a running daemon; tests use a fake.
type Node interface {
	// Self describes this node.
	Self() Self
	// Peers lists the trusted peers.
	Peers(ctx context.Context) ([]Peer, error)
	// SendMessage sends body to peer (name, key or peer UUID). A direct
	// send returns once the peer acknowledged it; a reliable one once the
	// first attempt ended, with Delivery "queued" if it failed.
	SendMessage(ctx context.Context, peer, body string, opts SendOptions) (Sent, error)
	// SendRequest sends a request, like SendMessage.
	SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts SendOptions) (Sent, error)
	// SendResponse answers a request this node received. A reliable final
	// answer counts as given once it is queued.
	SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts SendOptions) (Sent, error)
	// Receive lists unacknowledged items matching q, oldest first, waiting
	// up to q.Wait for the first one when none match yet.
	Receive(ctx context.Context, q Query) (Batch, error)
	// Ack marks items handled: those with the given ids, and every item
	// with a sequence number up to upTo (0: none by sequence) that matches
	// filter's Kinds, From and RequestID.
	Ack(ctx context.Context, ids []string, upTo uint64, filter Query) (acked, pending int, err error)
	// Outbox lists the reliable sends not acknowledged yet (without
	// bodies) and the peers' send states.
	Outbox(ctx context.Context) (Outbox, error)
	// DeadLetters lists the reliable sends given up on, oldest first.
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
	// RetryDeadLetters queues the dead letters with the given ids again,
	// or every dead letter if all; it returns how many it queued.
	RetryDeadLetters(ctx context.Context, ids []string, all bool) (int, error)
	// PairOffer opens a one-time pairing offer and returns the line to
	// hand to the other node; the node completes the pairing (and trusts
	// the other node) when the line is used.
	PairOffer(ctx context.Context) (PairOffer, error)
	// PairAccept pairs with the node that made the offer line: both end
	// up trusting each other. name is what to call it here ("": its own
	// name).
	PairAccept(ctx context.Context, line, name string) (Paired, error)
}

// PairOffer is an open pairing offer.
type PairOffer struct {
	Line    string    `json:"line"`    // pass it to the other node's pair_accept
	Expires time.Time `json:"expires"` // it works once, until then
}

// Paired is the peer a pairing added to the trust list.
type Paired struct {
	Name string `json:"name"`
	Key  string `json:"pubkey"`
	Addr string `json:"addr"`
}

// SendOptions say how a send is delivered.
type SendOptions struct {
	// Reliable stores the envelope in the outbox first and retries it
	// until the peer acknowledges it or its time-to-live passes. Without
	// it, a send is one attempt and fails with CodePeerOffline.
	Reliable bool
	// TTL is a reliable send's time-to-live; once it passes unacknowledged
	// the envelope becomes a dead letter (0: the node's configured
	// default, outbox.default_ttl_secs).
	TTL time.Duration
}

// MaxTTL is the longest time-to-live a send may ask for (one week, like
// outbox.default_ttl_secs).
const MaxTTL = 7 * 24 * time.Hour

// Self describes the node behind the server.
type Self struct {
	Name     string   `json:"name"`
	PubKey   string   `json:"pubkey"`
	PeerUUID string   `json:"peer_uuid"`
	Listen   []string `json:"listen"`
}

// Peer is one trusted peer.
type Peer struct {
	Name     string     `json:"name"`
	PubKey   string     `json:"pubkey"`
	PeerUUID string     `json:"peer_uuid"`
	Addr     string     `json:"addr"`
	LastSeen *time.Time `json:"last_seen"` // last envelope received from it; null if none yet
	// Reliable sends to it: the circuit breaker ("closed", "open": queued
	// without dialling, "half_open": the next attempt is the probe), how
	// many are queued, and why the last attempt failed.
	Breaker   string `json:"breaker"`
	Queued    int    `json:"queued"`
	LastError string `json:"last_error,omitempty"`
}

// Delivery outcomes in [Sent].
const (
	DeliveryAcked   = "acked"   // the peer acknowledged it (messages, requests)
	DeliveryWritten = "written" // written to the peer (responses are not acknowledged)
	DeliveryQueued  = "queued"  // reliable, not delivered yet: the outbox retries it
)

// Sent reports a send.
type Sent struct {
	ID        string `json:"id"`                   // the envelope id (the request id for requests)
	Peer      string `json:"peer"`                 // the peer's trust-list name
	Delivery  string `json:"delivery"`             // a Delivery… value
	LastError string `json:"last_error,omitempty"` // queued: why the last attempt failed
}

// Outbox is what list_outbox shows.
type Outbox struct {
	Entries []QueuedSend    `json:"entries"`
	Peers   []PeerSendState `json:"peers"` // peers with something queued or a breaker that is not closed
}

// QueuedSend is one reliable send waiting in the outbox (never its body).
type QueuedSend struct {
	ID          string     `json:"id"`
	Peer        string     `json:"peer"`
	PubKey      string     `json:"pubkey"`
	Kind        string     `json:"kind"`
	Created     time.Time  `json:"created"`
	Attempts    int        `json:"attempts"`     // failed attempts so far
	NextAttempt *time.Time `json:"next_attempt"` // null: as soon as the peer's queue allows
	Expires     *time.Time `json:"expires"`      // null: no time-to-live
	LastError   string     `json:"last_error,omitempty"`
	InFlight    bool       `json:"in_flight"`
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
	LastError   string     `json:"last_error,omitempty"`
}

// DeadLetter is a reliable send given up on (never its body).
type DeadLetter struct {
	ID       string    `json:"id"`
	Peer     string    `json:"peer"`
	PubKey   string    `json:"pubkey"`
	Kind     string    `json:"kind"`
	Created  time.Time `json:"created"`
	Attempts int       `json:"attempts"`
	Reason   string    `json:"reason"` // "expired…", "retries_exhausted…", "unknown_peer…", "rejected…"
	DiedAt   time.Time `json:"died_at"`
}

// Message is one received item as the tools show it.
type Message struct {
	Seq       uint64    `json:"seq"`
	ID        string    `json:"id"`
	Kind      string    `json:"kind"` // message, request, response, …
	From      string    `json:"from"` // sender key
	Peer      string    `json:"peer"` // sender's trust-list name
	Received  time.Time `json:"received"`
	Body      string    `json:"body,omitempty"`
	Intent    string    `json:"intent,omitempty"`
	Params    any       `json:"params,omitempty"`     // any JSON value (a json.RawMessage)
	RequestID string    `json:"request_id,omitempty"` // responses: the request answered
	Status    string    `json:"status,omitempty"`
	Result    any       `json:"result,omitempty"` // any JSON value (a json.RawMessage)
}

// The JSON values of a Message are typed any, not json.RawMessage: the
// output schema generated from this type must admit any JSON value there,
// and a byte slice would be described as an array of integers.

// Query selects items for Receive.
type Query struct {
	After     uint64        // only items with a sequence number above this
	Limit     int           // at most this many (0: no limit)
	Kinds     []string      // only these kinds (empty: all)
	From      string        // only from this peer (name, key or UUID; empty: all)
	RequestID string        // only responses to this request
	Wait      time.Duration // wait this long for the first match
}

// Batch is what Receive returns.
type Batch struct {
	Messages []Message `json:"messages"`
	Cursor   uint64    `json:"cursor"`    // pass as after to get only newer items
	TimedOut bool      `json:"timed_out"` // waited and nothing came
	Pending  int       `json:"pending"`   // unacknowledged messages and requests
}

// Error codes a tool reports at the start of its error text, for a model
// (or a program) to branch on.
const (
	CodeUnknownPeer     = "unknown_peer"
	CodePeerOffline     = "peer_offline"
	CodeUnknownRequest  = "unknown_request"
	CodeAlreadyAnswered = "already_answered"
	CodeBodyTooLarge    = "body_too_large"
	CodeBadStatus       = "bad_status"
	CodeBadArgument     = "bad_argument"
	CodeOutboxFull      = "outbox_full"
	CodePairFailed      = "pair_failed"
	CodeInternal        = "internal"
)

// Error is an error with one of the Code… values. Node implementations
// return it for failures a model can act on.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

// codeOf returns the code of err, or CodeInternal.
func codeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
