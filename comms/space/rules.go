package space

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// maxReasonLen bounds the rejection reason a proposal keeps.
const maxReasonLen = 1024

// effect is what an envelope that passed the rules will change once it
// is applied (after the dedup). At most one group of fields is set.
type effect struct {
	grant *Grant // a new grant

	deleteGrants []string // revoke: grants to delete
	editGrants   []Grant  // revoke: grants left with fewer capabilities

	kick   identity.PeerID // the member to remove
	invite *Member         // the member to add

	propose *Proposal // a new pending proposal
	close   *Proposal // a proposal changing state: its new value
	track   *Proposal // a proposal whose response arrived: its new value
}

// checkLocked applies the rules of the envelope's kind for sender m in
// sp (its capabilities were checked already) and returns the effect the
// envelope will have, or a reason and detail to refuse it. It changes
// nothing but the expiry of proposals it looks at. Receive and Send both
// use it, so an envelope this node sends changes its own state exactly
// as it changes a receiver's.
func (e *Engine) checkLocked(sp *spaceState, m *memberState, env meup.Envelope, now time.Time) (eff effect, reason, detail string) {
	space := sp.cfg.Name
	switch env.Kind {
	case meup.KindMCPProposal:
		x := e.proposalsLocked(space)
		if old := x.byID[env.ID]; old != nil {
			// Only an update may reuse an id: a new proposal under the id
			// of another would take it over (its payload swapped after it
			// was reviewed, its state reset).
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("proposal id %q is in use in space %q (by %q)", env.ID, space, old.Proposer)
		}
		if x.forgot {
			// A closed proposal let go of here is still stored, with
			// its history: a new one must not take its id over.
			switch used, err := e.st.HasProposal(space, env.ID); {
			case err != nil:
				return eff, meup.ReasonRateLimited, "proposals cannot be checked now: " + err.Error()
			case used:
				return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("proposal id %q is in use in space %q", env.ID, space)
			}
		}
		keyBytes, allBytes := x.pendingBytes(m.Key, now)
		if allBytes+len(env.Payload) > MaxProposalBytes {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("the pending proposals of space %q hold %d MiB, the most they may", space, MaxProposalBytes>>20)
		}
		if keyBytes+len(env.Payload) > MaxProposalBytesPerPeer {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("the pending proposals of %q in space %q hold %d MiB, the most one proposer's may", m.ID, space, MaxProposalBytesPerPeer>>20)
		}
		byKey, all := x.pending(m.Key, now)
		if byKey >= MaxPendingPerPeer {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("%q has %d pending proposals in space %q, the most it may have", m.ID, byKey, space)
		}
		if all >= MaxTrackedPerSpace {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("space %q has %d pending proposals, the most it may have", space, all)
		}
		eff.propose = &Proposal{
			Space: space, ID: env.ID, Proposer: m.ID, Key: m.Key, To: slices.Clone(env.To),
			Payload: bytes.Clone(env.Payload), State: ProposalPending,
			Created: now, Expires: now.Add(e.opts.ProposalTTL), Updated: now,
		}

	case meup.KindMCPWithdraw, meup.KindMCPReject:
		p := e.proposalNamedLocked(space, env.CorrelationID)
		if p == nil {
			return eff, meup.ReasonUnknownProposal, "correlation_id names no proposal known in this space"
		}
		if env.Kind == meup.KindMCPWithdraw && p.Key != m.Key {
			return eff, meup.ReasonNotProposer, fmt.Sprintf("proposal %q was made by %q; only it may withdraw it", p.ID, p.Proposer)
		}
		if e.expireLocked(p, now) || p.State != ProposalPending {
			return eff, "", "" // closed already: nothing changes
		}
		q := *p
		q.Updated, q.By = now, m.ID
		if env.Kind == meup.KindMCPWithdraw {
			q.State = ProposalWithdrawn
		} else {
			q.State = ProposalRejected
			var r struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal(env.Payload, &r) // the reason is optional
			q.Reason = truncate(r.Reason, maxReasonLen)
		}
		eff.close = &q

	case meup.KindMCPRequest:
		// A request fulfils the proposal it is correlated to only if it
		// makes the proposed call: the capability check passed the call
		// made, and another call (one its sender may make) must not close
		// a proposal its sender could neither make nor reject.
		p := e.proposalNamedLocked(space, env.CorrelationID)
		if p != nil && !e.expireLocked(p, now) && p.State == ProposalPending && sameCall(env.Payload, p.Payload) {
			q := *p
			q.State, q.Updated, q.By, q.RequestID = ProposalFulfilled, now, m.ID, env.ID
			q.RequestTo = slices.Clone(env.To)
			eff.close = &q
		}

	case meup.KindMCPResponse:
		// The response to a proposal's request is recorded only from a
		// participant the request addressed (any, if it addressed none):
		// another member's would take the place of the real answer.
		x := e.proposalsLocked(space)
		for _, c := range env.CorrelationID {
			if id, ok := x.byRequest[c]; ok {
				if p := x.byID[id]; p != nil && p.ResponseID == "" && (len(p.RequestTo) == 0 || slices.Contains(p.RequestTo, m.ID)) {
					q := *p
					q.ResponseID, q.Updated = env.ID, now
					eff.track = &q
				}
				break
			}
		}

	case meup.KindCapabilityGrant:
		var gp struct {
			Recipient    string          `json:"recipient"`
			Capabilities json.RawMessage `json:"capabilities"`
		}
		if err := json.Unmarshal(env.Payload, &gp); err != nil {
			return eff, meup.ReasonInvalidEnvelope, "capability/grant payload: " + err.Error()
		}
		r := sp.byID[gp.Recipient]
		if r == nil {
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("grant recipient %q is not a member of space %q", gp.Recipient, space)
		}
		if r == m {
			// What a member holds by a grant to itself would outlive
			// the rights it granted from.
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("%q cannot grant to itself", m.ID)
		}
		caps, reason, detail := e.capabilitiesLocked(sp, m, gp.Capabilities, "grant")
		if reason != "" {
			return eff, reason, detail
		}
		if len(caps) == 0 {
			return eff, meup.ReasonInvalidEnvelope, "capability/grant grants no capabilities"
		}
		if len(e.grants[space]) >= MaxGrantsPerSpace {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("space %q has %d live grants, the most it may have", space, MaxGrantsPerSpace)
		}
		byGranter := 0
		for _, g := range e.grants[space] {
			if g.g.ID == env.ID {
				// A grant id is the grant envelope's: reusing one would
				// overwrite the stored grant of another.
				return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("grant id %q is in use in space %q", env.ID, space)
			}
			if g.g.Granter == m.Key {
				byGranter++
			}
		}
		if byGranter >= MaxGrantsPerGranter {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("%q has %d live grants in space %q, the most one granter may have", m.ID, byGranter, space)
		}
		eff.grant = &Grant{Space: space, ID: env.ID, Granter: m.Key, Grantee: r.Key, Capabilities: caps, Created: now}

	case meup.KindCapabilityRevoke:
		return e.revokeLocked(sp, m, env)

	case meup.KindSpaceKick:
		var kp struct {
			ParticipantID string `json:"participant_id"`
		}
		if err := json.Unmarshal(env.Payload, &kp); err != nil {
			return eff, meup.ReasonInvalidEnvelope, "space/kick payload: " + err.Error()
		}
		t := sp.byID[kp.ParticipantID]
		if t == nil {
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("%q is not a member of space %q", kp.ParticipantID, space)
		}
		eff.kick = t.Key

	case meup.KindSpaceInvite:
		var ip struct {
			ParticipantID string          `json:"participant_id"`
			Key           string          `json:"key"`
			Capabilities  json.RawMessage `json:"capabilities"`
		}
		if err := json.Unmarshal(env.Payload, &ip); err != nil {
			return eff, meup.ReasonInvalidEnvelope, "space/invite payload: " + err.Error()
		}
		if err := CheckParticipantID(ip.ParticipantID); err != nil {
			return eff, meup.ReasonInvalidEnvelope, "space/invite participant_id: " + err.Error()
		}
		key, err := identity.ParsePeerID(ip.Key)
		if err != nil {
			return eff, meup.ReasonInvalidEnvelope, "space/invite key: " + err.Error()
		}
		if o := sp.byID[ip.ParticipantID]; o != nil {
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("%q is a member of space %q already", ip.ParticipantID, space)
		}
		for _, o := range sp.order {
			if idSkeleton(o.ID) == idSkeleton(ip.ParticipantID) {
				return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("%q reads the same as member %q of space %q (they differ only in joiners or variation selectors)", ip.ParticipantID, o.ID, space)
			}
		}
		if o := sp.byKey[key]; o != nil {
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("that key is a member of space %q already, as %q", space, o.ID)
		}
		if len(sp.order) >= MaxMembers {
			return eff, meup.ReasonRateLimited, fmt.Sprintf("space %q has %d members, the most it may have", space, MaxMembers)
		}
		caps, reason, detail := e.capabilitiesLocked(sp, m, ip.Capabilities, "invite")
		if reason != "" {
			return eff, reason, detail
		}
		eff.invite = &Member{Key: key, ID: ip.ParticipantID, Capabilities: caps}
	}
	return eff, "", ""
}

// capabilitiesLocked parses the capabilities a grant or invite passes on
// (absent or null: none), compiles them and checks that what m holds
// covers each. What an invite gives becomes the invitee's roster entry,
// which outlasts any grant, so only m's own roster entry may cover it: a
// right m holds by a grant is passed on by a grant, which goes when that
// one does.
func (e *Engine) capabilitiesLocked(sp *spaceState, m *memberState, raw json.RawMessage, what string) ([]meup.Capability, string, string) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return []meup.Capability{}, "", ""
	}
	caps, err := meup.ParseCapabilities(raw)
	if err != nil {
		return nil, meup.ReasonInvalidEnvelope, what + " capabilities: " + err.Error()
	}
	if err := checkCapabilities(caps); err != nil {
		return nil, meup.ReasonInvalidEnvelope, what + " capabilities: " + err.Error()
	}
	holds := e.holdsLocked(sp.cfg.Name, m)
	byRoster := what == "invite"
	if byRoster {
		holds = nil
		if m.roster != nil {
			holds = []*meup.Matcher{m.roster}
		}
	}
	for i, c := range caps {
		if !covers(holds, c) {
			if byRoster {
				return nil, meup.ReasonGrantExceeds, fmt.Sprintf("invite capability %d (kind %s) is not covered by %q's roster entry: an invite gives a roster entry, which outlasts grants, so rights %q holds by a grant are passed on by a grant (invite, then grant)", i+1, c.Kind, m.ID, m.ID)
			}
			return nil, meup.ReasonGrantExceeds, fmt.Sprintf("%s capability %d (kind %s) is not covered by what %q holds", what, i+1, c.Kind, m.ID)
		}
	}
	return caps, "", ""
}

// revokeLocked checks a capability/revoke: payload {"recipient",
// "grant_id"?, "capabilities"?}. With grant_id it names one live grant
// of the recipient (with capabilities too: only those leave that grant);
// with capabilities alone, every grant of the recipient loses the
// capabilities equal to one of them. A revoke that names neither, or that
// matches nothing live, is refused.
func (e *Engine) revokeLocked(sp *spaceState, m *memberState, env meup.Envelope) (eff effect, reason, detail string) {
	space := sp.cfg.Name
	var rp struct {
		Recipient    string          `json:"recipient"`
		GrantID      string          `json:"grant_id"`
		Capabilities json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(env.Payload, &rp); err != nil {
		return eff, meup.ReasonInvalidEnvelope, "capability/revoke payload: " + err.Error()
	}
	r := sp.byID[rp.Recipient]
	if r == nil {
		return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("revoke recipient %q is not a member of space %q", rp.Recipient, space)
	}
	var caps []meup.Capability
	if len(rp.Capabilities) > 0 && !bytes.Equal(bytes.TrimSpace(rp.Capabilities), []byte("null")) {
		var err error
		if caps, err = meup.ParseCapabilities(rp.Capabilities); err != nil {
			return eff, meup.ReasonInvalidEnvelope, "revoke capabilities: " + err.Error()
		}
	}
	if rp.GrantID == "" && len(caps) == 0 {
		return eff, meup.ReasonInvalidEnvelope, "capability/revoke names neither a grant_id nor capabilities"
	}
	found := false
	held := e.holdsLocked(space, m)
	for _, g := range e.grants[space] {
		if g.g.Grantee != r.Key || (rp.GrantID != "" && g.g.ID != rp.GrantID) {
			continue
		}
		var left []meup.Capability // what the grant keeps
		if len(caps) > 0 {
			left = slices.DeleteFunc(cloneCaps(g.g.Capabilities), func(c meup.Capability) bool {
				return slices.ContainsFunc(caps, func(x meup.Capability) bool { return sameCapability(c, x) })
			})
			if len(left) == len(g.g.Capabilities) {
				continue // the revoke does not touch it
			}
		}
		// A member takes back what it granted, or what it could grant:
		// holding capability/revoke alone does not undo others' grants.
		// Only the grants the revoke changes are its business.
		if g.g.Granter != m.Key && !coversAll(held, g.g.Capabilities) {
			return eff, meup.ReasonGrantExceeds, fmt.Sprintf("grant %q was made by another member and gives more than %q holds in space %q", g.g.ID, m.ID, space)
		}
		found = true
		if len(left) == 0 {
			eff.deleteGrants = append(eff.deleteGrants, g.g.ID)
		} else {
			edited := g.g
			edited.Capabilities = left
			eff.editGrants = append(eff.editGrants, edited)
		}
	}
	if !found {
		switch {
		case rp.GrantID != "" && len(caps) > 0:
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("%q holds no live grant %q with those capabilities in space %q", r.ID, rp.GrantID, space)
		case rp.GrantID != "":
			return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("%q holds no live grant %q in space %q", r.ID, rp.GrantID, space)
		}
		return eff, meup.ReasonInvalidEnvelope, fmt.Sprintf("no live grant of %q in space %q holds those capabilities", r.ID, space)
	}
	return eff, "", ""
}

// sameCapability reports whether two capabilities are the same pattern:
// their kind and payload are equal JSON values (key order and spacing do
// not matter; numbers compare as written). Their ids do not matter.
func sameCapability(a, b meup.Capability) bool {
	return sameJSON(a.Kind, b.Kind) && sameJSON(a.Payload, b.Payload)
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	ca, ok1 := canonicalJSON(a)
	cb, ok2 := canonicalJSON(b)
	return ok1 && ok2 && bytes.Equal(ca, cb)
}

// canonicalJSON re-encodes one JSON value with its object members sorted
// and no spacing. Numbers keep their text (json.Number): two numbers are
// the same only as written the same, never by a float64 that would make
// 100000000000000000 and 100000000000000001 equal.
func canonicalJSON(raw json.RawMessage) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

// sameCall reports whether two MCP payloads make the same call: their
// "method" and "params" members are equal JSON values (absent equals
// absent only); other members do not matter.
func sameCall(a, b json.RawMessage) bool {
	var x, y struct {
		Method json.RawMessage `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return sameJSON(x.Method, y.Method) && sameJSON(x.Params, y.Params)
}

// proposalNamedLocked returns the first proposal of space one of ids
// names, or nil.
func (e *Engine) proposalNamedLocked(space string, ids []string) *Proposal {
	x := e.proposalsLocked(space)
	for _, id := range ids {
		if p := x.byID[id]; p != nil {
			return p
		}
	}
	return nil
}

// applyLocked makes eff happen: stores first, then memory. A store error
// is returned with nothing in memory changed, except that the space's
// grants are then reloaded from the store, whatever part of a revoke it
// took. received: the envelope came from sender m (not from this node's
// Send), so a grant to this node is answered with capability/grant-ack.
func (e *Engine) applyLocked(sp *spaceState, m *memberState, env meup.Envelope, eff effect, now time.Time, received bool, replies *[]reply) error {
	space := sp.cfg.Name
	switch {
	case eff.grant != nil:
		mt, err := meup.Compile(eff.grant.Capabilities)
		if err != nil {
			return fmt.Errorf("space: bug: checked grant does not compile: %w", err)
		}
		if err := e.st.PutGrant(*eff.grant); err != nil {
			return fmt.Errorf("space: store grant: %w", err)
		}
		e.grants[space] = append(e.grants[space], &grantEntry{g: *eff.grant, m: mt})
		e.grantsChangedLocked(space)
		if received && eff.grant.Grantee == e.opts.Self && sp.self != nil {
			e.queueReplyLocked(replies, m.Key, space, sp.self.ID, meup.KindCapabilityGrantAck,
				[]string{m.ID}, []string{eff.grant.ID}, map[string]any{"grant_id": eff.grant.ID, "status": "accepted"}, now)
		}

	case len(eff.deleteGrants) > 0 || len(eff.editGrants) > 0:
		// The recipients hold less now: what they granted on the
		// strength of it may no longer stand.
		changed := map[identity.PeerID]bool{}
		for _, g := range e.grants[space] {
			if slices.Contains(eff.deleteGrants, g.g.ID) {
				changed[g.g.Grantee] = true
			}
		}
		for _, g := range eff.editGrants {
			changed[g.Grantee] = true
		}
		if err := e.revokeStoreLocked(space, eff); err != nil {
			e.reloadGrantsLocked(space)
			return err
		}
		e.revokeMemoryLocked(space, eff)
		e.pruneGrantsLocked(space, changed)

	case eff.kick != (identity.PeerID{}):
		// The grants the kicked member made or received, and those that
		// stood on them, go with it (setRosterLocked). The change is
		// made on the rosters the file holds if they are newer than
		// those in force (changeRosterLocked), so a hand edit not
		// reloaded yet is not written over.
		kicked := eff.kick
		if kicked == e.opts.Self {
			e.log.Info("space: this node was kicked; the space is dropped here", "space", space, "by", m.ID)
		}
		return e.changeRosterLocked(func(r *Roster) error {
			i := slices.IndexFunc(r.Spaces, func(c Config) bool { return c.Name == space })
			switch {
			case i < 0: // gone from newer rosters already
			case kicked == e.opts.Self:
				r.Spaces = slices.Delete(r.Spaces, i, i+1)
			default:
				r.Spaces[i].Members = slices.DeleteFunc(r.Spaces[i].Members, func(x Member) bool { return x.Key == kicked })
			}
			return nil
		}, false)

	case eff.invite != nil:
		invited := *eff.invite
		err := e.changeRosterLocked(func(r *Roster) error {
			i := slices.IndexFunc(r.Spaces, func(c Config) bool { return c.Name == space })
			if i < 0 || slices.ContainsFunc(r.Spaces[i].Members, func(x Member) bool { return x.Key == invited.Key || x.ID == invited.ID }) {
				return nil // newer rosters dropped the space, or hold the member already
			}
			r.Spaces[i].Members = append(r.Spaces[i].Members, invited)
			return nil
		}, false)
		if err != nil {
			return fmt.Errorf("space: roster with invited member does not validate: %w", err)
		}

	case eff.propose != nil || eff.close != nil || eff.track != nil:
		p := eff.propose
		if p == nil {
			p = eff.close
		}
		if p == nil {
			p = eff.track
		}
		if err := e.st.PutProposal(*p); err != nil {
			return fmt.Errorf("space: store proposal: %w", err)
		}
		e.proposalsLocked(space).add(*p, now)
	}
	return nil
}

// revokeStoreLocked stores a revoke's effect.
func (e *Engine) revokeStoreLocked(space string, eff effect) error {
	if len(eff.deleteGrants) > 0 {
		if _, err := e.st.DeleteGrants(space, eff.deleteGrants...); err != nil {
			return fmt.Errorf("space: delete grants: %w", err)
		}
	}
	for _, g := range eff.editGrants {
		if err := e.st.PutGrant(g); err != nil {
			return fmt.Errorf("space: store grant: %w", err)
		}
	}
	return nil
}

// revokeMemoryLocked makes a stored revoke's effect in memory: grants
// deleted, grants left with fewer capabilities.
func (e *Engine) revokeMemoryLocked(space string, eff effect) {
	var out []*grantEntry
	for _, g := range e.grants[space] {
		if slices.Contains(eff.deleteGrants, g.g.ID) {
			e.lapseLocked(space, g.g)
			continue
		}
		if i := slices.IndexFunc(eff.editGrants, func(x Grant) bool { return x.ID == g.g.ID }); i >= 0 {
			e.lapseLocked(space, g.g)
			m, err := meup.Compile(eff.editGrants[i].Capabilities)
			if err != nil {
				e.log.Error("space: bug: a grant left by a revoke does not compile; dropped", "space", space, "grant", g.g.ID, "err", err)
				continue
			}
			g = &grantEntry{g: eff.editGrants[i], m: m}
		}
		out = append(out, g)
	}
	e.grants[space] = out
	e.grantsChangedLocked(space)
}

// reloadGrantsLocked replaces the space's grants in memory with the
// store's, drops the cached matchers, and checks every grant of the space
// again (pruneGrantsLocked): the store may hold grants dropped here. If
// the store fails, the grants in memory stay as they were.
func (e *Engine) reloadGrantsLocked(space string) {
	gs, err := e.st.Grants(space)
	if err != nil {
		e.log.Warn("space: reloading grants failed", "space", space, "err", err)
		return
	}
	var out []*grantEntry
	for _, g := range gs {
		m, err := meup.Compile(g.Capabilities)
		if err != nil {
			e.log.Warn("space: stored grant does not compile; ignored", "space", space, "grant", g.ID, "err", err)
			continue
		}
		out = append(out, &grantEntry{g: g, m: m})
	}
	e.grants[space] = out
	e.grantsChangedLocked(space)
	e.pruneGrantsLocked(space, nil)
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// coversAll reports whether every capability in caps is covered by one of
// the matchers.
func coversAll(held []*meup.Matcher, caps []meup.Capability) bool {
	for _, c := range caps {
		if !covers(held, c) {
			return false
		}
	}
	return true
}
