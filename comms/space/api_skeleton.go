package space

// THE DECLARATIONS BELOW ARE THE AGREED API; bodies are being written and
// this file is replaced by the real implementation.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

var errTODO = errors.New("space: not built yet")

// ---- Roster file (spaces.json) ----

// Delivery modes of a space.
const (
	DeliveryAll       = "all"       // every member receives every envelope (default)
	DeliveryAddressed = "addressed" // only the members named in "to" (all if "to" is empty)
)

// Member is one roster entry: a key, the participant id bound to it and
// the capabilities this node enforces for it.
type Member struct {
	Key          identity.PeerID   `json:"key"`
	ID           string            `json:"id"`
	Capabilities []meup.Capability `json:"capabilities"`
}

// Config is one space as spaces.json holds it.
type Config struct {
	Name     string   `json:"name"`
	Delivery string   `json:"delivery,omitempty"` // DeliveryAll ("") or DeliveryAddressed
	Members  []Member `json:"members"`
}

// Roster is the whole spaces.json file: the spaces this node takes part
// in. It is validated on load (names, ids and keys unique, capabilities
// compile) with errors naming the space and member at fault.
type Roster struct {
	Spaces []Config `json:"spaces"`
}

// ParseRoster decodes and validates spaces.json.
func ParseRoster(data []byte) (*Roster, error) { return nil, errTODO }

// LoadRoster reads path; a missing file is an empty roster.
func LoadRoster(path string) (*Roster, error) { return nil, errTODO }

// Save writes the roster to path atomically with mode 0600.
func (r *Roster) Save(path string) error { return errTODO }

// ---- What the engine needs from the node ----

// SendOptions say how one copy is delivered.
type SendOptions struct {
	Reliable bool          // through the outbox, retried until acked
	TTL      time.Duration // reliable: 0 is the node's default
	NoWait   bool          // reliable: return once stored
}

// Delivery is the outcome of one copy.
type Delivery struct {
	ID        string // the Meerkat envelope id of this copy
	Delivery  string // "acked", "queued", "written"
	LastError string
}

// Sender delivers one MEUP envelope (its JSON text) in space to one member
// inside a signed Meerkat envelope of type "meup". The node implements it.
type Sender interface {
	SendMEUP(ctx context.Context, to identity.PeerID, space string, envelope []byte, o SendOptions) (Delivery, error)
}

// ---- The engine ----

// Options configure an Engine.
type Options struct {
	Self        identity.PeerID            // this node's key
	Protocol    string                     // emitted protocol ("" : meup.DefaultProtocol)
	ProposalTTL time.Duration              // a pending proposal expires after this (0: 1 hour)
	Trusted     func(identity.PeerID) bool // whether a key is in the trust list now
	Now         func() time.Time           // nil: time.Now
	Logger      *slog.Logger               // nil: discard
	Observe     func(Refusal)              // told of every refused envelope (audit); must not block
}

// Engine runs the spaces of one node. Its methods are safe for concurrent
// use.
type Engine struct{}

// New returns an engine keeping its state in st and sending through snd.
func New(st Store, snd Sender, roster *Roster, o Options) (*Engine, error) { return nil, errTODO }

// SetRoster replaces the rosters (spaces.json reloaded or edited).
func (e *Engine) SetRoster(r *Roster) {}

// Roster returns the rosters in force.
func (e *Engine) Roster() *Roster { return nil }

// Refusal is an envelope the engine refused.
type Refusal struct {
	Space  string
	From   identity.PeerID
	MEUPID string // may be empty if it did not parse
	Kind   string
	Reason string // a meup.Reason… code
	Detail string
}

// Verdict is what the engine decided about one received envelope.
type Verdict struct {
	// Deliver is true when the envelope goes to the inbox (false for
	// refusals, duplicates, and presence/welcome, which only update
	// state).
	Deliver     bool
	Envelope    meup.Envelope // parsed and normalised (when it parsed)
	Participant string        // the sender's participant id
	Refused     *Refusal      // non-nil: refused (acked, stored nowhere)
}

// Receive runs every check on a MEUP envelope (its JSON text) that key
// from sent in space, applies it (grants, revokes, proposals, presence),
// and answers refusals with a system/error (rate-limited; never to
// system/*). It never blocks on the network.
func (e *Engine) Receive(from identity.PeerID, space string, envelope []byte) Verdict {
	return Verdict{}
}

// Undo forgets a delivered envelope's id (its admission to the inbox
// failed, so its resend must not be taken for a repeat).
func (e *Engine) Undo(space string, from identity.PeerID, meupID string) {}

// Draft is an envelope to send: the engine fills in protocol, id, ts and
// from.
type Draft struct {
	Kind          string
	To            []string // participant ids ("" : everybody)
	CorrelationID []string
	Context       string
	Payload       json.RawMessage
}

// Copy is one member's copy of a sent envelope.
type Copy struct {
	Participant string `json:"participant"`
	Key         string `json:"key"`
	ID          string `json:"id,omitempty"`       // Meerkat envelope id
	Delivery    string `json:"delivery,omitempty"` // acked, queued, written
	LastError   string `json:"last_error,omitempty"`
	Skipped     string `json:"skipped,omitempty"` // why no copy was sent (not trusted, does not speak MEUP)
}

// Sent reports a send.
type Sent struct {
	Envelope meup.Envelope `json:"envelope"`
	Copies   []Copy        `json:"copies"`
}

// Send builds an envelope from d as this node's participant, validates it
// and sends one copy to each other member (or the addressed ones).
func (e *Engine) Send(ctx context.Context, space string, d Draft, o SendOptions) (Sent, error) {
	return Sent{}, errTODO
}

// Announce sends system/presence (event "join" or "leave") to every
// member of every space.
func (e *Engine) Announce(ctx context.Context, event string) {}

// NoMEUP records that peer closed connections on MEUP frames: no more
// copies go to it until it sends MEUP itself or SetRoster names it again.
func (e *Engine) NoMEUP(peer identity.PeerID, why string) {}

// MemberInfo is a member as list_spaces shows it.
type MemberInfo struct {
	ID           string            `json:"id"`
	Key          string            `json:"key"`
	Self         bool              `json:"self,omitempty"`
	Status       string            `json:"status"`              // active, pending (key not trusted), no_meup
	Presence     string            `json:"presence"`            // online, offline, unknown
	LastSeen     *time.Time        `json:"last_seen,omitempty"` // last envelope from it in this space
	Capabilities []meup.Capability `json:"capabilities"`        // roster
	Granted      []meup.Capability `json:"granted,omitempty"`   // live grants
	Refused      uint64            `json:"refused,omitempty"`   // envelopes from it this node refused
	Note         string            `json:"note,omitempty"`
}

// Info is a space as list_spaces shows it.
type Info struct {
	Name     string       `json:"name"`
	Self     string       `json:"self"` // this node's participant id
	Delivery string       `json:"delivery"`
	Members  []MemberInfo `json:"members"`
	Pending  int          `json:"pending_proposals"`
}

// Spaces lists the spaces.
func (e *Engine) Spaces() []Info { return nil }

// Proposals lists proposals of space ("" : all) in state ("" : all).
func (e *Engine) Proposals(space, state string) ([]Proposal, error) { return nil, errTODO }

// Grants lists live grants of space ("" : all).
func (e *Engine) Grants(space string) ([]Grant, error) { return nil, errTODO }
