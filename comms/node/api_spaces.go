package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
)

// SpacesAPI is the part of [API] that runs MEUP spaces (docs/meup.md).
type SpacesAPI interface {
	// Spaces lists the spaces this node takes part in, with their
	// members, presence and live grants.
	Spaces(ctx context.Context) ([]SpaceInfo, error)
	// SpaceEdit changes the rosters kept in the home (spaces.json): it
	// creates or deletes a space, adds or removes a member. It works
	// with or without a running node; a running one applies it at once.
	SpaceEdit(ctx context.Context, e SpaceEdit) (SpaceInfo, error)
	// SpaceSend sends one MEUP envelope to a space: one signed copy to
	// each other member, reliable unless opts say otherwise. Action picks
	// the envelope's shape (see SpaceMessage).
	SpaceSend(ctx context.Context, m SpaceMessage) (SpaceSent, error)
	// Proposals lists the proposals seen in a space and their states,
	// oldest first, a page at a time: at most q.Limit proposals and about
	// MaxProposalBatchBytes of JSON, after q.After, and whether more
	// follow (then the page's Cursor is the next page's After).
	Proposals(ctx context.Context, q ProposalQuery) (ProposalsPage, error)
}

// SpaceInfo is one space as this node runs it.
type SpaceInfo = space.Info

// SpaceMember is one member of a space as SpaceInfo shows it.
type SpaceMember = space.MemberInfo

// SpaceCopy is one member's copy of a sent MEUP envelope.
type SpaceCopy = space.Copy

// Space edit operations.
const (
	SpaceCreate = "create" // a new space with this node as its first member
	SpaceDelete = "delete" // forget a space here
	SpaceAdd    = "add"    // add (or replace) a member
	SpaceRemove = "remove" // remove a member
)

// SpaceEdit is one change of the rosters.
type SpaceEdit struct {
	Op    string `json:"op"` // a Space… operation
	Space string `json:"space"`
	// Create: this node's participant id, the space's delivery mode
	// ("all" or "addressed") and this node's own capabilities (default
	// every kind).
	As       string `json:"as,omitempty"`
	Delivery string `json:"delivery,omitempty"`
	// Add: the member's key, or the trust-list name or peer UUID of a
	// trusted peer (a key not trusted yet is added as pending), its
	// participant id and capabilities (a JSON array of capability
	// objects; default: chat and proposals). Remove: the participant id
	// or the key.
	Peer         string          `json:"peer,omitempty"`
	ID           string          `json:"id,omitempty"`
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
}

// Space send actions: what SpaceMessage builds.
const (
	ActSend     = "send"     // Kind, Payload, To, CorrelationID, Context as given
	ActChat     = "chat"     // chat with Text
	ActPropose  = "propose"  // mcp/proposal of Method and Params
	ActFulfill  = "fulfill"  // mcp/request carrying Proposal's call, correlated to it
	ActRespond  = "respond"  // mcp/response to the mcp/request Request, with Result or Error
	ActReject   = "reject"   // mcp/reject of Proposal, with Reason
	ActWithdraw = "withdraw" // mcp/withdraw of this node's Proposal
	ActGrant    = "grant"    // capability/grant of Capabilities to Recipient
	ActRevoke   = "revoke"   // capability/revoke of GrantID or Capabilities from Recipient
)

// SpaceMessage is an envelope to send to a space.
type SpaceMessage struct {
	Space  string `json:"space"`
	Action string `json:"action"` // an Act… value ("": send)

	Kind          string          `json:"kind,omitempty"`
	To            []string        `json:"to,omitempty"` // participant ids addressed (empty: everybody)
	CorrelationID []string        `json:"correlation_id,omitempty"`
	Context       string          `json:"context,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`

	Text         string          `json:"text,omitempty"`         // chat
	Method       string          `json:"method,omitempty"`       // propose
	Params       json.RawMessage `json:"params,omitempty"`       // propose
	Proposal     string          `json:"proposal,omitempty"`     // fulfill, reject, withdraw: the proposal's MEUP id
	Request      string          `json:"request,omitempty"`      // respond: the mcp/request's MEUP id
	Result       json.RawMessage `json:"result,omitempty"`       // respond
	Error        json.RawMessage `json:"error,omitempty"`        // respond (instead of Result)
	Reason       string          `json:"reason,omitempty"`       // reject
	Recipient    string          `json:"recipient,omitempty"`    // grant, revoke: participant id
	Capabilities json.RawMessage `json:"capabilities,omitempty"` // grant, revoke: JSON array
	GrantID      string          `json:"grant_id,omitempty"`     // revoke

	SendOptions
}

// SpaceSent reports a space send.
type SpaceSent struct {
	Space    string          `json:"space"`
	ID       string          `json:"id"`   // the MEUP id (shared by every copy)
	Kind     string          `json:"kind"` // the MEUP kind
	Envelope json.RawMessage `json:"envelope"`
	Copies   []SpaceCopy     `json:"copies"` // one per member, with its Meerkat envelope id
	// NotApplied says why the envelope changed nothing on this node: a
	// grant beyond what this node's participant holds here (members
	// whose rosters give it more may take it), or any rule a plain send
	// (ActSend) breaks here. The other actions refuse, unsent, what
	// every member's node would refuse (a revoke of no live grant, a
	// withdraw of another's proposal): see space.Draft.Strict.
	NotApplied string `json:"not_applied,omitempty"`
	// Replayed is true for the result of an earlier send with the same
	// idempotency key, returned without sending again.
	Replayed bool `json:"replayed,omitempty"`
}

// NotAppliedEffect says, for a send with NotApplied, what the members
// do with it: a reserved system/* kind every member refuses, and none
// answers a system/* envelope; for any other rule, members whose
// rosters agree refuse it and answer with a system/error. "" when the
// send was applied.
func (s SpaceSent) NotAppliedEffect() string {
	switch {
	case s.NotApplied == "":
		return ""
	case strings.HasPrefix(s.NotApplied, meup.ReasonReservedKind+":"):
		return "every member refuses it, and none answers a system/* envelope"
	}
	return "members whose rosters agree refuse it and answer with a system/error"
}

// CopiesError is the error of a space send some of whose copies were
// sent but not delivered (a direct copy a member did not take), nil if
// every copy was delivered, queued or skipped.
func (s SpaceSent) CopiesError() error {
	failed, sent := 0, 0 // of the copies sent (not skipped)
	for _, c := range s.Copies {
		if c.Skipped == "" {
			sent++
			if c.Delivery == "" {
				failed++
			}
		}
	}
	return copiesError(failed, sent)
}

// ProposalQuery selects proposals.
type ProposalQuery struct {
	Space string `json:"space,omitempty"` // "": every space
	State string `json:"state,omitempty"` // "": every state
	// Limit bounds the proposals of a page: 1 to MaxProposalLimit (0:
	// MaxProposalLimit). A page also stops before MaxProposalBatchBytes.
	Limit int `json:"limit,omitempty"`
	// After is a cursor ([ProposalCursor] of the last proposal of the
	// previous page): only the proposals listed after it ("": from the
	// first).
	After string `json:"after,omitempty"`
}

// Proposal is a proposal seen in a space and what became of it.
type Proposal struct {
	Space      string          `json:"space"`
	ID         string          `json:"id"`
	Proposer   string          `json:"proposer"`
	Key        string          `json:"key"`
	To         []string        `json:"to,omitempty"`
	Payload    json.RawMessage `json:"payload"`
	State      string          `json:"state"` // pending, fulfilled, rejected, withdrawn, expired
	Created    time.Time       `json:"created"`
	Expires    time.Time       `json:"expires"`
	Updated    time.Time       `json:"updated"`
	By         string          `json:"by,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	RequestID  string          `json:"request_id,omitempty"`
	ResponseID string          `json:"response_id,omitempty"`
}

// MEUPItem is what an inbox item of kind "meup" carries besides its
// Meerkat fields: the space, the verified sender's participant id, the
// MEUP id and kind, and the whole envelope as received.
type MEUPItem struct {
	Space       string   `json:"space"`
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	Participant string   `json:"participant"` // the sender, bound to its key by this node's roster
	To          []string `json:"to,omitempty"`
	Context     string   `json:"context,omitempty"`
	// Envelope is the MEUP envelope as the sender wrote it (any JSON
	// object; its content is the peer's, untrusted).
	Envelope any `json:"envelope"`
}

// UnmarshalJSON decodes a MEUPItem keeping its envelope as
// json.RawMessage (numbers keep their exact text).
func (m *MEUPItem) UnmarshalJSON(b []byte) error {
	type plain MEUPItem
	var raw struct {
		plain
		Envelope json.RawMessage `json:"envelope"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = MEUPItem(raw.plain)
	m.Envelope = rawOrNil(raw.Envelope)
	return nil
}

// CapabilityArgs reads capabilities as a command line gives them: each a
// kind pattern (chat, mcp/*), a JSON capability object, or a JSON array
// of them. It returns them as the JSON array SpaceEdit and SpaceMessage
// take (nil for none), or an error for an object or array that is not
// JSON; the node checks each capability when it uses them.
func CapabilityArgs(list []string) (json.RawMessage, error) {
	if len(list) == 0 {
		return nil, nil
	}
	parts := make([]string, 0, len(list))
	for _, c := range list {
		c = strings.TrimSpace(c)
		switch {
		case strings.HasPrefix(c, "{"):
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(c), &obj); err != nil {
				return nil, fmt.Errorf("capability %s is not a JSON capability object: %v", c, err)
			}
		case strings.HasPrefix(c, "["):
			var items []json.RawMessage
			err := json.Unmarshal([]byte(c), &items)
			for _, it := range items {
				if !bytes.HasPrefix(bytes.TrimSpace(it), []byte("{")) {
					err = errors.New("not an object")
				}
				parts = append(parts, string(it))
			}
			if err != nil {
				return nil, fmt.Errorf("capability %s is not a JSON array of capability objects", c)
			}
			continue
		default:
			b, err := stringCapability(c)
			if me := (*meup.Error)(nil); errors.As(err, &me) {
				err = errors.New(me.Msg) // what is wrong with it, without the protocol's reason
			}
			if err != nil {
				return nil, fmt.Errorf("capability %q: %v", c, err)
			}
			c = string(b)
		}
		parts = append(parts, c)
	}
	return json.RawMessage("[" + strings.Join(parts, ",") + "]"), nil
}

// stringCapability is the capability object a capability written as a
// string stands for, as rosters read it (meup.CapabilityFromString): a
// kind pattern, or "KIND:METHOD".
func stringCapability(s string) (json.RawMessage, error) {
	c, err := meup.CapabilityFromString(s)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}
