package space

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// A grant passes on rights its granter holds; it stands only while they
// still back it. pruneGrantsLocked drops a grant once
//
//   - its space is gone from the roster, or its granter or its grantee is
//     no longer a member of it (removed, kicked); or
//   - its granter no longer holds what it gives: neither the granter's
//     roster entry nor a grant to the granter that stands covers each of
//     its capabilities (the test a grant passed when it was made);
//
// and then the grants that stood on it, and so on. Grants that back each
// other in a ring, with nothing outside the ring behind them, do not
// stand: only grants the rosters back, one grant at a time, do.
//
// It runs when the roster changes (New, SetRoster, a kick or an invite),
// and after a revoke. What it drops is deleted from the store; should the
// store fail, the grants are dropped here all the same (fail closed) and
// deleted when the engine next starts.

// pruneGrantsLocked drops the grants of space that no longer stand (see
// above). Only the grants of the members in changed are checked again,
// with those of their grantees, and of theirs, and so on: the other
// grants stood when they were last checked and nothing behind them
// changed. changed nil: every grant is checked. e.mu must be held.
func (e *Engine) pruneGrantsLocked(space string, changed map[identity.PeerID]bool) {
	gs := e.grants[space]
	if len(gs) == 0 {
		return
	}
	if changed != nil {
		// Whoever received a grant from a member whose rights changed
		// may hold less too.
		for grown := true; grown; {
			grown = false
			for _, g := range gs {
				if changed[g.g.Granter] && !changed[g.g.Grantee] {
					changed[g.g.Grantee] = true
					grown = true
				}
			}
		}
	}
	stand := standingGrants(e.spaces[space], gs, changed)
	var kept []*grantEntry
	var gone []string
	for _, g := range gs {
		if stand[g] {
			kept = append(kept, g)
		} else {
			gone = append(gone, g.g.ID)
			e.lapseLocked(space, g.g)
		}
	}
	if len(gone) == 0 {
		return
	}
	e.log.Info("space: grants no longer backed by what their granters hold are dropped", "space", space, "grants", gone)
	if _, err := e.st.DeleteGrants(space, gone...); err != nil {
		e.log.Warn("space: deleting dropped grants failed; they are dropped here and deleted at the next start", "space", space, "err", err)
	}
	if len(kept) == 0 {
		delete(e.grants, space)
	} else {
		e.grants[space] = kept
	}
	e.grantsChangedLocked(space)
}

// standingGrants returns the grants of gs (a space's, oldest first) that
// stand in sp (nil: the space is gone). A grant whose granter is not in
// changed stands if its granter and grantee are members; the others must
// be backed by their granter's roster entry and the grants found to
// stand (a ring of grants backing each other is never found to stand).
func standingGrants(sp *spaceState, gs []*grantEntry, changed map[identity.PeerID]bool) map[*grantEntry]bool {
	stand := make(map[*grantEntry]bool, len(gs))
	if sp == nil {
		return stand
	}
	var check []*grantEntry
	for _, g := range gs {
		granter, grantee := sp.byKey[g.g.Granter], sp.byKey[g.g.Grantee]
		switch {
		case granter == nil || grantee == nil || granter == grantee:
		case changed != nil && !changed[g.g.Granter]:
			stand[g] = true
		default:
			check = append(check, g)
		}
	}
	// A worklist: each grant to check is tried once, and again each time
	// a grant to its granter is found to stand (it may hold more now).
	toGrantee := map[identity.PeerID][]*grantEntry{} // standing grants, by grantee
	for g := range stand {
		toGrantee[g.g.Grantee] = append(toGrantee[g.g.Grantee], g)
	}
	byGranter := map[identity.PeerID][]*grantEntry{} // the grants to check, by granter
	for _, g := range check {
		byGranter[g.g.Granter] = append(byGranter[g.g.Granter], g)
	}
	work := slices.Clone(check)
	for len(work) > 0 {
		g := work[0]
		work = work[1:]
		if stand[g] {
			continue
		}
		var held []*meup.Matcher
		if r := sp.byKey[g.g.Granter].roster; r != nil {
			held = append(held, r)
		}
		for _, o := range toGrantee[g.g.Granter] {
			held = append(held, o.m)
		}
		if coversAll(held, g.g.Capabilities) {
			stand[g] = true
			toGrantee[g.g.Grantee] = append(toGrantee[g.g.Grantee], g)
			work = append(work, byGranter[g.g.Grantee]...)
		}
	}
	return stand
}

// rosterChangedLocked brings grants and pending proposals in line with
// the roster just put in force (old: the space states before; nil at
// start): grants that no longer stand are dropped, and pending proposals
// of members no longer in their space (or of spaces gone) expire.
func (e *Engine) rosterChangedLocked(old map[string]*spaceState) {
	names := slices.Sorted(maps.Keys(e.grants))
	for _, name := range names {
		var changed map[identity.PeerID]bool
		if old != nil {
			changed = membersChanged(old[name], e.spaces[name])
		}
		e.pruneGrantsLocked(name, changed)
	}
	now := e.now()
	for _, name := range slices.Sorted(maps.Keys(e.proposals)) {
		sp := e.spaces[name]
		x := e.proposals[name]
		for _, id := range x.order {
			p := x.byID[id]
			if p.State != ProposalPending || (sp != nil && sp.byKey[p.Key] != nil) {
				continue
			}
			q := *p
			q.State, q.Updated = ProposalExpired, now
			if err := e.st.PutProposal(q); err != nil {
				e.log.Warn("space: storing the expiry of a departed member's proposal failed", "space", name, "proposal", q.ID, "err", err)
			}
			*p = q
		}
		if sp == nil {
			delete(e.proposals, name) // the store keeps their history
		}
	}
}

// membersChanged lists the keys whose roster entry differs between two
// states of one space (nil: the space is new or gone): members removed,
// added, or holding other capabilities. A space that is new (no old
// state) has every member changed.
func membersChanged(old, cur *spaceState) map[identity.PeerID]bool {
	changed := map[identity.PeerID]bool{}
	if old != nil {
		for k, m := range old.byKey {
			if cur == nil || cur.byKey[k] == nil || !sameCaps(m.Capabilities, cur.byKey[k].Capabilities) {
				changed[k] = true
			}
		}
	}
	if cur != nil {
		for k := range cur.byKey {
			if old == nil || old.byKey[k] == nil {
				changed[k] = true
			}
		}
	}
	return changed
}

// sameCaps reports whether two capability sets are written the same.
func sameCaps(a, b []meup.Capability) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
