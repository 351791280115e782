package space

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// SendOptions say how one copy is delivered.
type SendOptions struct {
	Reliable bool          // through the outbox, retried until acked
	TTL      time.Duration // reliable: 0 is the node's default
	NoWait   bool          // reliable: return once stored
	// Call, if not "", names the call the send belongs to, which its
	// caller may make again (the node's sends under an idempotency key;
	// its bytes, held in a string so that options compare): the Sender
	// seals each copy under an envelope id derived from the call and the
	// member, the same at every retry of the call, so a member that got
	// the copy of an earlier attempt (its ack lost) drops the repeat and
	// acknowledges it.
	Call string
}

// Delivery is the outcome of one copy.
type Delivery struct {
	ID        string // the Meerkat envelope id of this copy
	Delivery  string // "acked", "queued", "written"
	LastError string
}

// Sender delivers one MEUP envelope (its JSON text) in space to one member
// inside a signed Meerkat envelope of type "meup". The node implements it;
// it must be safe for concurrent use.
type Sender interface {
	SendMEUP(ctx context.Context, to identity.PeerID, space string, envelope []byte, o SendOptions) (Delivery, error)
}

// Draft is an envelope to send: the engine fills in protocol, ts and from,
// and the id unless the draft has one.
type Draft struct {
	// ID is the envelope's MEUP id; "" for a new random one. A send its
	// caller may make again as the same call (with SendOptions.Call)
	// gives an id derived from the call, the same at every retry: a
	// member that got an earlier attempt takes the retry for a repeat
	// (its dedup of space, sender and MEUP id) and acknowledges it, and
	// Send applies the envelope to this node's own state once (see
	// [Engine.Send]).
	ID            string
	Kind          string
	To            []string // participant ids ("" : everybody)
	CorrelationID []string
	Context       string
	Payload       json.RawMessage
	// Strict refuses the draft, instead of sending it with
	// Sent.NotApplied, when it breaks a rule of the space here that every
	// member's node applies alike, so that every one of them would refuse
	// it too: a revoke of no live grant, a grant to its own sender, a
	// withdraw of another's proposal or of none known (see
	// [RuleError]). A rule break that hangs on what this node's roster
	// lets its own participant send or give ([meup.ReasonCapability],
	// [meup.ReasonGrantExceeds]) or on its counts
	// ([meup.ReasonRateLimited]) is still sent: members whose rosters
	// differ may take it.
	Strict bool
}

// RuleError is Send's refusal of a [Draft.Strict] draft that breaks a
// rule of the space here: nothing was applied or sent. It wraps
// [ErrInvalid].
type RuleError struct {
	Reason string // the meup.Reason… code a member's node would answer
	Detail string
}

func (e *RuleError) Error() string { return "space: " + e.Reason + ": " + e.Detail }

// Unwrap returns ErrInvalid.
func (e *RuleError) Unwrap() error { return ErrInvalid }

// strictRefuses reports whether a strict draft breaking the rule reason
// here is refused (see [Draft.Strict]).
func strictRefuses(reason string) bool {
	return reason != meup.ReasonGrantExceeds && reason != meup.ReasonRateLimited && reason != meup.ReasonCapability
}

// acksGrantToSelfLocked reports whether env is the capability/grant-ack
// this node sends for a grant made to it (its correlation_id names the
// grant): the granter's node takes it without a capability
// (acksOwnGrantLocked).
func (e *Engine) acksGrantToSelfLocked(space string, env meup.Envelope) bool {
	if env.Kind != meup.KindCapabilityGrantAck || len(env.CorrelationID) == 0 {
		return false
	}
	for _, g := range e.grants[space] {
		if g.g.Grantee == e.opts.Self && slices.Contains(env.CorrelationID, g.g.ID) && plainGrantAck(env.Payload, g.g.Capabilities) {
			return true
		}
	}
	return false
}

// sendableSystem reports whether kind is one of the reserved kinds a
// member sends (Receive takes them from members).
func sendableSystem(kind string) bool {
	return kind == meup.KindSystemPresence || kind == meup.KindSystemWelcome || kind == meup.KindSystemError
}

// Copy is one member's copy of a sent envelope.
type Copy struct {
	Participant string `json:"participant"`
	Key         string `json:"key"`
	ID          string `json:"id,omitempty"`       // Meerkat envelope id
	Delivery    string `json:"delivery,omitempty"` // acked, queued, written
	LastError   string `json:"last_error,omitempty"`
	Skipped     string `json:"skipped,omitempty"` // why no copy was sent (not trusted, does not speak MEUP, not addressed)
}

// Sent reports a send.
type Sent struct {
	Envelope meup.Envelope `json:"envelope"`
	Copies   []Copy        `json:"copies"`
	// NotApplied says why this node's own state did not take the
	// envelope (a rule it breaks, say a grant beyond what this node
	// holds); the copies went out anyway, for the receivers to judge.
	NotApplied string `json:"not_applied,omitempty"`
}

// Reasons a member got no copy ([Copy.Skipped]).
const (
	SkippedNotTrusted   = "not trusted"
	SkippedNotAddressed = "not addressed"
	SkippedNoMEUP       = "does not speak MEUP"
)

// target is one copy to send.
type target struct {
	key identity.PeerID
	i   int // index in the copies
}

// Send builds an envelope from d as this node's participant, validates it
// and sends one copy to each other active member (or, in a space with
// [DeliveryAddressed], to the members d.To names, all if none), skipping
// members whose key is not trusted and members marked with [Engine.NoMEUP].
// Copies go out concurrently (at most [MaxConcurrentSends] at a time)
// with o; Send returns once every copy's SendMEUP returned.
//
// Send checks this node's own capabilities and the rules of the space as
// a member's node checks what it receives, and applies the envelope to
// this node's own state as a receiver would
// (a grant is recorded and enforced here, a proposal tracked, a kick or
// invite changes the roster), before the copies go out, so that the
// member a kick removes still gets its copy and an invited one does not.
// An envelope that breaks a rule here is sent anyway, and Sent.NotApplied
// says why it changed nothing here, unless the draft is strict and the
// rule one every member applies alike: then Send returns a [*RuleError]
// and sends nothing.
//
// A draft with its own ID is a call its caller may make again: Send
// remembers the id as this node's own (in the Store, with the ids seen
// from members) unless the envelope broke a rule here (then a retry is
// checked again), and a later Send of that id is taken for a retry of
// the call: its copies go out again (the
// members drop those they got already), but it is not applied here a
// second time (its rules would refuse it now only because it was
// applied: its proposal or grant id in use, its kicked member gone).
func (e *Engine) Send(ctx context.Context, space string, d Draft, o SendOptions) (Sent, error) {
	e.mu.Lock()
	sp := e.spaces[space]
	if sp == nil || sp.self == nil {
		e.mu.Unlock()
		return Sent{}, fmt.Errorf("%w: %q", ErrUnknownSpace, space)
	}
	now := e.now()
	id := d.ID
	if id == "" {
		id = newID()
	}
	env := meup.Envelope{
		Protocol:      e.opts.Protocol,
		ID:            id,
		TS:            timestamp(now),
		From:          sp.self.ID,
		To:            slices.Clone(d.To),
		Kind:          d.Kind,
		CorrelationID: slices.Clone(d.CorrelationID),
		Context:       d.Context,
		Payload:       bytes.Clone(d.Payload),
	}
	if err := env.Validate(); err != nil {
		e.mu.Unlock()
		return Sent{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkOwnCall(env); err != nil {
		e.mu.Unlock()
		return Sent{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, id := range env.To {
		if sp.byID[id] == nil {
			e.mu.Unlock()
			return Sent{}, fmt.Errorf("%w: %q is not a member of space %q (list_spaces or meerkatd space show lists them)", ErrInvalid, id, space)
		}
	}
	data, err := env.Encode(e.opts.Protocol)
	if err != nil {
		e.mu.Unlock()
		return Sent{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	copies, targets := e.copiesLocked(sp, env.To)
	var notApplied string
	retry := d.ID != "" && e.sentBeforeLocked(space, env.ID, now)
	if !retry {
		// The checks a member's node makes of what it receives (Receive),
		// but that this node trusts itself: what fails here is not
		// applied here, as a member whose roster agrees refuses it.
		var eff effect
		var reason, detail string
		switch {
		case isSystem(env.Kind):
			if !sendableSystem(env.Kind) {
				reason, detail = meup.ReasonReservedKind, fmt.Sprintf("%s is reserved: members send only system/presence, system/welcome and system/error", env.Kind)
			}
		default:
			eff, reason, detail = e.checkLocked(sp, sp.self, env, now)
			// A member checks the sender's capabilities first; a strict
			// draft is still refused for a rule every member applies
			// alike (its roster here may be what lacks the capability).
			if !allows(e.holdsLocked(space, sp.self), env) && !e.acksGrantToSelfLocked(space, env) &&
				(reason == "" || !d.Strict || !strictRefuses(reason)) {
				reason, detail = meup.ReasonCapability, noCapability(sp.self.ID, space, env.Kind)
			}
		}
		if reason != "" && d.Strict && strictRefuses(reason) {
			if d.ID != "" {
				e.forget(space, e.opts.Self, env.ID) // a retry is checked again
			}
			e.mu.Unlock()
			return Sent{}, &RuleError{Reason: reason, Detail: detail}
		}
		switch {
		case reason != "":
			notApplied = reason + ": " + detail
		case isSystem(env.Kind): // nothing to apply here
		default:
			if err := e.applyLocked(sp, sp.self, env, eff, now, false, nil); err != nil {
				notApplied = err.Error()
			}
		}
		if notApplied != "" {
			e.log.Info("space: a sent envelope changed nothing here", "space", space, "kind", env.Kind, "why", notApplied)
			if d.ID != "" {
				// Nothing was applied: a retry of the call is checked
				// again.
				e.forget(space, e.opts.Self, env.ID)
			}
		}
	}
	e.mu.Unlock()

	e.deliver(ctx, space, data, targets, o, copies)
	return Sent{Envelope: env, Copies: copies, NotApplied: notApplied}, nil
}

// sentCopy is the copy Send records this node's own MEUP ids under
// ([Store.Remember]): no Meerkat envelope brings them to this node.
const sentCopy = "sent"

// sentBeforeLocked records that this node sends MEUP id in space and
// reports whether it sent it before (a retry of the same call: see
// [Engine.Send]). A store that fails takes the send for a new one.
func (e *Engine) sentBeforeLocked(space, id string, now time.Time) bool {
	seen, err := e.st.Remember(space, e.opts.Self, id, sentCopy, now)
	if err != nil {
		e.log.Warn("space: remembering a sent MEUP id failed; the send is applied here as a new one", "space", space, "id", id, "err", err)
		return false
	}
	return seen != RememberNew
}

// copiesLocked lists a copy for every member of sp but this node, and the
// targets among them that get one: active, speaking MEUP, and addressed
// (in a space with DeliveryAddressed and a non-empty to).
func (e *Engine) copiesLocked(sp *spaceState, to []string) ([]Copy, []target) {
	copies := []Copy{}
	var targets []target
	for _, m := range sp.order {
		if m == sp.self {
			continue
		}
		c := Copy{Participant: m.ID, Key: m.Key.String()}
		why, noMEUP := e.noMEUPLocked(m.Key)
		switch {
		case sp.cfg.Delivery == DeliveryAddressed && len(to) > 0 && !slices.Contains(to, m.ID):
			c.Skipped = SkippedNotAddressed
		case !e.active(m):
			c.Skipped = SkippedNotTrusted
		case noMEUP:
			c.Skipped = SkippedNoMEUP
			if why != "" {
				c.Skipped += ": " + why
			}
		default:
			targets = append(targets, target{key: m.Key, i: len(copies)})
		}
		copies = append(copies, c)
	}
	return copies, targets
}

// deliver sends data to every target, at most MaxConcurrentSends at a
// time, and records each outcome in copies. It returns once every
// SendMEUP it started returned; targets not started before ctx ends get
// ctx's error.
func (e *Engine) deliver(ctx context.Context, space string, data []byte, targets []target, o SendOptions, copies []Copy) {
	sem := make(chan struct{}, MaxConcurrentSends)
	var wg sync.WaitGroup
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			copies[t.i].LastError = ctx.Err().Error()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d, err := e.snd.SendMEUP(ctx, t.key, space, data, o)
			c := &copies[t.i] // each goroutine writes its own element
			c.ID, c.Delivery, c.LastError = d.ID, d.Delivery, d.LastError
			if err != nil {
				c.LastError = err.Error()
			}
		}()
	}
	wg.Wait()
}

// checkOwnCall holds what this node sends as an MCP call (mcp/request,
// mcp/proposal) to what a tool server takes, a JSON-RPC request: a method
// name without spaces or control characters, and params, when given, an
// object or an array. (What members send is checked as the protocol has
// it, more loosely: a peer's call that a tool server would refuse harms
// no one here.)
func checkOwnCall(env meup.Envelope) error {
	if env.Kind != meup.KindMCPRequest && env.Kind != meup.KindMCPProposal {
		return nil
	}
	var p struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("payload: %v", err)
	}
	if i := strings.IndexFunc(p.Method, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
		return fmt.Errorf("payload.method %q: a method name has no spaces, control or format characters", p.Method)
	}
	if p.Params != nil {
		if b := bytes.TrimLeft(p.Params, " \t\r\n"); len(b) == 0 || b[0] != '{' && b[0] != '[' {
			return fmt.Errorf("payload.params: an object or an array (JSON-RPC params), not %s", quoteShortJSON(p.Params))
		}
	}
	return nil
}

// quoteShortJSON is raw JSON for a message, cut at 40 bytes.
func quoteShortJSON(raw json.RawMessage) string {
	if len(raw) > 40 {
		return strings.ToValidUTF8(string(raw[:40]), "") + "…"
	}
	return string(raw)
}
