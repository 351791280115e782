package meup

import (
	"encoding/json"
	"errors"
)

// Protocol ids this package reads. [DefaultProtocol] is the one a node
// emits unless configured otherwise.
const (
	ProtocolMEUP01  = "meup/v0.1"
	ProtocolMEUP02  = "meup/v0.2"
	ProtocolMEW03   = "mew/v0.3"
	ProtocolMEW04   = "mew/v0.4"
	ProtocolMCPx01  = "mcpx/v0.1" // read only: translated on parse, never emitted
	DefaultProtocol = ProtocolMEUP01
)

// The kinds of the MEUP v0.1 seed, in their normalised (slash) form.
const (
	KindMCPRequest         = "mcp/request"
	KindMCPResponse        = "mcp/response"
	KindMCPProposal        = "mcp/proposal"
	KindMCPWithdraw        = "mcp/withdraw"
	KindMCPReject          = "mcp/reject"
	KindReasoningStart     = "reasoning/start"
	KindReasoningThought   = "reasoning/thought"
	KindReasoningConclude  = "reasoning/conclusion"
	KindCapabilityGrant    = "capability/grant"
	KindCapabilityRevoke   = "capability/revoke"
	KindCapabilityGrantAck = "capability/grant-ack"
	KindSpaceInvite        = "space/invite"
	KindSpaceKick          = "space/kick"
	KindChat               = "chat"
	KindSystemPresence     = "system/presence"
	KindSystemWelcome      = "system/welcome"
	KindSystemError        = "system/error"
)

// Limits on one envelope and on capability sets. Everything a peer sends
// is held to them; see docs/meup.md.
const (
	MaxEnvelopeBytes  = 512 << 10 // the envelope's JSON text
	MaxPayloadBytes   = 256 << 10 // the payload's JSON text
	MaxDepth          = 32        // nesting of the payload
	MaxIDLen          = 128       // id, correlation ids, participant ids
	MaxKindLen        = 64
	MaxContextLen     = 256
	MaxTo             = 256     // addressees
	MaxCorrelation    = 16      // correlation ids
	MaxCapabilities   = 64      // capabilities in one set (a roster entry, a grant)
	MaxPatternLen     = 512     // one pattern string (glob, regex) in a capability
	MaxCapabilityJSON = 8 << 10 // one capability's JSON text
)

// Envelope is one MEUP envelope in normalised form: kinds with slashes,
// correlation ids as a list, whatever the protocol it arrived in.
type Envelope struct {
	Protocol      string          `json:"protocol"`
	ID            string          `json:"id"`
	TS            string          `json:"ts,omitempty"`
	From          string          `json:"from"`
	To            []string        `json:"to,omitempty"`
	Kind          string          `json:"kind"`
	CorrelationID []string        `json:"correlation_id,omitempty"`
	Context       string          `json:"context,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

// Capability is one capability pattern: a kind pattern (a string or an
// array of strings) and an optional payload pattern. See [Compile] for
// the pattern language.
type Capability struct {
	ID      string          `json:"id,omitempty"`
	Kind    json.RawMessage `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Reason codes: why an envelope is refused. They appear in system/error
// payloads ("error") and in the node's audit log.
const (
	ReasonInvalidEnvelope     = "invalid_envelope"     // malformed, over a bound, or fails its kind's rules
	ReasonUnsupportedProtocol = "unsupported_protocol" // protocol id not accepted
	ReasonUnknownSpace        = "unknown_space"        // this node has no such space (or is not in it)
	ReasonNotAMember          = "not_a_member"         // the signing key is not an active member
	ReasonFromMismatch        = "from_mismatch"        // from is not the participant bound to the key
	ReasonReservedKind        = "reserved_kind"        // system/* in a shape members may not send
	ReasonCapability          = "capability_violation" // no capability matches
	ReasonUnknownProposal     = "unknown_proposal"     // reject/withdraw naming no known proposal
	ReasonNotProposer         = "not_proposer"         // withdraw by someone else
	ReasonGrantExceeds        = "grant_exceeds"        // a grant beyond what the granter holds
	ReasonDuplicate           = "duplicate"            // this MEUP id was seen from this sender
	ReasonRateLimited         = "rate_limited"
)

// Error is a refusal with its reason code.
type Error struct {
	Reason string // a Reason… constant
	Field  string // the envelope field at fault, if any
	Msg    string
	// TooLarge marks an envelope or payload over its size limit
	// (MaxEnvelopeBytes, MaxPayloadBytes): errors.Is(err, ErrTooLarge).
	TooLarge bool
}

// ErrTooLarge matches an [*Error] of an envelope or payload over its size
// limit.
var ErrTooLarge = errors.New("meup: envelope or payload too large")

// Is reports whether e is target, [ErrTooLarge] for a size error.
func (e *Error) Is(target error) bool { return target == ErrTooLarge && e.TooLarge }

func (e *Error) Error() string {
	if e.Field != "" {
		return "meup: " + e.Reason + ": " + e.Field + ": " + e.Msg
	}
	return "meup: " + e.Reason + ": " + e.Msg
}

// ReasonOf returns the reason code of err, or ReasonInvalidEnvelope when
// err is not an *Error.
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonInvalidEnvelope
}
