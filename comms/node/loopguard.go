package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// CodeLoopGuard refuses a send to a peer the loop guard holds: this node's
// agent and that peer's answered each other faster than a person could,
// many times in a row, with no person in between.
const CodeLoopGuard = "loop_guard"

// LoopGuardAPI is the part of [API] that shows and lifts the loop guard
// (docs/agents.md, "Loop guard").
type LoopGuardAPI interface {
	// LoopGuards lists the peers the loop guard counts fast replies to
	// or holds, ordered by name. A node that does not serve its home
	// keeps no guard: the list is empty.
	LoopGuards(ctx context.Context) ([]LoopGuardState, error)
	// ReleaseLoopGuard lifts the hold on sends to peer (name, key or peer
	// UUID) and starts its count again; releasing a peer that is not
	// held only restarts its count. It needs the running node. It is
	// meant for a person: the MCP server does not offer it.
	ReleaseLoopGuard(ctx context.Context, peer string) error
}

// LoopGuardState is the loop guard's view of one peer.
type LoopGuardState struct {
	Peer   string `json:"peer"`
	PubKey string `json:"pubkey"`
	// Exchanges counts the replies in a row sent to the peer within
	// agent.loop_fast_ms of receiving from it, with no person in between.
	Exchanges int `json:"exchanges"`
	// Since is when the first of those exchanges began (its receipt).
	Since *time.Time `json:"since"`
	// Held is true while sends to the peer are refused with
	// CodeLoopGuard, until HeldUntil (null when not held).
	Held      bool       `json:"held"`
	HeldUntil *time.Time `json:"held_until"`
}

// maxGuardPeers bounds the peers the loop guard remembers (receipts come
// only from trusted peers, but the trust list may change); at the bound,
// peers not held are forgotten, those whose last receipt is oldest first.
const maxGuardPeers = 4096

// loopGuard notices this node's agent and a peer's replying to each other
// faster than a person could, many times in a row with no person in
// between, and then holds further sends to that peer for a while.
//
// Per peer it keeps the time of the latest receipt not answered yet. A
// send to the peer that follows such a receipt is a reply: within fast it
// is an exchange and adds one to the count, slower it sets the count to
// zero; a send with no receipt to answer changes nothing. When the count
// reaches max the peer is held for hold: every send to it is refused. A
// chain whose previous exchange ended more than hold before the next
// receipt starts over (the guard remembers a chain as long as it holds a
// peer). A person's activity (a user item, a release) sets the counts to
// zero.
//
// A nil *loopGuard, and one with max 0, guards nothing. It is safe for
// concurrent use.
type loopGuard struct {
	max        int
	fast, hold time.Duration
	now        func() time.Time

	mu    sync.Mutex
	peers map[identity.PeerID]*guardPeer
}

type guardPeer struct {
	name      string    // trust-list name at the last send or receipt
	received  time.Time // latest receipt not answered yet (zero: none)
	last      time.Time // the latest exchange's send (zero: none counted)
	count     int       // exchanges in a row
	since     time.Time // receipt that began the chain
	heldUntil time.Time // zero: not held
}

// newLoopGuard returns a guard, or nil (guarding nothing) if max is 0.
// now is its clock (nil: time.Now).
func newLoopGuard(max int, fast, hold time.Duration, now func() time.Time) *loopGuard {
	if max <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &loopGuard{max: max, fast: fast, hold: hold, now: now, peers: map[identity.PeerID]*guardPeer{}}
}

// peerLocked returns the state of id, creating it. g.mu must be held.
func (g *loopGuard) peerLocked(id identity.PeerID, name string) *guardPeer {
	p, ok := g.peers[id]
	if !ok {
		if len(g.peers) >= maxGuardPeers {
			g.evictLocked()
		}
		p = &guardPeer{}
		g.peers[id] = p
	}
	if name != "" {
		p.name = name
	}
	return p
}

// evictLocked forgets the peer not held whose last receipt is oldest.
// g.mu must be held.
func (g *loopGuard) evictLocked() {
	var victim identity.PeerID
	var oldest time.Time
	found := false
	for id, p := range g.peers {
		if !p.heldUntil.IsZero() {
			continue
		}
		t := p.received
		if p.last.After(t) {
			t = p.last
		}
		if !found || t.Before(oldest) {
			victim, oldest, found = id, t, true
		}
	}
	if found {
		delete(g.peers, victim)
	}
}

// received records a receipt from peer id.
func (g *loopGuard) received(id identity.PeerID, name string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.peerLocked(id, name).received = g.now()
	g.mu.Unlock()
}

// liftExpiredLocked ends p's hold if its time has passed, and forgets a
// chain that went quiet for longer than hold (no receipt since that a
// send could still continue it): either way its count starts again. g.mu
// must be held.
func (g *loopGuard) liftExpiredLocked(p *guardPeer, now time.Time) {
	switch {
	case !p.heldUntil.IsZero():
		if !now.Before(p.heldUntil) {
			p.heldUntil, p.count, p.since, p.last, p.received = time.Time{}, 0, time.Time{}, time.Time{}, time.Time{}
		}
	case p.count > 0 && now.Sub(p.last) > g.hold && (p.received.IsZero() || p.received.Sub(p.last) > g.hold):
		p.count, p.since, p.last = 0, time.Time{}, time.Time{}
	}
}

// guardTrip is the guard's report of a peer it began to hold.
type guardTrip struct {
	exchanges int
	since     time.Time
	until     time.Time
}

// send is asked before a send to peer id: it refuses the send while the
// peer is held (a *Error with CodeLoopGuard), else counts it. trip is
// non-nil when this send made the guard hold the peer (the send itself
// still goes).
func (g *loopGuard) send(id identity.PeerID, name string) (trip *guardTrip, err error) {
	if g == nil {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	p := g.peerLocked(id, name)
	g.liftExpiredLocked(p, now)
	if !p.heldUntil.IsZero() {
		return nil, g.heldErrorLocked(p)
	}
	if p.received.IsZero() {
		return nil, nil // not a reply: nothing to answer
	}
	recv := p.received
	p.received = time.Time{}
	if now.Sub(recv) >= g.fast {
		p.count, p.since, p.last = 0, time.Time{}, time.Time{} // a reply at a person's pace
		return nil, nil
	}
	if p.count > 0 && recv.Sub(p.last) > g.hold {
		p.count = 0 // the previous chain went quiet long ago
	}
	if p.count == 0 {
		p.since = recv
	}
	p.count++
	p.last = now
	if p.count < g.max {
		return nil, nil
	}
	p.heldUntil = now.Add(g.hold)
	return &guardTrip{exchanges: p.count, since: p.since, until: p.heldUntil}, nil
}

// heldErrorLocked says why sends to p are refused and how to lift it.
// g.mu must be held.
func (g *loopGuard) heldErrorLocked(p *guardPeer) *Error {
	return errorf(CodeLoopGuard, "%s; sends to %s are held until %s, or until a person runs: meerkatd release %s",
		g.describe(p.name, p.count, p.since), p.name, p.heldUntil.UTC().Format(time.RFC3339), guardQuote(p.name))
}

// describe says what the guard saw.
func (g *loopGuard) describe(name string, n int, since time.Time) string {
	return fmt.Sprintf("loop guard: %d replies in a row to %s, each within %s of a message from it, no person in between since %s",
		n, name, g.fast, since.UTC().Format(time.RFC3339))
}

// guardQuote quotes s for a POSIX shell if it needs it.
func guardQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@+=/") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// userActivity records that a person took part (a user item): every
// peer's count starts again, and a receipt before it is no longer one a
// send could answer without a person in between. Holds stay: a person
// lifts one with release.
func (g *loopGuard) userActivity() {
	if g == nil {
		return
	}
	g.mu.Lock()
	for _, p := range g.peers {
		p.count, p.since, p.last, p.received = 0, time.Time{}, time.Time{}, time.Time{}
	}
	g.mu.Unlock()
}

// release lifts the hold on peer id and starts its count again; it
// reports whether the peer was held.
func (g *loopGuard) release(id identity.PeerID) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.peers[id]
	if !ok {
		return false
	}
	now := g.now()
	g.liftExpiredLocked(p, now)
	held := !p.heldUntil.IsZero()
	delete(g.peers, id)
	return held
}

// states lists the peers counted or held, by name, then key.
func (g *loopGuard) states() []LoopGuardState {
	out := []LoopGuardState{}
	if g == nil {
		return out
	}
	g.mu.Lock()
	now := g.now()
	for id, p := range g.peers {
		g.liftExpiredLocked(p, now)
		if p.count == 0 && p.heldUntil.IsZero() {
			continue
		}
		out = append(out, p.state(id))
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b LoopGuardState) int {
		if c := strings.Compare(a.Peer, b.Peer); c != 0 {
			return c
		}
		return strings.Compare(a.PubKey, b.PubKey)
	})
	return out
}

// state is p (of peer id) as the API shows it.
func (p *guardPeer) state(id identity.PeerID) LoopGuardState {
	s := LoopGuardState{Peer: p.name, PubKey: id.String(), Exchanges: p.count, Held: !p.heldUntil.IsZero()}
	if !p.since.IsZero() {
		t := p.since.UTC()
		s.Since = &t
	}
	if s.Held {
		t := p.heldUntil.UTC()
		s.HeldUntil = &t
	}
	return s
}

// guardReceipt tells the loop guard about an item a peer sent, if it is
// one an agent may answer: a message, a request (not of a reserved
// meerkat. intent, which the node answers itself) or a response.
func (n *Node) guardReceipt(it comms.Item) {
	if n.loop == nil || it.Type != comms.ItemExternal {
		return
	}
	switch it.Envelope.Kind.Type() {
	case wire.TypeMessage, wire.TypeResponse:
	case wire.TypeRequest:
		if strings.HasPrefix(it.Envelope.Kind.Intent(), guardReservedPrefix) {
			return
		}
	default:
		return
	}
	n.loop.received(it.Envelope.From, it.PeerName)
}

// guardReservedPrefix starts the request intents the node handles itself.
const guardReservedPrefix = "meerkat."

// guardSend asks the loop guard before a send to peer: it refuses a send
// to a held peer, and raises the notice when this send makes the guard
// hold one. A peer that does not resolve is left to the send to refuse.
func (n *Node) guardSend(peer string) error {
	if n.loop == nil {
		return nil
	}
	p, err := n.r.ResolvePeer(peer)
	if err != nil {
		return nil
	}
	trip, err := n.loop.send(p.ID, p.Name)
	if err != nil {
		return err
	}
	if trip != nil {
		text := fmt.Sprintf("%s; further sends to %s are held until %s, or until a person runs: meerkatd release %s",
			n.loop.describe(p.Name, trip.exchanges, trip.since), p.Name, trip.until.UTC().Format(time.RFC3339), guardQuote(p.Name))
		n.log.Warn("loop guard: holding sends to a peer", "peer", p.Name, "pubkey", p.ID, "exchanges", trip.exchanges, "until", trip.until.UTC().Format(time.RFC3339))
		n.raiseNotice(Notice{Event: NoticeLoopGuard, Peer: p.Name, Text: text})
	}
	return nil
}

// guardState is the loop guard's state of peer id, nil if it counts
// nothing for it and does not hold it.
func (n *Node) guardState(id identity.PeerID) *LoopGuardState {
	if n.loop == nil {
		return nil
	}
	n.loop.mu.Lock()
	defer n.loop.mu.Unlock()
	p, ok := n.loop.peers[id]
	if !ok {
		return nil
	}
	n.loop.liftExpiredLocked(p, n.loop.now())
	if p.count == 0 && p.heldUntil.IsZero() {
		return nil
	}
	s := p.state(id)
	return &s
}

// heldGuards lists the peers the loop guard holds.
func (n *Node) heldGuards() []LoopGuardState {
	out := []LoopGuardState{}
	for _, s := range n.loop.states() {
		if s.Held {
			out = append(out, s)
		}
	}
	return out
}

// LoopGuards implements [API].
func (n *Node) LoopGuards(context.Context) ([]LoopGuardState, error) {
	if n.closing() {
		return nil, Coded(ErrClosed)
	}
	return n.loop.states(), nil
}

// ReleaseLoopGuard implements [API].
func (n *Node) ReleaseLoopGuard(_ context.Context, peer string) error {
	if n.closing() {
		return Coded(ErrClosed)
	}
	if n.mode != ModeServe {
		return errorf(CodeNoDaemon, "no node serves this home: the loop guard lives in the running node, and nothing is held without one")
	}
	p, err := n.r.ResolvePeer(peer)
	if err != nil {
		return Coded(err)
	}
	if n.loop.release(p.ID) {
		n.log.Info("loop guard: a person released a peer", "peer", p.Name, "pubkey", p.ID)
	}
	return nil
}
