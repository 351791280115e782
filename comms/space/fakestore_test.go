package space_test

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// fakeStore is a small in-memory space.Store for the engine's tests (the
// real ones are checked by storetest). failRemember makes Remember fail.
type fakeStore struct {
	mu           sync.Mutex
	seen         map[seenKey]time.Time
	grants       []space.Grant
	proposals    []space.Proposal
	failRemember error
	copies       map[seenKey]string // the copy each remembered id came in
}

type seenKey struct {
	space  string
	sender identity.PeerID
	id     string
}

var _ space.Store = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{seen: make(map[seenKey]time.Time), copies: map[seenKey]string{}}
}

func (s *fakeStore) Remember(sp string, sender identity.PeerID, id, copy string, at time.Time) (space.Remembered, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failRemember != nil {
		return space.RememberRepeat, s.failRemember
	}
	k := seenKey{sp, sender, id}
	if _, ok := s.seen[k]; ok {
		if s.copies[k] == copy {
			return space.RememberSameCopy, nil
		}
		return space.RememberRepeat, nil
	}
	s.seen[k], s.copies[k] = at, copy
	return space.RememberNew, nil
}

func (s *fakeStore) Forget(sp string, sender identity.PeerID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, seenKey{sp, sender, id})
	return nil
}

func (s *fakeStore) PutGrant(g space.Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(s.grants, func(x space.Grant) bool { return x.Space == g.Space && x.ID == g.ID }); i >= 0 {
		s.grants[i] = g
		return nil
	}
	s.grants = append(s.grants, g)
	return nil
}

func (s *fakeStore) DeleteGrants(sp string, ids ...string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.grants)
	s.grants = slices.DeleteFunc(s.grants, func(g space.Grant) bool { return g.Space == sp && slices.Contains(ids, g.ID) })
	return n - len(s.grants), nil
}

func (s *fakeStore) Grants(sp string) ([]space.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []space.Grant
	for _, g := range s.grants {
		if sp == "" || g.Space == sp {
			out = append(out, g)
		}
	}
	return out, nil
}

func (s *fakeStore) PutProposal(p space.Proposal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(s.proposals, func(x space.Proposal) bool { return x.Space == p.Space && x.ID == p.ID }); i >= 0 {
		s.proposals[i] = p
		return nil
	}
	s.proposals = append(s.proposals, p)
	return nil
}

func (s *fakeStore) HasProposal(sp, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.proposals, func(x space.Proposal) bool { return x.Space == sp && x.ID == id }), nil
}

func (s *fakeStore) Proposals(sp string) ([]space.Proposal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []space.Proposal
	for _, p := range s.proposals {
		if sp == "" || p.Space == sp {
			out = append(out, p)
		}
	}
	return out, nil
}

func (s *fakeStore) Expire(seenBefore, closedBefore time.Time) (int, int, error) {
	return 0, 0, errors.New("fakeStore: Expire is not used by the engine")
}

// proposal returns the stored proposal id of space sp.
func (s *fakeStore) proposal(sp, id string) (space.Proposal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.proposals {
		if p.Space == sp && p.ID == id {
			return p, true
		}
	}
	return space.Proposal{}, false
}
