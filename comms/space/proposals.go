package space

import (
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// proposalIndex holds the proposals of one space the engine can still be
// asked about: every pending one, and closed ones until MaxTrackedPerSpace
// pushes them out (oldest first). The Store keeps them all; Proposals
// lists from there.
type proposalIndex struct {
	byID      map[string]*Proposal
	byRequest map[string]string // the mcp/request that fulfilled a proposal → the proposal's id
	order     []string          // proposal ids, oldest first
	bytes     int               // payload bytes of the proposals held
	// forgot: some proposal was let go (or never loaded): an id not here
	// may still be a stored proposal's.
	forgot bool
}

func (e *Engine) proposalsLocked(space string) *proposalIndex {
	x := e.proposals[space]
	if x == nil {
		x = &proposalIndex{byID: make(map[string]*Proposal), byRequest: make(map[string]string)}
		e.proposals[space] = x
	}
	return x
}

// add tracks p (a copy), replacing the proposal with the same id (an
// update of it: the rules refuse a new proposal reusing an id), and
// forgets the oldest closed or expired proposals beyond
// MaxTrackedPerSpace or MaxProposalBytes.
func (x *proposalIndex) add(p Proposal, now time.Time) {
	if old, ok := x.byID[p.ID]; ok {
		x.bytes -= len(old.Payload)
	} else {
		x.order = append(x.order, p.ID)
	}
	x.byID[p.ID] = &p
	x.bytes += len(p.Payload)
	if p.RequestID != "" {
		x.byRequest[p.RequestID] = p.ID
	}
	if len(x.byID) <= MaxTrackedPerSpace && x.bytes <= MaxProposalBytes {
		return
	}
	kept := x.order[:0]
	for _, id := range x.order {
		q := x.byID[id]
		over := len(x.byID) > MaxTrackedPerSpace || x.bytes > MaxProposalBytes
		if over && id != p.ID && (q.State != ProposalPending || !now.Before(q.Expires)) {
			delete(x.byID, id)
			x.forgot = true
			x.bytes -= len(q.Payload)
			if q.RequestID != "" {
				delete(x.byRequest, q.RequestID)
			}
			continue
		}
		kept = append(kept, id)
	}
	clear(x.order[len(kept):])
	x.order = kept
}

// pendingBytes sums the payloads of the live pending proposals.
func (x *proposalIndex) pendingBytes(key identity.PeerID, now time.Time) (byKey, all int) {
	for _, p := range x.byID {
		if p.State == ProposalPending && now.Before(p.Expires) {
			all += len(p.Payload)
			if p.Key == key {
				byKey += len(p.Payload)
			}
		}
	}
	return byKey, all
}

// pending counts the pending proposals (expired ones excluded) of key.
func (x *proposalIndex) pending(key identity.PeerID, now time.Time) (byKey, all int) {
	for _, p := range x.byID {
		if p.State == ProposalPending && now.Before(p.Expires) {
			all++
			if p.Key == key {
				byKey++
			}
		}
	}
	return byKey, all
}

// expireLocked marks p expired if it is pending and its time has passed,
// and stores the change. It reports whether p is (now) expired.
func (e *Engine) expireLocked(p *Proposal, now time.Time) bool {
	if p.State == ProposalExpired {
		return true
	}
	if p.State != ProposalPending || now.Before(p.Expires) {
		return false
	}
	p.State = ProposalExpired
	p.Updated = now
	if err := e.st.PutProposal(*p); err != nil {
		e.log.Warn("space: storing an expired proposal failed", "space", p.Space, "proposal", p.ID, "err", err)
	}
	return true
}

// Proposals lists proposals of space ("" : all) in state ("" : all),
// oldest first. A pending proposal whose time has passed is listed, and
// stored, as expired.
func (e *Engine) Proposals(space, state string) ([]Proposal, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps, err := e.st.Proposals(space)
	if err != nil {
		return nil, err
	}
	now := e.now()
	out := ps[:0]
	for _, p := range ps {
		if p.State == ProposalPending && !now.Before(p.Expires) {
			if x := e.proposals[p.Space]; x != nil && x.byID[p.ID] != nil {
				e.expireLocked(x.byID[p.ID], now)
				p = *x.byID[p.ID]
			} else {
				e.expireLocked(&p, now)
			}
		}
		if state == "" || p.State == state {
			out = append(out, p)
		}
	}
	return out, nil
}

// Grants lists live grants of space ("" : all), oldest first.
func (e *Engine) Grants(space string) ([]Grant, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Grants(space)
}
