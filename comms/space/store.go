package space

import (
	"encoding/json"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// Grant is a capability/grant this node accepted (or sent): extra
// capabilities for one member of one space, on top of its roster entry,
// until revoked.
type Grant struct {
	Space        string
	ID           string          // the capability/grant envelope's MEUP id
	Granter      identity.PeerID // who granted (its key)
	Grantee      identity.PeerID // who may now do more (its key)
	Capabilities []meup.Capability
	Created      time.Time
}

// Proposal states.
const (
	ProposalPending   = "pending"
	ProposalFulfilled = "fulfilled"
	ProposalRejected  = "rejected"
	ProposalWithdrawn = "withdrawn"
	ProposalExpired   = "expired"
)

// Proposal is an mcp/proposal seen in a space (sent or received) and what
// became of it.
type Proposal struct {
	Space      string
	ID         string          // the proposal's MEUP id
	Proposer   string          // participant id
	Key        identity.PeerID // the proposer's key
	To         []string        // the participants the proposal addressed
	Payload    json.RawMessage // the proposed call (method, params)
	State      string          // a Proposal… constant
	Created    time.Time
	Expires    time.Time // a pending proposal expires then
	Updated    time.Time // last state change
	By         string    // participant that fulfilled or rejected it
	Reason     string    // rejection reason
	RequestID  string    // the mcp/request that fulfilled it
	ResponseID string    // the mcp/response to that request
}

// Store keeps what a space engine must not forget across restarts:
// grants, proposals and the MEUP ids already seen. [store.Store] (SQLite)
// and [MemStore] implement it; storetest checks both. Implementations are
// safe for concurrent use.
type Store interface {
	// Remember records that sender sent MEUP id in space at time at. It
	// reports false (and changes nothing) if that triple was recorded
	// before and not yet expired.
	Remember(space string, sender identity.PeerID, id string, at time.Time) (fresh bool, err error)
	// Forget removes a remembered triple (its admission failed, so a
	// resend must not count as a repeat).
	Forget(space string, sender identity.PeerID, id string) error
	// PutGrant stores g, replacing a grant with the same space and ID.
	PutGrant(g Grant) error
	// DeleteGrants deletes the grants of space with these ids and reports
	// how many it found.
	DeleteGrants(space string, ids ...string) (int, error)
	// Grants returns the grants of space ("" for every space), oldest
	// first.
	Grants(space string) ([]Grant, error)
	// PutProposal stores p, replacing a proposal with the same space and
	// ID.
	PutProposal(p Proposal) error
	// Proposals returns the proposals of space ("" for every space),
	// oldest first.
	Proposals(space string) ([]Proposal, error)
	// Expire deletes remembered ids older than seenBefore and proposals
	// that are no longer pending and were last updated before
	// closedBefore; it reports how many rows of each it deleted.
	Expire(seenBefore, closedBefore time.Time) (seen, proposals int, err error)
}
