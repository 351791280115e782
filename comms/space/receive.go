package space

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

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
	// Duplicate is true when this sender sent this MEUP id in this space
	// before: ack it, deliver nothing, answer nothing.
	Duplicate bool
	// Err is set when the engine could not decide because its Store
	// failed. Nothing was applied; the node should not ack, so that the
	// sender tries again.
	Err error
}

// inbound is one received envelope on its way through the checks.
type inbound struct {
	space string
	from  identity.PeerID
	copy  string        // the Meerkat envelope id it came in
	env   meup.Envelope // partial when it did not parse
	sp    *spaceState   // nil: unknown space
	m     *memberState  // nil: the key is not in the space's roster
	// answerTo is the participant a refusal is answered to ("": none).
	answerTo string
	// kindKnown: env.Kind is the envelope's kind (it may not be when
	// the envelope did not parse), so it is known whether it is system/*.
	kindKnown bool
}

// Receive runs every check on a MEUP envelope (its JSON text) that key
// from sent in space, applies it (grants, revokes, proposals, presence,
// kicks, invites), and answers refusals with a system/error (rate-limited;
// never to system/*). The checks, in order: the envelope parses within
// the meup bounds; the space is known and this node is in it
// (unknown_space); from is an active member (not_a_member); the
// envelope's from is the participant bound to that key (from_mismatch);
// system/* only as presence, welcome or error (reserved_kind), which
// skip the capability check and never grant; a capability this node
// holds for the sender matches (capability_violation); the rules of
// proposals, grants, revokes, kicks and invites; and last the dedup of
// (space, sender, MEUP id). An envelope that breaks those rules but was
// seen before is a duplicate, not a refusal: the resend of a kick whose
// ack was lost finds its member gone only because it was applied.
//
// Receive never waits for the network: its answers are reliable sends
// that return once stored, made after the engine's lock is released.
// Options.Observe is told of a refusal before Receive returns.
func (e *Engine) Receive(from identity.PeerID, copy, space string, envelope []byte) Verdict {
	var replies []reply
	e.mu.Lock()
	v := e.receiveLocked(from, copy, space, envelope, &replies)
	e.mu.Unlock()
	if v.Refused != nil && e.opts.Observe != nil {
		e.opts.Observe(*v.Refused)
	}
	e.sendReplies(replies)
	return v
}

func (e *Engine) receiveLocked(from identity.PeerID, copy, space string, data []byte, replies *[]reply) Verdict {
	now := e.now()
	in := &inbound{space: space, from: from, copy: copy}
	in.sp = e.spaces[space]
	if in.sp != nil {
		in.m = in.sp.byKey[from]
	}
	env, err := meup.Parse(data)
	if err != nil {
		in.env, in.kindKnown = peek(data)
		if in.m != nil {
			in.answerTo = in.m.ID
		} else {
			in.answerTo = in.env.From
		}
		return e.refuseLocked(in, now, meup.ReasonOf(err), err.Error(), replies)
	}
	in.env, in.kindKnown = env, true
	in.answerTo = env.From
	delete(e.noMEUP, from) // it speaks MEUP after all

	sp, m := in.sp, in.m
	if sp == nil {
		return e.refuseLocked(in, now, meup.ReasonUnknownSpace, fmt.Sprintf("this node has no space %q", space), replies)
	}
	if sp.self == nil {
		return e.refuseLocked(in, now, meup.ReasonUnknownSpace, fmt.Sprintf("this node is not a member of space %q", space), replies)
	}
	if m == nil {
		return e.refuseLocked(in, now, meup.ReasonNotAMember, fmt.Sprintf("the signing key is not a member of space %q", space), replies)
	}
	in.answerTo = m.ID
	if !e.active(m) {
		return e.refuseLocked(in, now, meup.ReasonNotAMember, fmt.Sprintf("member %q of space %q is pending: its key is not trusted here", m.ID, space), replies)
	}
	m.lastSeen = now
	if env.From != m.ID {
		return e.refuseLocked(in, now, meup.ReasonFromMismatch, fmt.Sprintf("from is %q but the signing key is bound to %q", env.From, m.ID), replies)
	}
	if isSystem(env.Kind) {
		return e.systemLocked(in, now, replies)
	}
	if !allows(e.holdsLocked(space, m), env) && !e.acksOwnGrantLocked(space, m, env) {
		return e.refuseLocked(in, now, meup.ReasonCapability, noCapability(m.ID, space, env.Kind), replies)
	}
	if k := (undoKey{space, from, env.ID}); e.undoneLocked(k, env) {
		// Applied before, its admission failed (Undo): delivered, not
		// applied again. Its rules would refuse it now only because it
		// was applied (its grant or proposal id is in use). Only the
		// same envelope (but for its ts: undoSum): another under that
		// id is checked as any other.
		if v, done := e.dedupLocked(in, now); done {
			return v
		}
		e.dropUndoneLocked(k)
		m.presence = PresenceOnline
		return Verdict{Deliver: true, Envelope: env, Participant: m.ID}
	}
	eff, reason, detail := e.checkLocked(sp, m, env, now)
	if reason != "" {
		// A resend of an envelope applied before (its ack was lost) may
		// break a rule only because it was applied: a kick's member is
		// gone, an invite's is there. It is a duplicate, not a refusal.
		// The same copy again is delivered again (its first admission may
		// have been lost) but not applied again.
		if seen, err := e.st.Remember(space, from, env.ID, copy, now); err == nil && seen == RememberSameCopy {
			return Verdict{Deliver: true, Envelope: env, Participant: m.ID}
		} else if err == nil && seen == RememberRepeat {
			return Verdict{Envelope: env, Participant: m.ID, Duplicate: true}
		} else if err == nil {
			e.forget(space, from, env.ID)
		}
		return e.refuseLocked(in, now, reason, detail, replies)
	}
	if v, done := e.dedupLocked(in, now); done {
		return v
	}
	if err := e.applyLocked(sp, m, env, eff, now, true, replies); err != nil {
		e.forget(space, from, env.ID)
		return Verdict{Envelope: env, Participant: m.ID, Err: err}
	}
	m.presence = PresenceOnline
	return Verdict{Deliver: true, Envelope: env, Participant: m.ID}
}

// dedupLocked remembers in's MEUP id. done reports that the envelope
// goes no further here and v says what to do: a repeat in another copy
// is dropped; the same copy again is delivered (the inbox recognises it
// if it stored it, and stores it if its first admission was lost) but
// not applied again; a store failure leaves it unacknowledged.
func (e *Engine) dedupLocked(in *inbound, now time.Time) (v Verdict, done bool) {
	seen, err := e.st.Remember(in.space, in.from, in.env.ID, in.copy, now)
	switch {
	case err != nil:
		return Verdict{Envelope: in.env, Participant: in.m.ID, Err: fmt.Errorf("space: remember: %w", err)}, true
	case seen == RememberRepeat:
		return Verdict{Envelope: in.env, Participant: in.m.ID, Duplicate: true}, true
	case seen == RememberSameCopy:
		return Verdict{Deliver: true, Envelope: in.env, Participant: in.m.ID}, true
	}
	return Verdict{}, false
}

func (e *Engine) forget(space string, from identity.PeerID, id string) {
	if err := e.st.Forget(space, from, id); err != nil {
		e.log.Warn("space: forgetting a MEUP id failed; its resend will be taken for a repeat", "space", space, "from", from, "id", id, "err", err)
	}
}

// Undo forgets a delivered envelope's id (its admission to the inbox
// failed, so its resend must not be taken for a repeat). What the
// envelope changed (a grant, a proposal) stays, and the engine notes that
// it was applied but not admitted: its resend (the same envelope from
// the same sender, its ts aside) is delivered without being checked
// against the rules or applied again — they would refuse it only because
// it was applied. The note is kept in memory (at most maxUndone of them,
// the oldest go first): a resend that comes after a restart is checked
// as new.
func (e *Engine) Undo(space string, from identity.PeerID, meupID string, envelope []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forget(space, from, meupID)
	k := undoKey{space, from, meupID}
	if _, ok := e.undone[k]; !ok {
		if len(e.undoOrder) >= maxUndone {
			delete(e.undone, e.undoOrder[0])
			e.undoOrder = e.undoOrder[1:]
		}
		e.undoOrder = append(e.undoOrder, k)
	}
	e.undone[k] = undoSumOf(envelope)
}

// undoneLocked reports whether env is the envelope Undo noted under k:
// the same but for its ts (undoSum).
func (e *Engine) undoneLocked(k undoKey, env meup.Envelope) bool {
	noted, ok := e.undone[k]
	if !ok {
		return false
	}
	sum, ok := undoSum(env)
	return ok && sum == noted
}

// undoSumOf is undoSum of an envelope's JSON text; an envelope that does
// not parse has the hash of its text, which no resend that parses
// matches.
func undoSumOf(envelope []byte) [sha256.Size]byte {
	if env, err := meup.Parse(envelope); err == nil {
		if sum, ok := undoSum(env); ok {
			return sum
		}
	}
	return sha256.Sum256(envelope)
}

// undoSum identifies an envelope for Undo: the hash of its normalised
// form without its ts (ok false if it does not marshal). A resend is the
// same envelope with the same ts (an outbox sends the same bytes again)
// or with a new one: a sender that builds the envelope again to retry the
// same call (a send under an idempotency key: [Draft.ID]) gives it the
// same id and content but stamps it anew. No rule looks at ts.
func undoSum(env meup.Envelope) (sum [sha256.Size]byte, ok bool) {
	env.TS = ""
	b, err := json.Marshal(env)
	if err != nil {
		return sum, false
	}
	return sha256.Sum256(b), true
}

// dropUndoneLocked forgets the note Undo made under k.
func (e *Engine) dropUndoneLocked(k undoKey) {
	delete(e.undone, k)
	if i := slices.Index(e.undoOrder, k); i >= 0 {
		e.undoOrder = slices.Delete(e.undoOrder, i, i+1)
	}
}

// undoKey names an envelope applied but not admitted (Undo).
type undoKey struct {
	space string
	from  identity.PeerID
	id    string
}

// noCapability is the detail of a capability_violation: no capability
// of participant id matches the envelope, whose kind or payload (either
// may be what no capability allows) is kind's.
func noCapability(id, space, kind string) string {
	return fmt.Sprintf("no capability %q holds in space %q matches this %s envelope (its kind and payload)", id, space, kind)
}

// refuseLocked makes the Verdict of a refused envelope, counts it against
// a member sender and queues its system/error answer — unless the
// envelope is (or may be) system/*, no participant is known to answer
// to, the sender's key is not trusted, this node has no participant id
// in the space to answer as, or the (space, sender) rate limit is spent.
func (e *Engine) refuseLocked(in *inbound, now time.Time, reason, detail string, replies *[]reply) Verdict {
	r := &Refusal{Space: in.space, From: in.from, MEUPID: in.env.ID, Kind: in.env.Kind, Reason: reason, Detail: detail}
	v := Verdict{Envelope: in.env, Refused: r}
	if in.m != nil {
		in.m.refused++
		v.Participant = in.m.ID
	}
	if !in.kindKnown || isSystem(in.env.Kind) || in.answerTo == "" {
		return v
	}
	if in.from != e.opts.Self && !e.opts.Trusted(in.from) {
		return v
	}
	if in.sp == nil || in.sp.self == nil {
		// This node has no participant id in the space to answer as
		// (and a space name the sender made up must not use a limiter).
		return v
	}
	if !e.allowErrorLocked(in.space, in.from, now) {
		e.log.Debug("space: refusal not answered: rate limited", "space", in.space, "from", in.from, "reason", reason)
		return v
	}
	// What the sender holds is built only for an answer that goes out,
	// and bounded: copying every granted capability for every refusal
	// would cost more than the refusal.
	caps := []meup.Capability{}
	truncated := false
	if in.m != nil {
		caps, truncated = e.boundedCapsLocked(in.space, in.m, fromRoster|fromGrants, maxErrorCapabilityBytes)
	}
	payload := map[string]any{
		"error":             reason,
		"message":           detail,
		"attempted_kind":    in.env.Kind,
		"your_capabilities": caps,
	}
	if truncated {
		payload["capabilities_truncated"] = true
	}
	var corr []string
	if in.env.ID != "" {
		corr = []string{in.env.ID}
	}
	e.queueReplyLocked(replies, in.from, in.space, in.sp.self.ID, meup.KindSystemError, []string{in.answerTo}, corr, payload, now)
	return v
}

// queueReplyLocked builds a reply envelope from this node (participant
// self) and queues it for sending once the lock is released.
func (e *Engine) queueReplyLocked(replies *[]reply, to identity.PeerID, space, self, kind string, toIDs, corr []string, payload any, now time.Time) {
	raw, err := json.Marshal(payload)
	if err != nil {
		e.log.Error("space: bug: reply payload does not marshal", "kind", kind, "err", err)
		return
	}
	env := meup.Envelope{
		Protocol:      e.opts.Protocol,
		ID:            newID(),
		TS:            timestamp(now),
		From:          self,
		To:            toIDs,
		Kind:          kind,
		CorrelationID: corr,
		Payload:       raw,
	}
	if err := env.Validate(); err != nil {
		e.log.Warn("space: reply not sent: it does not validate", "space", space, "kind", kind, "err", err)
		return
	}
	data, err := env.Encode(e.opts.Protocol)
	if err != nil {
		e.log.Warn("space: reply not sent: it does not encode", "space", space, "kind", kind, "err", err)
		return
	}
	*replies = append(*replies, reply{to: to, space: space, kind: kind, data: data})
}

// peek reads what it can of an envelope that did not parse: its id, kind
// and from, if they are short strings. kindKnown is false when the kind
// could not be read.
func peek(data []byte) (env meup.Envelope, kindKnown bool) {
	if len(data) > meup.MaxEnvelopeBytes {
		return env, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return env, false
	}
	str := func(name string, max int) string {
		var s string
		if json.Unmarshal(m[name], &s) != nil || len(s) > max {
			return ""
		}
		return s
	}
	for k := range m {
		if k != "kind" && strings.EqualFold(k, "kind") {
			// Another spelling of kind: which one a reader takes is
			// unclear, so the kind is not known (and nothing answered).
			return env, false
		}
	}
	env.ID = str("id", meup.MaxIDLen)
	env.From = str("from", meup.MaxIDLen)
	env.Kind = str("kind", meup.MaxKindLen)
	return env, env.Kind != ""
}

// isSystem reports whether kind is reserved: system/* (or system.* as
// meup/v0.1 writes it before normalisation, which peek may see).
func isSystem(kind string) bool {
	return meup.IsSystem(kind) || strings.HasPrefix(kind, "system.")
}

// systemLocked handles the reserved kinds members may send: presence and
// welcome update presence and are not delivered; error is delivered. They
// never grant anything and skip the capability check. No refusal of
// system/* is ever answered.
func (e *Engine) systemLocked(in *inbound, now time.Time, replies *[]reply) Verdict {
	env, m := in.env, in.m
	switch env.Kind {
	case meup.KindSystemPresence:
		var p presencePayload
		if err := decodeShape(env.Payload, &p); err != nil || (p.Event != EventJoin && p.Event != EventLeave && p.Event != eventHeartbeat) || p.Participant.ID == "" {
			return e.refuseLocked(in, now, meup.ReasonReservedKind, "system/presence needs {event: join|leave|heartbeat, participant: {id, capabilities}}", replies)
		}
		if p.Participant.ID != m.ID {
			return e.refuseLocked(in, now, meup.ReasonReservedKind, fmt.Sprintf("system/presence from %q speaks for %q", m.ID, p.Participant.ID), replies)
		}
		if v, done := e.dedupLocked(in, now); done {
			return v
		}
		switch p.Event {
		case EventLeave:
			m.presence = PresenceOffline
			return Verdict{Envelope: env, Participant: m.ID}
		case eventHeartbeat:
			m.presence = PresenceOnline
			return Verdict{Envelope: env, Participant: m.ID}
		}
		m.presence = PresenceOnline
		if e.allowErrorLocked(in.space, in.from, now) {
			e.queueReplyLocked(replies, in.from, in.space, in.sp.self.ID, meup.KindSystemWelcome,
				[]string{m.ID}, []string{env.ID}, e.welcomeLocked(in.sp, m), now)
		}
		return Verdict{Envelope: env, Participant: m.ID}
	case meup.KindSystemWelcome:
		var w welcomePayload
		if err := decodeShape(env.Payload, &w); err != nil || w.You.ID == "" {
			return e.refuseLocked(in, now, meup.ReasonReservedKind, "system/welcome needs {you: {id, capabilities}, participants?: [...]}", replies)
		}
		if v, done := e.dedupLocked(in, now); done {
			return v
		}
		m.presence = PresenceOnline
		return Verdict{Envelope: env, Participant: m.ID}
	case meup.KindSystemError:
		var p struct {
			Error *string `json:"error"`
		}
		if err := json.Unmarshal(env.Payload, &p); err != nil || p.Error == nil || *p.Error == "" {
			return e.refuseLocked(in, now, meup.ReasonReservedKind, "system/error needs {error: reason, ...}", replies)
		}
		if v, done := e.dedupLocked(in, now); done {
			return v
		}
		m.presence = PresenceOnline
		return Verdict{Deliver: true, Envelope: env, Participant: m.ID}
	default:
		return e.refuseLocked(in, now, meup.ReasonReservedKind, fmt.Sprintf("%s is reserved: members send only system/presence, system/welcome and system/error", env.Kind), replies)
	}
}

// decodeShape decodes a system payload: a JSON object whose known fields
// have the right types (unknown fields are allowed, for later versions).
func decodeShape(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return fmt.Errorf("no payload")
	}
	return json.Unmarshal(raw, v)
}

// Presence events [Engine.Announce] sends.
const (
	EventJoin  = "join"
	EventLeave = "leave"

	eventHeartbeat = "heartbeat" // received only: the member is online
)

// presencePayload is system/presence's payload.
type presencePayload struct {
	Event       string          `json:"event"`
	Participant participantInfo `json:"participant"`
}

// participantInfo is a participant in presence and welcome payloads.
// CapabilitiesTruncated says that some of its capabilities were left out
// (to keep the payload under the limit).
type participantInfo struct {
	ID                    string            `json:"id"`
	Capabilities          []meup.Capability `json:"capabilities"`
	CapabilitiesTruncated bool              `json:"capabilities_truncated,omitempty"`
}

// welcomePayload is system/welcome's payload. ParticipantsTruncated says
// that some active members were left out.
type welcomePayload struct {
	You                   participantInfo   `json:"you"`
	Participants          []participantInfo `json:"participants"`
	ParticipantsTruncated bool              `json:"participants_truncated,omitempty"`
}

// maxWelcomeBytes bounds the JSON text of a system/welcome's payload,
// well under meup.MaxPayloadBytes: a welcome listing every capability of
// members holding many large grants would be larger than a payload may
// be, and would not be sent at all.
const maxWelcomeBytes = 192 << 10

// welcomeLocked builds the welcome for m: what this node enforces for it,
// and every active member with what this node enforces for each, within
// maxWelcomeBytes. m's own capabilities are cut like a system/error's
// your_capabilities (maxErrorCapabilityBytes). The members' entries come
// in roster order as long as their ids fit; the room left is shared
// among their capabilities (each at most maxErrorCapabilityBytes, what
// one leaves unused goes to those after it). Each list is cut as
// boundedCapsLocked cuts it: roster entry first, then grants, oldest
// first. Its cost is bounded by the budget and the roster, not by what
// the members hold.
func (e *Engine) welcomeLocked(sp *spaceState, m *memberState) welcomePayload {
	name := sp.cfg.Name
	w := welcomePayload{You: participantInfo{ID: m.ID}, Participants: []participantInfo{}}
	w.You.Capabilities, w.You.CapabilitiesTruncated = e.boundedCapsLocked(name, m, fromRoster|fromGrants, maxErrorCapabilityBytes)
	size := jsonLen(w) + len(`,"participants_truncated":true`)
	// Every entry listed with its id and no capabilities, as many as fit.
	var listed []*memberState
	for _, o := range sp.order {
		if !e.active(o) {
			continue
		}
		bare := jsonLen(participantInfo{ID: o.ID, Capabilities: []meup.Capability{}, CapabilitiesTruncated: true}) + len(",")
		if size+bare > maxWelcomeBytes {
			w.ParticipantsTruncated = true
			break
		}
		size += bare
		listed = append(listed, o)
	}
	// The room left, shared among their capabilities.
	left := maxWelcomeBytes - size
	for i, o := range listed {
		share := min(maxErrorCapabilityBytes, left/(len(listed)-i))
		caps, truncated := e.boundedCapsLocked(name, o, fromRoster|fromGrants, share+len("[]"))
		left -= jsonLen(caps) - len("[]")
		w.Participants = append(w.Participants, participantInfo{ID: o.ID, Capabilities: caps, CapabilitiesTruncated: truncated})
	}
	return w
}

// jsonLen is the length of v's JSON text (0 if it does not marshal).
func jsonLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// newID returns a fresh MEUP id: a random UUID, in its text form.
func newID() string { return identity.NewUUID().String() }

// maxGrantAckField bounds each member of a grant-ack that needs no
// capability.
const maxGrantAckField = 256

// plainGrantAck reports whether payload is what a node answers a grant
// of caps with: none, or an object of at most a string grant_id and a
// string status, each at most maxGrantAckField bytes, and the granted
// capabilities echoed (the same patterns, as a gateway's answer has them).
func plainGrantAck(payload json.RawMessage, caps []meup.Capability) bool {
	if len(payload) == 0 {
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil {
		return false
	}
	for k, v := range m {
		if k == "capabilities" {
			echo, err := meup.ParseCapabilities(v)
			if err != nil || len(echo) != len(caps) {
				return false
			}
			for i := range echo {
				if !sameCapability(echo[i], caps[i]) {
					return false
				}
			}
			continue
		}
		var s string
		if (k != "grant_id" && k != "status") || json.Unmarshal(v, &s) != nil || len(s) > maxGrantAckField {
			return false
		}
	}
	return true
}

// timestamp formats t as the envelopes' ts: RFC 3339 in UTC, milliseconds.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// acksOwnGrantLocked reports whether env is the capability/grant-ack a
// grantee's node sends for a grant this node made to it (in force, or
// lapsed lately: the grantee may answer after the revoke): nodes answer
// grants themselves, so the answer needs no capability of its own. Only
// an answer (plainGrantAck), so that it carries nothing else to the
// inbox without the capability.
func (e *Engine) acksOwnGrantLocked(space string, m *memberState, env meup.Envelope) bool {
	if env.Kind != meup.KindCapabilityGrantAck || len(env.CorrelationID) == 0 {
		return false
	}
	answers := func(g Grant) bool {
		return g.Granter == e.opts.Self && g.Grantee == m.Key && slices.Contains(env.CorrelationID, g.ID) &&
			plainGrantAck(env.Payload, g.Capabilities)
	}
	for _, g := range e.grants[space] {
		if answers(g.g) {
			return true
		}
	}
	return slices.ContainsFunc(e.lapsed[space], answers)
}
