package space

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// Announce sends system/presence (event "join" or "leave") as this node's
// participant to every other active member of every space it is in:
// payload {"event", "participant": {"id", "capabilities"}} with its roster
// capabilities, as many as fit whole in maxPresenceCapabilityBytes of
// JSON (a list that was cut says "capabilities_truncated": true, so the
// presence always fits a payload). A join is sent reliably without
// waiting for the network; a leave (the node is stopping) directly,
// bounded by ctx. Announce returns once every copy's SendMEUP returned;
// failures are logged, as is an unknown event (a bug), which sends
// nothing.
func (e *Engine) Announce(ctx context.Context, event string) {
	var o SendOptions
	switch event {
	case EventJoin:
		o = SendOptions{Reliable: true, NoWait: true, TTL: presenceTTL}
	case EventLeave:
	default:
		e.log.Error("space: bug: unknown presence event", "event", event)
		return
	}
	type job struct {
		space   string
		data    []byte
		targets []target
		copies  []Copy
	}
	var jobs []job
	e.mu.Lock()
	now := e.now()
	for _, c := range e.roster.Spaces {
		sp := e.spaces[c.Name]
		if sp == nil || sp.self == nil {
			continue
		}
		p := presencePayload{Event: event, Participant: participantInfo{ID: sp.self.ID}}
		p.Participant.Capabilities, p.Participant.CapabilitiesTruncated = e.boundedCapsLocked(c.Name, sp.self, fromRoster, maxPresenceCapabilityBytes)
		payload, err := json.Marshal(p)
		if err != nil {
			e.log.Error("space: bug: presence payload does not marshal", "err", err)
			continue
		}
		env := meup.Envelope{
			Protocol: e.opts.Protocol, ID: newID(), TS: timestamp(now), From: sp.self.ID,
			Kind: meup.KindSystemPresence, Payload: payload,
		}
		if err := env.Validate(); err != nil {
			e.log.Warn("space: presence does not validate", "space", c.Name, "err", err)
			continue
		}
		data, err := env.Encode(e.opts.Protocol)
		if err != nil {
			e.log.Warn("space: presence does not encode", "space", c.Name, "err", err)
			continue
		}
		copies, targets := e.copiesLocked(sp, nil)
		jobs = append(jobs, job{space: c.Name, data: data, targets: targets, copies: copies})
	}
	e.mu.Unlock()

	for _, j := range jobs {
		e.deliver(ctx, j.space, j.data, j.targets, o, j.copies)
		for _, c := range j.copies {
			if c.Skipped == "" && c.LastError != "" {
				e.log.Info("space: presence not delivered", "space", j.space, "to", c.Participant, "event", event, "err", c.LastError)
			}
		}
	}
}

// noMEUPMark is a NoMEUP mark: why, and until when.
type noMEUPMark struct {
	why   string
	until time.Time
}

// noMEUPLocked returns peer's NoMEUP mark if it is in force.
func (e *Engine) noMEUPLocked(peer identity.PeerID) (string, bool) {
	mark, ok := e.noMEUP[peer]
	if !ok {
		return "", false
	}
	if !e.now().Before(mark.until) {
		delete(e.noMEUP, peer)
		return "", false
	}
	return mark.why, true
}

// NoMEUP records that peer closed connections on MEUP frames: no copies
// go to it for NoMEUPFor, or until it sends a MEUP envelope that parses.
func (e *Engine) NoMEUP(peer identity.PeerID, why string) {
	if peer == e.opts.Self {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.noMEUP[peer]; !ok && len(e.noMEUP) >= maxSenderRefs {
		e.log.Warn("space: too many peers marked as not speaking MEUP; mark dropped", "peer", peer)
		return
	}
	e.noMEUP[peer] = noMEUPMark{why: truncate(why, maxReasonLen), until: e.now().Add(NoMEUPFor)}
}

// MemberInfo is a member as list_spaces shows it.
type MemberInfo struct {
	ID           string            `json:"id"`
	Key          string            `json:"key"`
	Self         bool              `json:"self,omitempty"`
	Status       string            `json:"status"`              // active, pending (key not trusted), no_meup
	Presence     string            `json:"presence"`            // online, offline, unknown
	LastSeen     *time.Time        `json:"last_seen,omitempty"` // last envelope from it in this space
	Capabilities []meup.Capability `json:"capabilities"`        // roster
	Granted      []meup.Capability `json:"granted,omitempty"`   // live grants, at most maxListedGrantBytes of them
	// GrantedTruncated: more grants are live than Granted shows.
	GrantedTruncated bool   `json:"granted_truncated,omitempty"`
	Refused          uint64 `json:"refused,omitempty"` // envelopes from it this node refused
	Note             string `json:"note,omitempty"`
}

// Info is a space as list_spaces shows it.
type Info struct {
	Name     string       `json:"name"`
	Self     string       `json:"self"` // this node's participant id ("": not a member, the space is inactive)
	Delivery string       `json:"delivery"`
	Members  []MemberInfo `json:"members"`
	Pending  int          `json:"pending_proposals"`
}

// In reports whether space is in the roster with this node a member of
// it: whether Send can send to it.
func (e *Engine) In(space string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	sp := e.spaces[space]
	return sp != nil && sp.self != nil
}

// Known reports whether space is in the roster, this node a member of it
// or not.
func (e *Engine) Known(space string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.spaces[space] != nil
}

// Spaces lists the spaces of the roster in its order, members in roster
// order.
func (e *Engine) Spaces() []Info {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	out := []Info{}
	for _, c := range e.roster.Spaces {
		sp := e.spaces[c.Name]
		in := Info{Name: c.Name, Delivery: c.Delivery, Members: []MemberInfo{}}
		if in.Delivery == "" {
			in.Delivery = DeliveryAll
		}
		if sp.self != nil {
			in.Self = sp.self.ID
		}
		if x := e.proposals[c.Name]; x != nil {
			_, in.Pending = x.pending(identity.PeerID{}, now)
		}
		for _, m := range sp.order {
			mi := MemberInfo{
				ID:           m.ID,
				Key:          m.Key.String(),
				Self:         m == sp.self,
				Status:       StatusActive,
				Presence:     m.presence,
				Capabilities: cloneCaps(m.Capabilities),
				Refused:      m.refused,
			}
			mi.Granted, mi.GrantedTruncated = e.boundedCapsLocked(c.Name, m, fromGrants, maxListedGrantBytes)
			if len(mi.Granted) == 0 {
				mi.Granted = nil // none: granted is left out
			}
			if !m.lastSeen.IsZero() {
				t := m.lastSeen
				mi.LastSeen = &t
			}
			if why, ok := e.noMEUPLocked(m.Key); ok {
				mi.Status, mi.Note = StatusNoMEUP, why
			}
			if !e.active(m) {
				mi.Status = StatusPending
				mi.Note = "its key is not in the trust list: it receives nothing and its envelopes are refused"
			}
			in.Members = append(in.Members, mi)
		}
		out = append(out, in)
	}
	return out
}
