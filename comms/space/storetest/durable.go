package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
)

// Opener opens the durable store kept in dir (creating it if dir holds
// none) for the test t. It returns the store and a function closing it.
// The suite closes every store it opened before reopening dir, so close
// must release whatever a second open needs; open should also arrange
// (t.Cleanup) that a store left open by a failing test is closed, so
// close must be safe to call more than once.
type Opener func(t *testing.T, dir string) (s space.Store, close func() error)

// RunDurable runs the durability suite, one subtest per behaviour: what a
// store held when it was closed is what it holds when reopened —
// remembered ids (with their times, so expiry still works), forgotten and
// expired ones, grants and proposals with every field, replacements and
// deletions. Every subtest uses its own t.TempDir.
func RunDurable(t *testing.T, open Opener) {
	tests := []struct {
		name string
		f    func(*testing.T, *reopener)
	}{
		{"Seen", testDurableSeen},
		{"Grants", testDurableGrants},
		{"Proposals", testDurableProposals},
		{"Deletions", testDurableDeletions},
		{"ManyReopens", testDurableManyReopens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &reopener{t: t, open: open, dir: t.TempDir()}
			r.reopen()
			tc.f(t, r)
			r.close()
		})
	}
}

// reopener holds the store open in dir.
type reopener struct {
	t     *testing.T
	open  Opener
	dir   string
	s     space.Store
	close func() error
}

// reopen closes the open store, if any, and opens dir again.
func (r *reopener) reopen() space.Store {
	r.t.Helper()
	if r.s != nil {
		r.close()
	}
	r.s, r.close = r.open(r.t, r.dir)
	r.close = closer(r.t, r.close)
	return r.s
}

// closer wraps close to fail t on an error.
func closer(t *testing.T, close func() error) func() error {
	return func() error {
		t.Helper()
		if err := close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		return nil
	}
}

func testDurableSeen(t *testing.T, r *reopener) {
	s := r.s
	p, q := peer(1), peer(2)
	mustRemember(t, s, "lab", p, "m1", at(1), true)
	mustRemember(t, s, "lab", q, "m1", at(2), true)
	mustRemember(t, s, "ops", p, "m1", at(3), true)
	mustRemember(t, s, "lab", p, "m2", at(4), true)
	mustRemember(t, s, "lab", p, "zero", time.Time{}, true)
	s = r.reopen()
	for _, k := range []struct {
		sp, id string
		n      byte
	}{{"lab", "m1", 1}, {"lab", "m1", 2}, {"ops", "m1", 1}, {"lab", "m2", 1}, {"lab", "zero", 1}} {
		mustRemember(t, s, k.sp, peer(k.n), k.id, at(10), false)
	}
	mustRemember(t, s, "lab", p, "m3", at(10), true)
	// The times survived: expiry after reopening goes by them.
	s = r.reopen()
	mustExpire(t, s, at(3), time.Time{}, 3, 0) // m1 of p and q in lab, zero
	mustRemember(t, s, "lab", p, "m1", at(11), true)
	mustRemember(t, s, "lab", q, "m1", at(11), true)
	mustRemember(t, s, "lab", p, "zero", at(11), true)
	mustRemember(t, s, "ops", p, "m1", at(11), false)
	mustRemember(t, s, "lab", p, "m2", at(11), false)
	mustRemember(t, s, "lab", p, "m3", at(11), false)
}

func testDurableGrants(t *testing.T, r *reopener) {
	s := r.s
	a := grant("lab", "g1", at(2))
	b := grant("ops", "g1", at(1))
	c := space.Grant{Space: "lab", ID: "bare"}
	d := grant("lab", "g2", at(3))
	d.Capabilities = []meup.Capability{{ID: "x", Kind: json.RawMessage(`{"anyOf" : ["a","b"]}`), Payload: json.RawMessage(`[1, 2]`)}}
	for _, g := range []space.Grant{a, b, c, d} {
		mustPutGrant(t, s, g)
	}
	s = r.reopen()
	checkGrants(t, s, "", c, b, a, d)
	checkGrants(t, s, "lab", c, a, d)
	// Replace one; the replacement survives, not the original.
	a2 := a
	a2.Grantee, a2.Capabilities, a2.Created = peer(9), caps()[1:], at(4)
	mustPutGrant(t, s, a2)
	s = r.reopen()
	checkGrants(t, s, "", c, b, d, a2)
}

func testDurableProposals(t *testing.T, r *reopener) {
	s := r.s
	pend := proposal("lab", "p1", space.ProposalPending, at(1))
	pend.By, pend.Reason, pend.RequestID, pend.ResponseID = "", "", "", ""
	rej := proposal("ops", "p2", space.ProposalRejected, at(2))
	bare := space.Proposal{Space: "lab", ID: "bare", State: space.ProposalPending}
	for _, p := range []space.Proposal{pend, rej, bare} {
		mustPutProposal(t, s, p)
	}
	s = r.reopen()
	checkProposals(t, s, "", bare, pend, rej)
	// A state change survives.
	done := pend
	done.State, done.By, done.RequestID, done.ResponseID, done.Updated = space.ProposalFulfilled, "human", "req-1", "resp-1", at(5)
	mustPutProposal(t, s, done)
	s = r.reopen()
	checkProposals(t, s, "lab", bare, done)
	checkProposals(t, s, "ops", rej)
}

func testDurableDeletions(t *testing.T, r *reopener) {
	s := r.s
	p := peer(1)
	mustRemember(t, s, "lab", p, "forgotten", at(1), true)
	mustRemember(t, s, "lab", p, "old", at(1), true)
	mustRemember(t, s, "lab", p, "new", at(9), true)
	var gs []space.Grant
	for i := range 3 {
		g := grant("lab", fmt.Sprint("g", i), at(i))
		mustPutGrant(t, s, g)
		gs = append(gs, g)
	}
	closedOld := proposal("lab", "closed-old", space.ProposalWithdrawn, at(1))
	closedOld.Updated = at(2)
	closedNew := proposal("lab", "closed-new", space.ProposalExpired, at(1))
	closedNew.Updated = at(9)
	pending := proposal("lab", "pending", space.ProposalPending, at(0))
	pending.Updated = at(0)
	for _, x := range []space.Proposal{closedOld, closedNew, pending} {
		mustPutProposal(t, s, x)
	}
	s = r.reopen()
	mustForget(t, s, "lab", p, "forgotten")
	if n, err := s.DeleteGrants("lab", "g1"); err != nil || n != 1 {
		t.Fatalf("DeleteGrants = %d, %v; want 1", n, err)
	}
	mustExpire(t, s, at(5), at(5), 1, 1)
	s = r.reopen()
	mustRemember(t, s, "lab", p, "forgotten", at(10), true)
	mustRemember(t, s, "lab", p, "old", at(10), true)
	mustRemember(t, s, "lab", p, "new", at(10), false)
	checkGrants(t, s, "", gs[0], gs[2])
	checkProposals(t, s, "", pending, closedNew)
	if n, err := s.DeleteGrants("lab", "g1"); err != nil || n != 0 {
		t.Fatalf("DeleteGrants of a grant deleted before reopening = %d, %v; want 0", n, err)
	}
}

// Writes made between several reopens all add up.
func testDurableManyReopens(t *testing.T, r *reopener) {
	var gs []space.Grant
	var ps []space.Proposal
	for round := range 4 {
		s := r.reopen()
		for i := range round {
			mustRemember(t, s, "lab", peer(byte(i)), fmt.Sprint("m", i), at(10), false)
		}
		mustRemember(t, s, "lab", peer(byte(round)), fmt.Sprint("m", round), at(round), true)
		checkGrants(t, s, "", gs...)
		checkProposals(t, s, "", ps...)
		g := grant("lab", fmt.Sprint("g", round), at(round))
		mustPutGrant(t, s, g)
		gs = append(gs, g)
		p := proposal("ops", fmt.Sprint("p", round), space.ProposalPending, at(round))
		mustPutProposal(t, s, p)
		ps = append(ps, p)
	}
	s := r.reopen()
	checkGrants(t, s, "", gs...)
	checkProposals(t, s, "", ps...)
}
