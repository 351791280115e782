package space

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/identity"
)

// MemStore is a [Store] in memory, for nodes that keep nothing on disk and
// for tests: what it holds ends with the process.
//
// It is safe for concurrent use. It copies what it is given and what it
// returns, so callers may reuse or modify their values afterwards. Like
// the SQLite store it refuses a grant whose capabilities hold a Kind or
// Payload that is not valid JSON (an empty Payload is allowed) and a
// proposal whose non-empty Payload is not valid JSON, storing nothing;
// everything else it keeps as given, times included (monotonic clock
// readings and locations too). Use [NewMemStore]; the zero value is not
// usable.
type MemStore struct {
	mu        sync.Mutex
	seen      map[seenKey]seenRow
	grants    map[rowKey]Grant
	proposals map[rowKey]Proposal
}

var _ Store = (*MemStore)(nil)

type seenKey struct {
	space  string
	sender identity.PeerID
	id     string
}

// rowKey identifies a grant or a proposal.
type rowKey struct{ space, id string }

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{
		seen:      map[seenKey]seenRow{},
		grants:    map[rowKey]Grant{},
		proposals: map[rowKey]Proposal{},
	}
}

// Remember implements [Store].
func (m *MemStore) Remember(space string, sender identity.PeerID, id, copy string, at time.Time) (Remembered, error) {
	k := seenKey{space, sender, id}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.seen[k]; ok {
		if r.copy == copy {
			return RememberSameCopy, nil
		}
		return RememberRepeat, nil
	}
	m.seen[k] = seenRow{copy: copy, at: at}
	return RememberNew, nil
}

// seenRow is a remembered MEUP id: the copy it came in and when.
type seenRow struct {
	copy string
	at   time.Time
}

// Forget implements [Store].
func (m *MemStore) Forget(space string, sender identity.PeerID, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, seenKey{space, sender, id})
	return nil
}

// PutGrant implements [Store].
func (m *MemStore) PutGrant(g Grant) error {
	if err := checkStorable(g.Capabilities); err != nil {
		return fmt.Errorf("space: grant %q in %q: %w", g.ID, g.Space, err)
	}
	g = cloneGrant(g)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.grants[rowKey{g.Space, g.ID}] = g
	return nil
}

// DeleteGrants implements [Store].
func (m *MemStore) DeleteGrants(space string, ids ...string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, id := range ids {
		k := rowKey{space, id}
		if _, ok := m.grants[k]; ok {
			delete(m.grants, k)
			n++
		}
	}
	return n, nil
}

// Grants implements [Store]. Grants created at the same time are ordered
// by space, then ID.
func (m *MemStore) Grants(space string) ([]Grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Grant
	for k, g := range m.grants {
		if space == "" || k.space == space {
			out = append(out, cloneGrant(g))
		}
	}
	slices.SortFunc(out, func(a, b Grant) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Space, b.Space), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// PutProposal implements [Store].
func (m *MemStore) PutProposal(p Proposal) error {
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		return fmt.Errorf("space: proposal %q in %q: payload is not valid JSON", p.ID, p.Space)
	}
	p.Payload, p.To, p.RequestTo = slices.Clone(p.Payload), slices.Clone(p.To), slices.Clone(p.RequestTo)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.proposals[rowKey{p.Space, p.ID}] = p
	return nil
}

// Proposals implements [Store]. Proposals created at the same time are
// ordered by space, then ID.
func (m *MemStore) Proposals(space string) ([]Proposal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Proposal
	for k, p := range m.proposals {
		if space == "" || k.space == space {
			p.Payload, p.To, p.RequestTo = slices.Clone(p.Payload), slices.Clone(p.To), slices.Clone(p.RequestTo)
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Proposal) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Space, b.Space), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// HasProposal implements [Store].
func (m *MemStore) HasProposal(space, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.proposals[rowKey{space, id}]
	return ok, nil
}

// Expire implements [Store]. A zero cutoff deletes nothing of its kind.
func (m *MemStore) Expire(seenBefore, closedBefore time.Time) (seen, proposals int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, r := range m.seen {
		if r.at.Before(seenBefore) {
			delete(m.seen, k)
			seen++
		}
	}
	for k, p := range m.proposals {
		closed := p.State != ProposalPending && p.Updated.Before(closedBefore)
		lapsed := p.State == ProposalPending && p.Expires.Before(closedBefore)
		if closed || lapsed {
			delete(m.proposals, k)
			proposals++
		}
	}
	return seen, proposals, nil
}

// checkStorable refuses capabilities a store could not keep as JSON.
func checkStorable(caps []meup.Capability) error {
	for i, c := range caps {
		if !json.Valid(c.Kind) {
			return fmt.Errorf("capability %d: kind is not valid JSON", i)
		}
		if len(c.Payload) > 0 && !json.Valid(c.Payload) {
			return fmt.Errorf("capability %d: payload is not valid JSON", i)
		}
	}
	return nil
}

// cloneGrant returns g with its capabilities copied, down to their bytes.
func cloneGrant(g Grant) Grant {
	if g.Capabilities != nil {
		caps := make([]meup.Capability, len(g.Capabilities))
		for i, c := range g.Capabilities {
			caps[i] = meup.Capability{ID: c.ID, Kind: slices.Clone(c.Kind), Payload: slices.Clone(c.Payload)}
		}
		g.Capabilities = caps
	}
	return g
}
