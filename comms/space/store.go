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
	// RequestTo is the participants that request addressed, whose
	// response alone is recorded (none: any member's).
	RequestTo []string
}

// Remembered is what [Store.Remember] found.
type Remembered int

// What Remember found.
const (
	RememberRepeat   Remembered = iota // seen before in another copy: the MEUP envelope sent again
	RememberNew                        // never seen: recorded now
	RememberSameCopy                   // seen before in this very copy: delivered once more
)

// Store keeps what a space engine must not forget across restarts:
// grants, proposals and the MEUP ids already seen. [store.Store] (SQLite)
// and [MemStore] implement it; storetest checks both. Implementations are
// safe for concurrent use.
type Store interface {
	// Remember records that sender sent MEUP id in space at time at, in
	// the Meerkat envelope copy (its id), and says whether the triple
	// was new. A triple recorded before (and not yet expired) changes
	// nothing: in the same copy it is that very envelope delivered once
	// more (its ack, or its admission, was lost); in another copy the
	// MEUP envelope was sent again.
	Remember(space string, sender identity.PeerID, id, copy string, at time.Time) (Remembered, error)
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
	// HasProposal reports whether a proposal of space with id is stored.
	HasProposal(space, id string) (bool, error)
	// Expire deletes remembered ids older than seenBefore, and proposals
	// closed (no longer pending) and last updated before closedBefore or
	// still pending but expired (their Expires time) before
	// closedBefore; it reports how many rows of each it deleted.
	Expire(seenBefore, closedBefore time.Time) (seen, proposals int, err error)
}
