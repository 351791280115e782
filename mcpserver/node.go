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
	// SendMessage sends body to peer (name, key or peer UUID) and returns
	// once the peer acknowledged it.
	SendMessage(ctx context.Context, peer, body string) (Sent, error)
	// SendRequest sends a request and returns once it is acknowledged.
	SendRequest(ctx context.Context, peer, intent string, params json.RawMessage) (Sent, error)
	// SendResponse answers a request this node received.
	SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage) (Sent, error)
	// Receive lists unacknowledged items matching q, oldest first, waiting
	// up to q.Wait for the first one when none match yet.
	Receive(ctx context.Context, q Query) (Batch, error)
	// Ack marks items handled: those with the given ids, and every item
	// with a sequence number up to upTo (0: none by sequence) that matches
	// filter's Kinds, From and RequestID.
	Ack(ctx context.Context, ids []string, upTo uint64, filter Query) (acked, pending int, err error)
}

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
}

// Sent reports a send.
type Sent struct {
	ID       string `json:"id"`       // the envelope id (the request id for requests)
	Peer     string `json:"peer"`     // the peer's trust-list name
	Delivery string `json:"delivery"` // "acked" (message, request) or "written" (response)
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
