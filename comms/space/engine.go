package space

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// Tunables of an Engine. They bound what peers can make it hold and how
// often it answers them.
const (
	DefaultProposalTTL  = time.Hour
	MaxGrantsPerSpace   = 1024     // live grants in one space
	MaxGrantsPerGranter = 64       // live grants one granter made in one space
	MaxPendingPerPeer   = 256      // pending proposals of one proposer in one space
	MaxTrackedPerSpace  = 4096     // proposals kept in memory per space (closed and expired ones go first)
	MaxProposalBytes    = 32 << 20 // payload bytes of the pending proposals of one space
	// MaxProposalBytesPerPeer bounds one proposer's share of
	// MaxProposalBytes, so that one member cannot fill a space's budget.
	MaxProposalBytesPerPeer = MaxProposalBytes / 8
	MaxConcurrentSends      = 16 // copies in flight at once for one Send or Announce
	// NoMEUPFor is how long a NoMEUP mark lasts: then copies go to the
	// peer again (a peer that does not trust this node yet refuses MEUP
	// the same way, and may trust it later).
	NoMEUPFor = 10 * time.Minute

	errorBurst    = 5                // system/error answers a (space, sender) may get at once
	errorRefill   = 10 * time.Second // then one more per this much time
	maxLimiters   = 4096             // (space, sender) rate limiters kept
	replyTimeout  = 10 * time.Second // bound on one reply's SendMEUP (it does not wait for the network)
	replyTTL      = 10 * time.Minute // time-to-live of replies (errors, welcome, grant-ack)
	presenceTTL   = 10 * time.Minute // of a reliable presence join
	maxSenderRefs = 8192             // NoMEUP marks kept
	maxUndone     = 4096             // envelopes applied but not admitted (Undo) kept
)

// Errors returned by the engine.
var (
	// ErrUnknownSpace: no such space in the roster, or this node is not a
	// member of it.
	ErrUnknownSpace = errors.New("space: unknown space")
	// ErrInvalid: a draft that does not make a valid envelope.
	ErrInvalid = errors.New("space: invalid envelope")
)

// Presence states as [MemberInfo] shows them.
const (
	PresenceOnline  = "online"
	PresenceOffline = "offline"
	PresenceUnknown = "unknown"
)

// Member states as [MemberInfo] shows them.
const (
	StatusActive  = "active"
	StatusPending = "pending" // its key is not trusted here: it receives nothing and is refused
	StatusNoMEUP  = "no_meup" // its node does not take MEUP envelopes: no copies go to it
)

// Options configure an Engine. The zero value of each field is a
// sensible default, except Self, which is required.
type Options struct {
	Self        identity.PeerID            // this node's key
	Protocol    string                     // emitted protocol ("" : meup.DefaultProtocol)
	ProposalTTL time.Duration              // a pending proposal expires after this (0: 1 hour)
	Trusted     func(identity.PeerID) bool // whether a key is in the trust list now (nil: none is)
	Now         func() time.Time           // nil: time.Now
	Logger      *slog.Logger               // nil: discard
	Observe     func(Refusal)              // told of every refused envelope (audit); must not block

	// SaveRoster persists a roster the engine changed (a kick or an
	// invite, received or sent, and [Engine.UpdateRoster]). It is called
	// with the engine's lock held, so it must not call the engine. nil:
	// changes live in memory only. When the place it saves to holds
	// rosters the engine has not been given yet (spaces.json edited by
	// hand, not reloaded yet), it must not overwrite them: it returns a
	// *[StaleRosterError] holding them, and the engine makes them the
	// rosters in force, applies its change to them instead and saves
	// again. Another error is logged (an UpdateRoster fails with it); a
	// kick or invite stays in force in memory.
	SaveRoster func(*Roster) error
}

// StaleRosterError is what Options.SaveRoster returns instead of saving
// over rosters the engine has not been given yet: Current are those
// rosters (validated).
type StaleRosterError struct {
	Current *Roster
}

func (e *StaleRosterError) Error() string {
	return "space: the rosters file changed since the engine last read or wrote it"
}

// maxStaleRetries bounds how many times one roster change is applied
// again to rosters SaveRoster found newer (StaleRosterError).
const maxStaleRetries = 4

func (o *Options) setDefaults() {
	if o.Protocol == "" {
		o.Protocol = meup.DefaultProtocol
	}
	if o.ProposalTTL <= 0 {
		o.ProposalTTL = DefaultProposalTTL
	}
	if o.Trusted == nil {
		o.Trusted = func(identity.PeerID) bool { return false }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Engine runs the spaces of one node. Its methods are safe for concurrent
// use. It starts no goroutines of its own: Send and Announce wait for the
// copies they start.
type Engine struct {
	st   Store
	snd  Sender
	opts Options
	log  *slog.Logger

	mu     sync.Mutex // guards the fields below; never held while calling the Sender or Observe
	roster *Roster    // in force; never handed out (copies are)
	spaces map[string]*spaceState
	grants map[string][]*grantEntry // by space, oldest first; mirrors the Store
	// lapsed holds, by space, the last maxLapsedGrants grants this node
	// made that were revoked, cut down or dropped, as made: a grantee's
	// node that was away answers a grant with capability/grant-ack when
	// it gets it, maybe after the revoke, and that answer is no violation.
	lapsed    map[string][]Grant
	proposals map[string]*proposalIndex      // by space
	noMEUP    map[identity.PeerID]noMEUPMark // peers that refused MEUP frames lately, and why
	limiters  map[limiterKey]*tokenBucket    // system/error answers per (space, sender)
	undone    map[undoKey][sha256.Size]byte  // envelopes applied but not admitted (Undo): the digest of each
	undoOrder []undoKey                      // the keys of undone, oldest first
}

// spaceState is one space of the roster as the engine runs it.
type spaceState struct {
	cfg   Config
	self  *memberState // nil: this node is not a member, the space is not active here
	byKey map[identity.PeerID]*memberState
	byID  map[string]*memberState
	order []*memberState // roster order
}

// memberState is one member and what the engine learnt about it. The
// learnt part (presence, last seen, refusals) survives roster changes
// that keep the member's key.
type memberState struct {
	Member
	roster   *meup.Matcher   // its roster capabilities, compiled
	matchers []*meup.Matcher // roster and live grants; nil: to be rebuilt

	presence string
	lastSeen time.Time
	refused  uint64
}

// grantEntry is a live grant with its capabilities compiled.
type grantEntry struct {
	g Grant
	m *meup.Matcher
}

type limiterKey struct {
	space string
	from  identity.PeerID
}

// New returns an engine keeping its state in st and sending through snd.
// It loads the live grants and the proposals st holds; roster may be nil
// (no spaces yet).
func New(st Store, snd Sender, roster *Roster, o Options) (*Engine, error) {
	if st == nil || snd == nil {
		return nil, errors.New("space: New needs a store and a sender")
	}
	if o.Self.IsZero() {
		return nil, errors.New("space: Options.Self is required")
	}
	o.setDefaults()
	switch o.Protocol {
	case meup.ProtocolMEUP01, meup.ProtocolMEUP02, meup.ProtocolMEW03, meup.ProtocolMEW04:
	default:
		return nil, fmt.Errorf("space: protocol %q is not one this node can emit", o.Protocol)
	}
	if roster == nil {
		roster = &Roster{}
	}
	if err := roster.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		st:        st,
		snd:       snd,
		opts:      o,
		log:       o.Logger,
		grants:    make(map[string][]*grantEntry),
		lapsed:    make(map[string][]Grant),
		proposals: make(map[string]*proposalIndex),
		noMEUP:    make(map[identity.PeerID]noMEUPMark),
		limiters:  make(map[limiterKey]*tokenBucket),
		undone:    make(map[undoKey][sha256.Size]byte),
	}
	grants, err := st.Grants("")
	if err != nil {
		return nil, fmt.Errorf("space: load grants: %w", err)
	}
	for _, g := range grants {
		m, err := meup.Compile(g.Capabilities)
		if err != nil {
			// Fail closed: a grant this build cannot compile grants nothing.
			e.log.Warn("space: stored grant does not compile; ignored", "space", g.Space, "grant", g.ID, "err", err)
			continue
		}
		e.grants[g.Space] = append(e.grants[g.Space], &grantEntry{g: g, m: m})
	}
	props, err := st.Proposals("")
	if err != nil {
		return nil, fmt.Errorf("space: load proposals: %w", err)
	}
	now := e.now()
	for _, p := range props {
		e.proposalsLocked(p.Space).add(p, now)
	}
	e.setRosterLocked(roster.clone())
	return e, nil
}

// SetRoster replaces the rosters (spaces.json reloaded or edited). A
// roster that does not validate is refused whole and the one in force
// stays. What the engine learnt about members that stay (presence, last
// seen, refusals) is kept.
func (e *Engine) SetRoster(r *Roster) error {
	if err := r.Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setRosterLocked(r.clone())
	return nil
}

// ReloadRoster makes the rosters load returns the ones in force, like
// SetRoster, but calls load with the engine's lock held: no roster change
// of the engine (a kick, an invite, UpdateRoster) falls between reading
// the rosters and putting them in force, and load may record what it
// read for Options.SaveRoster (it must not call the engine).
func (e *Engine) ReloadRoster(load func() (*Roster, error)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := load()
	if err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	e.setRosterLocked(r.clone())
	return nil
}

// UpdateRoster changes the rosters in force: change edits a copy of them
// (an error from it changes nothing and is returned as is), the result
// must validate and is saved (Options.SaveRoster) before it is put in
// force. All of it holds the engine's lock, so a kick or invite received
// meanwhile is neither lost nor undone: it applies before the copy is
// taken or after the result is in force. When SaveRoster finds newer
// rosters in the file (StaleRosterError), they are put in force and
// change runs again on a copy of them. change must not call the engine.
func (e *Engine) UpdateRoster(change func(*Roster) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changeRosterLocked(change, true)
}

// changeRosterLocked applies change to a copy of the rosters in force,
// validates the result, saves it (Options.SaveRoster) and puts it in
// force. When SaveRoster reports newer rosters (a hand edit of the file
// not reloaded yet), they become the base and change runs again on a
// copy of them, so that neither the edit nor the change is lost. An
// error from change or Validate changes nothing but putting such newer
// rosters in force. strict: an error saving changes nothing either and
// is returned; otherwise it is logged and the change stays in force in
// memory.
func (e *Engine) changeRosterLocked(change func(*Roster) error, strict bool) error {
	base := e.roster
	adopt := func() {
		if base != e.roster {
			e.setRosterLocked(base)
		}
	}
	for try := 1; ; try++ {
		r := base.clone()
		err := change(r)
		if err == nil {
			err = r.Validate()
		}
		if err != nil {
			adopt()
			return err
		}
		if e.opts.SaveRoster == nil {
			e.setRosterLocked(r)
			return nil
		}
		err = e.opts.SaveRoster(r.clone())
		var stale *StaleRosterError
		if errors.As(err, &stale) && stale.Current != nil && stale.Current.Validate() == nil {
			base = stale.Current.clone()
			if try <= maxStaleRetries {
				continue
			}
			// Out of tries, the file's rosters are still what the saver
			// now takes for the file's: the change goes on them (in
			// memory only), never on rosters the file no longer has.
			r = base.clone()
			if change(r) != nil || r.Validate() != nil {
				r = base
			}
		}
		if err != nil {
			if strict {
				adopt()
				return err
			}
			e.log.Warn("space: saving the roster failed; the change stays in memory", "err", err)
		}
		e.setRosterLocked(r)
		return nil
	}
}

// Roster returns a copy of the rosters in force.
func (e *Engine) Roster() *Roster {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.roster.clone()
}

// setRosterLocked makes r (validated, owned by the engine from now on) the
// roster in force and rebuilds the space states. Grants that no longer
// stand are dropped and pending proposals of members gone expire
// (rosterChangedLocked). e.mu must be held (or e not yet shared).
func (e *Engine) setRosterLocked(r *Roster) {
	old := e.spaces
	e.roster = r
	e.spaces = make(map[string]*spaceState, len(r.Spaces))
	for _, c := range r.Spaces {
		sp := &spaceState{
			cfg:   c,
			byKey: make(map[identity.PeerID]*memberState, len(c.Members)),
			byID:  make(map[string]*memberState, len(c.Members)),
		}
		var prev *spaceState
		if old != nil {
			prev = old[c.Name]
		}
		for _, m := range c.Members {
			ms := &memberState{Member: m, presence: PresenceUnknown}
			if prev != nil {
				if p := prev.byKey[m.Key]; p != nil {
					ms.presence, ms.lastSeen, ms.refused = p.presence, p.lastSeen, p.refused
				}
			}
			var err error
			if ms.roster, err = meup.Compile(m.Capabilities); err != nil {
				// Validate compiled it already; this is a bug, and the
				// member holds nothing rather than something unchecked.
				e.log.Error("space: bug: roster capabilities stopped compiling", "space", c.Name, "member", m.ID, "err", err)
				ms.roster = nil
			}
			if m.Key == e.opts.Self {
				sp.self = ms
				ms.presence = PresenceOnline
			}
			sp.byKey[m.Key] = ms
			sp.byID[m.ID] = ms
			sp.order = append(sp.order, ms)
		}
		e.spaces[c.Name] = sp
	}
	e.rosterChangedLocked(old) // may lapse the grants of spaces gone: forgotten below
	for space := range e.lapsed {
		if e.spaces[space] == nil {
			delete(e.lapsed, space)
		}
	}
}

// active reports whether member m can send and receive here: this node,
// or a key the trust list holds now.
func (e *Engine) active(m *memberState) bool {
	return m.Key == e.opts.Self || e.opts.Trusted(m.Key)
}

// holdsLocked returns the compiled capability sets this node enforces for
// m in space: its roster entry and its live grants. They are compiled
// once, when the roster or the grants change, and cached.
func (e *Engine) holdsLocked(space string, m *memberState) []*meup.Matcher {
	if m.matchers != nil {
		return m.matchers
	}
	ms := make([]*meup.Matcher, 0, 1)
	if m.roster != nil {
		ms = append(ms, m.roster)
	}
	for _, g := range e.grants[space] {
		if g.g.Grantee == m.Key {
			ms = append(ms, g.m)
		}
	}
	m.matchers = ms
	return ms
}

// capSource selects what boundedCapsLocked lists of a member.
type capSource uint8

const (
	fromRoster capSource = 1 << iota // its roster entry's capabilities
	fromGrants                       // those of the space's live grants to it
)

// boundedCapsLocked returns the capabilities of m in space that from
// selects (never nil, a deep copy): its roster entry's, then its live
// grants', oldest first, each granted one with its grant's id unless it
// has its own (what revoke --grant-id takes), as many as fit whole in
// max bytes of JSON text. truncated reports that some were left out.
// A member may hold many grants, large ones, from peers, and a roster
// entry up to meup.MaxCapabilities of meup.MaxCapabilityJSON each: every
// list a message or a listing carries is cut here.
// It scans the space's grants once (welcomeLocked runs it per member:
// members × grants), and the text it builds is bounded by max.
func (e *Engine) boundedCapsLocked(space string, m *memberState, from capSource, max int) (caps []meup.Capability, truncated bool) {
	caps = []meup.Capability{}
	size := len("[]")
	add := func(c meup.Capability, id string) bool {
		if c.ID == "" {
			c.ID = id
		}
		b, err := json.Marshal(c)
		if err != nil || size+len(b)+1 > max {
			return false
		}
		size += len(b) + 1
		caps = append(caps, meup.Capability{ID: c.ID, Kind: bytes.Clone(c.Kind), Payload: bytes.Clone(c.Payload)})
		return true
	}
	if from&fromRoster != 0 {
		for _, c := range m.Capabilities {
			if !add(c, "") {
				return caps, true
			}
		}
	}
	if from&fromGrants != 0 {
		for _, g := range e.grants[space] {
			if g.g.Grantee != m.Key {
				continue
			}
			for _, c := range g.g.Capabilities {
				if !add(c, g.g.ID) {
					return caps, true
				}
			}
		}
	}
	return caps, false
}

// maxListedGrantBytes bounds the JSON text of one member's grants in
// Spaces (list_spaces).
const maxListedGrantBytes = 64 << 10

// maxErrorCapabilityBytes bounds the JSON text of your_capabilities in a
// system/error: a member holding many large grants would otherwise make
// the answer larger than a payload may be (and it would not be sent).
const maxErrorCapabilityBytes = 64 << 10

// maxPresenceCapabilityBytes bounds the JSON text of the capabilities a
// system/presence carries: a roster entry may hold more than a payload
// may (and the presence would not be sent at all).
const maxPresenceCapabilityBytes = 64 << 10

// maxLapsedGrants bounds Engine.lapsed per space.
const maxLapsedGrants = 64

// lapseLocked remembers g, a grant of space gone or cut down, if this
// node made it (Engine.lapsed).
func (e *Engine) lapseLocked(space string, g Grant) {
	if g.Granter != e.opts.Self {
		return
	}
	l := append(e.lapsed[space], g)
	if len(l) > maxLapsedGrants {
		l = slices.Delete(l, 0, len(l)-maxLapsedGrants)
	}
	e.lapsed[space] = l
}

// grantsChangedLocked drops the cached matchers of space's members.
func (e *Engine) grantsChangedLocked(space string) {
	if sp := e.spaces[space]; sp != nil {
		for _, m := range sp.order {
			m.matchers = nil
		}
	}
}

// allows reports whether one of ms allows env. The payload is decoded
// once, and the work of matching is bounded for all of ms together (a
// member with many grants costs no more to check).
func allows(ms []*meup.Matcher, env meup.Envelope) bool {
	return meup.AllowsAny(env, ms...)
}

// covers reports whether one of ms covers c (conservative: a capability
// only the union of several sets covers is not covered).
func covers(ms []*meup.Matcher, c meup.Capability) bool {
	return meup.CoversAny(c, ms...)
}

// now returns the engine's clock.
func (e *Engine) now() time.Time { return e.opts.Now() }

// sendReplies sends replies built under the lock, after it was released.
// Each is reliable and does not wait for the network.
func (e *Engine) sendReplies(rs []reply) {
	for _, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		_, err := e.snd.SendMEUP(ctx, r.to, r.space, r.data, SendOptions{Reliable: true, NoWait: true, TTL: replyTTL})
		cancel()
		if err != nil {
			e.log.Warn("space: reply not sent", "space", r.space, "to", r.to, "kind", r.kind, "err", err)
		}
	}
}

// reply is one envelope the engine answers with.
type reply struct {
	to    identity.PeerID
	space string
	kind  string
	data  []byte
}
