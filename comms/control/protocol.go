package control

import (
	"encoding/json"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Limits of the protocol.
const (
	// MaxRequest bounds one request line: a send carries at most one body
	// of up to 1 MiB, up to six times longer once JSON-escaped.
	MaxRequest = 8 << 20
	// MaxReply bounds one reply: a Receive batch is about
	// node.MaxBatchBytes plus one item, escaped.
	MaxReply = 64 << 20
)

// Operations, one per node.API method.
const (
	OpSelf             = "self"
	OpStatus           = "status"
	OpPeers            = "peers"
	OpSendMessage      = "send_message"
	OpSendRequest      = "send_request"
	OpAwaitResponses   = "await_responses"
	OpSendResponse     = "send_response"
	OpReceive          = "receive"
	OpAck              = "ack"
	OpOutbox           = "outbox"
	OpRetryOutbox      = "retry_outbox"
	OpDropQueued       = "drop_queued"
	OpDeadLetters      = "dead_letters"
	OpRetryDeadLetters = "retry_dead_letters"
	OpDropDeadLetters  = "drop_dead_letters"
	OpPairOffer        = "pair_offer"
	OpPairWait         = "pair_wait"
	OpPairCancel       = "pair_cancel"
	OpPairAccept       = "pair_accept"
	OpSpaces           = "spaces"
	OpSpaceEdit        = "space_edit"
	OpSpaceSend        = "space_send"
	OpProposals        = "proposal_page" // a page and whether more follow

	// Item classes: a person's note to the agent (args: TellArgs).
	OpTell = "tell"
	// Slice B: delivery status (client_sent.go).
	OpMessageStatus = "message_status"
	OpSentList      = "sent_list"
	// Slice C: search.
	OpSearch = "search"
	// Broadcast and tasks slice.
	OpBroadcast    = "broadcast"
	OpTaskComplete = "task_complete"
	OpTasks        = "tasks"
	OpWaitTask     = "wait_task"
	// Agent cards (slice E).
	OpCard         = "card"
	OpCardEdit     = "card_edit"
	OpFetchCard    = "fetch_card"
	OpDescribePeer = "describe_peer"
	// Slice F: request lifecycle (client_f.go).
	OpCancelRequest = "cancel_request"
	OpRequests      = "requests"
	// Slice G: the loop guard.
	OpLoopGuards  = "loop_guards"
	OpLoopRelease = "loop_release"

	// OpApplyTrust has the node take in its edited trust file now
	// (Client.ApplyTrust); it is no node.API method.
	OpApplyTrust = "apply_trust"
)

// CancelRequestArgs are the arguments of OpCancelRequest.
type CancelRequestArgs struct {
	RequestID string           `json:"request_id"`
	Reason    string           `json:"reason,omitempty"`
	Options   node.SendOptions `json:"options"`
}

// Request is one control request.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers a Request. A failed call may carry a partial result
// too (a request that was acknowledged but whose response did not come).
type Response struct {
	OK     bool            `json:"ok"`
	Code   string          `json:"code,omitempty"`  // a node.Code… value when !OK
	Error  string          `json:"error,omitempty"` // the message when !OK
	Result json.RawMessage `json:"result,omitempty"`
	// Closing is set when the call failed because the node is shutting
	// down: the client may make a call that changes nothing again, on
	// whatever serves the home next.
	Closing bool `json:"closing,omitempty"`
}

// SendMessageArgs are the arguments of OpSendMessage.
type SendMessageArgs struct {
	Peer    string           `json:"peer"`
	Body    string           `json:"body"`
	Options node.SendOptions `json:"options"`
}

// SendRequestArgs are the arguments of OpSendRequest.
type SendRequestArgs struct {
	Peer    string           `json:"peer"`
	Intent  string           `json:"intent"`
	Params  json.RawMessage  `json:"params,omitempty"`
	Options node.SendOptions `json:"options"`
}

// AwaitArgs are the arguments of OpAwaitResponses.
type AwaitArgs struct {
	ID       string        `json:"id"`
	Wait     time.Duration `json:"wait"`
	Deadline time.Time     `json:"deadline,omitzero"`
}

// SendResponseArgs are the arguments of OpSendResponse.
type SendResponseArgs struct {
	Peer      string           `json:"peer"`
	RequestID string           `json:"request_id"`
	Status    string           `json:"status"`
	Result    json.RawMessage  `json:"result,omitempty"`
	Options   node.SendOptions `json:"options"`
}

// RetryOutboxArgs are the arguments of OpRetryOutbox.
type RetryOutboxArgs struct {
	Peer string `json:"peer,omitempty"` // "": every peer
}

// DropQueuedArgs are the arguments of OpDropQueued.
type DropQueuedArgs struct {
	IDs []string `json:"ids"`
}

// DeadLettersArgs are the arguments of OpRetryDeadLetters and
// OpDropDeadLetters.
type DeadLettersArgs struct {
	IDs []string `json:"ids,omitempty"`
	All bool     `json:"all,omitempty"`
}

// OfferArgs are the arguments of OpPairWait and OpPairCancel.
type OfferArgs struct {
	ID string `json:"id"` // OpPairCancel: also an offer's line, or "" for every open offer
}

// PairAcceptArgs are the arguments of OpPairAccept.
type PairAcceptArgs struct {
	Line string `json:"line"`
	Name string `json:"name,omitempty"`
}

// TaskCompleteArgs are the arguments of OpTaskComplete.
type TaskCompleteArgs struct {
	TaskID  string           `json:"task_id"`
	Result  json.RawMessage  `json:"result,omitempty"`
	Options node.SendOptions `json:"options"`
}

// WaitTaskArgs are the arguments of OpWaitTask.
type WaitTaskArgs struct {
	TaskID string        `json:"task_id"`
	Wait   time.Duration `json:"wait,omitempty"`
}

// The arguments of OpBroadcast are a node.BroadcastArgs, of OpTasks a
// node.TaskQuery.

// ReleaseLoopGuardArgs are the arguments of OpLoopRelease.
type ReleaseLoopGuardArgs struct {
	Peer string `json:"peer"`
}

// The arguments of OpReceive are a node.Query, of OpAck a
// node.AckRequest, of OpPairOffer node.PairOptions, of OpSearch a
// node.SearchQuery; the other operations take none.
