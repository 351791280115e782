// Package storetest is a conformance suite for [space.Store]
// implementations: the memory store and the daemon's SQLite store run the
// same tests, so the space engine can rely on one contract.
//
// [Run] checks what the interface documents plus these decisions, which
// every implementation must share:
//
//   - Remember is fresh once per (space, sender, id) triple; each of the
//     three parts tells triples apart. A repeat changes nothing, not even
//     the remembered time. Forget of an unknown triple succeeds.
//   - Expire deletes remembered ids whose time is strictly before
//     seenBefore, and proposals whose State is not [space.ProposalPending]
//     and whose Updated is strictly before closedBefore. A pending
//     proposal never expires through Expire, however old. A zero cutoff
//     deletes nothing of its kind; a zero time stored is before every
//     non-zero cutoff.
//   - Grants and Proposals list oldest first by Created; equal Created
//     times are ordered by space, then ID (byte order). "" lists every
//     space; an unknown space lists nothing. PutGrant and PutProposal
//     replace every field of the row with the same space and ID and leave
//     other spaces alone.
//   - DeleteGrants counts the grants it deleted: unknown ids and repeated
//     ids count nothing more, no ids deletes nothing, and only grants of
//     the given space are touched.
//   - Every field round-trips. Times compare with time.Time.Equal at
//     nanosecond precision; the location need not survive (the SQLite
//     store keeps Unix nanoseconds, so times must lie within the years
//     1678 to 2262). Zero times stay zero. Capability Kind and Payload
//     bytes round-trip exactly as given (inner whitespace, key order,
//     escapes, number spelling) — values without surrounding whitespace,
//     as JSON decoding produces them. A nil and an empty Payload or
//     Capabilities may come back as either: they compare by length.
//   - PutGrant refuses a capability whose Kind is not valid JSON or whose
//     non-empty Payload is not, and PutProposal a non-empty Payload that
//     is not valid JSON; a refused Put changes nothing.
//   - Values are copied in and out: changing a value after passing it to
//     a Put, or one a read returned, changes nothing stored.
//   - Concurrent calls are safe (run with -race): parallel Remember of one
//     triple is fresh exactly once.
//
// [RunDurable] checks that a durable store keeps all of it across closing
// and reopening.
package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// Run runs the suite, one subtest per behaviour. open returns a new, empty
// store for the subtest t and arranges its cleanup (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) space.Store) {
	tests := []struct {
		name string
		f    func(*testing.T, space.Store)
	}{
		{"Empty", testEmpty},
		{"RememberFresh", testRememberFresh},
		{"RememberRepeatKeepsTime", testRememberRepeatKeepsTime},
		{"RememberSameCopy", testRememberSameCopy},
		{"Forget", testForget},
		{"ExpireSeen", testExpireSeen},
		{"ExpireProposals", testExpireProposals},
		{"ExpireZeroCutoffs", testExpireZeroCutoffs},
		{"GrantRoundTrip", testGrantRoundTrip},
		{"GrantZeroFields", testGrantZeroFields},
		{"PutGrantReplace", testPutGrantReplace},
		{"GrantsOrder", testGrantsOrder},
		{"DeleteGrants", testDeleteGrants},
		{"GrantInvalidJSON", testGrantInvalidJSON},
		{"ProposalRoundTrip", testProposalRoundTrip},
		{"ProposalZeroFields", testProposalZeroFields},
		{"PutProposalReplace", testPutProposalReplace},
		{"ProposalsOrder", testProposalsOrder},
		{"ProposalInvalidPayload", testProposalInvalidPayload},
		{"NoAliasing", testNoAliasing},
		{"ConcurrentRemember", testConcurrentRemember},
		{"ConcurrentMixed", testConcurrentMixed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, open(t)) })
	}
}

// base is a time with nanoseconds and a zone, so precision and Equal
// (rather than ==) are exercised.
var base = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("X", 3600))

// at returns base plus n seconds and n nanoseconds.
func at(n int) time.Time { return base.Add(time.Duration(n)*time.Second + time.Duration(n)) }

func peer(n byte) identity.PeerID {
	var p identity.PeerID
	p[0], p[17], p[31] = n, 0x5a, 0xee
	return p
}

// caps are capabilities whose raw JSON a re-encoding would change: inner
// whitespace, key order, escapes, number spelling, non-ASCII text, HTML
// characters json.Marshal would escape.
func caps() []meup.Capability {
	return []meup.Capability{
		{ID: "c1", Kind: json.RawMessage(`"mcp/request"`), Payload: json.RawMessage(`{"method": "tools/call",  "params":{"name":"read_*"}}`)},
		{Kind: json.RawMessage(`[ "chat" ,"mcp/*"]`)},
		{ID: "c3 é", Kind: json.RawMessage(`"\u0063hat"`), Payload: json.RawMessage(`{"z":1.0e2,"a":[true,null,-0],"s":"<&> \"q\" ü"}`)},
	}
}

// grant returns a grant in space sp with every field set.
func grant(sp, id string, created time.Time) space.Grant {
	return space.Grant{
		Space:        sp,
		ID:           id,
		Granter:      peer(1),
		Grantee:      peer(2),
		Capabilities: caps(),
		Created:      created,
	}
}

// proposal returns a proposal in space sp with every field set.
func proposal(sp, id, state string, created time.Time) space.Proposal {
	return space.Proposal{
		Space:      sp,
		ID:         id,
		Proposer:   "agent-" + id,
		Key:        peer(3),
		To:         []string{"worker-" + id, "reviewer é"},
		Payload:    json.RawMessage(`{"method":"tools/call", "params": {"name":"rm","arguments":{"path":"/tmp/x"}}}`),
		State:      state,
		Created:    created,
		Expires:    created.Add(time.Hour + 1),
		Updated:    created.Add(time.Minute + 2),
		By:         "human",
		Reason:     "not now",
		RequestID:  "req-" + id,
		ResponseID: "resp-" + id,
		RequestTo:  []string{"worker-" + id},
	}
}

// diffCaps describes how got differs from want, or returns "".
func diffCaps(got, want []meup.Capability) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d capabilities, want %d", len(got), len(want))
	}
	var d []string
	for i := range got {
		if got[i].ID != want[i].ID {
			d = append(d, fmt.Sprintf("capability %d: ID %q, want %q", i, got[i].ID, want[i].ID))
		}
		if !bytes.Equal(got[i].Kind, want[i].Kind) {
			d = append(d, fmt.Sprintf("capability %d: Kind %s, want %s", i, got[i].Kind, want[i].Kind))
		}
		if !bytes.Equal(got[i].Payload, want[i].Payload) {
			d = append(d, fmt.Sprintf("capability %d: Payload %s, want %s", i, got[i].Payload, want[i].Payload))
		}
	}
	return strings.Join(d, "; ")
}

// diffGrant describes how got differs from want, or returns "".
func diffGrant(got, want space.Grant) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.Space != want.Space {
		add("Space", got.Space, want.Space)
	}
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.Granter != want.Granter {
		add("Granter", got.Granter, want.Granter)
	}
	if got.Grantee != want.Grantee {
		add("Grantee", got.Grantee, want.Grantee)
	}
	if c := diffCaps(got.Capabilities, want.Capabilities); c != "" {
		d = append(d, c)
	}
	if !got.Created.Equal(want.Created) {
		add("Created", got.Created, want.Created)
	}
	return strings.Join(d, "; ")
}

// diffProposal describes how got differs from want, or returns "".
func diffProposal(got, want space.Proposal) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	for _, f := range []struct{ name, g, w string }{
		{"Space", got.Space, want.Space}, {"ID", got.ID, want.ID}, {"Proposer", got.Proposer, want.Proposer},
		{"State", got.State, want.State}, {"By", got.By, want.By}, {"Reason", got.Reason, want.Reason},
		{"RequestID", got.RequestID, want.RequestID}, {"ResponseID", got.ResponseID, want.ResponseID},
	} {
		if f.g != f.w {
			add(f.name, fmt.Sprintf("%q", f.g), fmt.Sprintf("%q", f.w))
		}
	}
	if got.Key != want.Key {
		add("Key", got.Key, want.Key)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		add("Payload", string(got.Payload), string(want.Payload))
	}
	if !slices.Equal(got.To, want.To) {
		add("To", got.To, want.To)
	}
	if !slices.Equal(got.RequestTo, want.RequestTo) {
		add("RequestTo", got.RequestTo, want.RequestTo)
	}
	for _, f := range []struct {
		name string
		g, w time.Time
	}{{"Created", got.Created, want.Created}, {"Expires", got.Expires, want.Expires}, {"Updated", got.Updated, want.Updated}} {
		if !f.g.Equal(f.w) {
			add(f.name, f.g, f.w)
		}
	}
	return strings.Join(d, "; ")
}

// copies numbers the Meerkat copies mustRemember passes: each call is
// another copy, as when a MEUP envelope is sent again.
var copies atomic.Uint64

func mustRemember(t *testing.T, s space.Store, sp string, sender identity.PeerID, id string, when time.Time, fresh bool) {
	t.Helper()
	r, err := s.Remember(sp, sender, id, fmt.Sprint("copy-", copies.Add(1)), when)
	got := r == space.RememberNew
	if err != nil {
		t.Fatalf("Remember(%q, %s, %q): %v", sp, sender.Short(), id, err)
	}
	if got != fresh {
		t.Fatalf("Remember(%q, %s, %q) fresh = %v, want %v", sp, sender.Short(), id, got, fresh)
	}
}

func mustForget(t *testing.T, s space.Store, sp string, sender identity.PeerID, id string) {
	t.Helper()
	if err := s.Forget(sp, sender, id); err != nil {
		t.Fatalf("Forget(%q, %s, %q): %v", sp, sender.Short(), id, err)
	}
}

func mustPutGrant(t *testing.T, s space.Store, g space.Grant) {
	t.Helper()
	if err := s.PutGrant(g); err != nil {
		t.Fatalf("PutGrant(%q, %q): %v", g.Space, g.ID, err)
	}
}

func mustPutProposal(t *testing.T, s space.Store, p space.Proposal) {
	t.Helper()
	if err := s.PutProposal(p); err != nil {
		t.Fatalf("PutProposal(%q, %q): %v", p.Space, p.ID, err)
	}
}

func mustExpire(t *testing.T, s space.Store, seenBefore, closedBefore time.Time, wantSeen, wantProposals int) {
	t.Helper()
	seen, props, err := s.Expire(seenBefore, closedBefore)
	if err != nil {
		t.Fatalf("Expire: %v", err)
	}
	if seen != wantSeen || props != wantProposals {
		t.Fatalf("Expire = %d seen, %d proposals; want %d, %d", seen, props, wantSeen, wantProposals)
	}
}

func grantKeys(gs []space.Grant) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Space+"/"+g.ID)
	}
	return out
}

func proposalKeys(ps []space.Proposal) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Space+"/"+p.ID)
	}
	return out
}

// checkGrants fails unless Grants(sp) returns exactly want, in order.
func checkGrants(t *testing.T, s space.Store, sp string, want ...space.Grant) {
	t.Helper()
	got, err := s.Grants(sp)
	if err != nil {
		t.Fatalf("Grants(%q): %v", sp, err)
	}
	if len(got) != len(want) {
		t.Fatalf("Grants(%q) = %v, want %v", sp, grantKeys(got), grantKeys(want))
	}
	for i := range got {
		if d := diffGrant(got[i], want[i]); d != "" {
			t.Errorf("Grants(%q)[%d] (%s/%s): %s", sp, i, want[i].Space, want[i].ID, d)
		}
	}
}

// checkProposals fails unless Proposals(sp) returns exactly want, in
// order.
func checkProposals(t *testing.T, s space.Store, sp string, want ...space.Proposal) {
	t.Helper()
	got, err := s.Proposals(sp)
	if err != nil {
		t.Fatalf("Proposals(%q): %v", sp, err)
	}
	if len(got) != len(want) {
		t.Fatalf("Proposals(%q) = %v, want %v", sp, proposalKeys(got), proposalKeys(want))
	}
	for i := range got {
		if d := diffProposal(got[i], want[i]); d != "" {
			t.Errorf("Proposals(%q)[%d] (%s/%s): %s", sp, i, want[i].Space, want[i].ID, d)
		}
	}
	for _, w := range want {
		for id, stored := range map[string]bool{w.ID: true, w.ID + "\x00absent": false} {
			if ok, err := s.HasProposal(w.Space, id); err != nil || ok != stored {
				t.Errorf("HasProposal(%q, %q) = %v, %v; want %v", w.Space, id, ok, err, stored)
			}
		}
	}
}

func testEmpty(t *testing.T, s space.Store) {
	checkGrants(t, s, "")
	checkGrants(t, s, "lab")
	checkProposals(t, s, "")
	checkProposals(t, s, "lab")
	if n, err := s.DeleteGrants("lab", "g1"); err != nil || n != 0 {
		t.Fatalf("DeleteGrants on an empty store = %d, %v", n, err)
	}
	mustForget(t, s, "lab", peer(1), "m1")
	mustExpire(t, s, at(100), at(100), 0, 0)
}

func testRememberFresh(t *testing.T, s space.Store) {
	p, q := peer(1), peer(2)
	mustRemember(t, s, "lab", p, "m1", at(0), true)
	mustRemember(t, s, "lab", p, "m1", at(0), false)
	mustRemember(t, s, "lab", p, "m1", at(5), false) // a later time is still a repeat
	// Each part of the triple tells it apart.
	mustRemember(t, s, "ops", p, "m1", at(1), true)
	mustRemember(t, s, "lab", q, "m1", at(1), true)
	mustRemember(t, s, "lab", p, "m2", at(1), true)
	// Parts that concatenate to the same text are still different.
	mustRemember(t, s, "la", p, "bm1", at(1), true)
	mustRemember(t, s, "", p, "m1", at(1), true)
	mustRemember(t, s, "lab", p, "", at(1), true)
	mustRemember(t, s, "lab", identity.PeerID{}, "m1", at(1), true)
	for _, k := range []struct {
		sp     string
		sender identity.PeerID
		id     string
	}{{"lab", p, "m1"}, {"ops", p, "m1"}, {"lab", q, "m1"}, {"lab", p, "m2"}, {"la", p, "bm1"}, {"", p, "m1"}, {"lab", p, ""}, {"lab", identity.PeerID{}, "m1"}} {
		mustRemember(t, s, k.sp, k.sender, k.id, at(2), false)
	}
}

// A repeat changes nothing: the triple keeps its first time, so it
// expires by that.
func testRememberRepeatKeepsTime(t *testing.T, s space.Store) {
	p := peer(1)
	mustRemember(t, s, "lab", p, "m1", at(1), true)
	mustRemember(t, s, "lab", p, "m1", at(10), false)
	mustExpire(t, s, at(5), time.Time{}, 1, 0)
	mustRemember(t, s, "lab", p, "m1", at(11), true)
}

func testForget(t *testing.T, s space.Store) {
	p, q := peer(1), peer(2)
	mustRemember(t, s, "lab", p, "m1", at(0), true)
	mustRemember(t, s, "lab", q, "m1", at(0), true)
	mustRemember(t, s, "ops", p, "m1", at(0), true)
	mustRemember(t, s, "lab", p, "m2", at(0), true)
	mustForget(t, s, "lab", p, "m1")
	mustRemember(t, s, "lab", p, "m1", at(1), true)
	mustRemember(t, s, "lab", p, "m1", at(1), false)
	// Forget touched only its own triple.
	mustRemember(t, s, "lab", q, "m1", at(1), false)
	mustRemember(t, s, "ops", p, "m1", at(1), false)
	mustRemember(t, s, "lab", p, "m2", at(1), false)
	// Forgetting twice, or an unknown triple, is fine.
	mustForget(t, s, "lab", p, "m2")
	mustForget(t, s, "lab", p, "m2")
	mustForget(t, s, "nowhere", peer(9), "nothing")
	mustRemember(t, s, "lab", p, "m2", at(2), true)
}

func testExpireSeen(t *testing.T, s space.Store) {
	p := peer(1)
	for i := range 5 {
		mustRemember(t, s, "lab", p, fmt.Sprint("m", i), at(i), true)
	}
	mustRemember(t, s, "ops", p, "zero", time.Time{}, true)
	// A pending proposal and a closed one updated after the cutoff: the
	// seen cutoff does not touch proposals.
	mustPutProposal(t, s, proposal("lab", "p1", space.ProposalPending, at(-100)))
	closed := proposal("lab", "p2", space.ProposalFulfilled, at(-100))
	mustPutProposal(t, s, closed)
	// Strictly before: m0 and m1 and the zero time go, m2 (at the cutoff) stays.
	mustExpire(t, s, at(2), time.Time{}, 3, 0)
	mustRemember(t, s, "lab", p, "m0", at(6), true)
	mustRemember(t, s, "lab", p, "m1", at(6), true)
	mustRemember(t, s, "ops", p, "zero", at(6), true)
	mustRemember(t, s, "lab", p, "m2", at(6), false)
	mustRemember(t, s, "lab", p, "m4", at(6), false)
	mustExpire(t, s, at(2), time.Time{}, 0, 0)
	checkProposals(t, s, "lab", proposal("lab", "p1", space.ProposalPending, at(-100)), closed)
	mustExpire(t, s, at(100), time.Time{}, 6, 0)
	mustRemember(t, s, "lab", p, "m4", at(101), true)
}

func testExpireProposals(t *testing.T, s space.Store) {
	old, cutoff := at(0), at(50)
	var keep []space.Proposal
	// Closed and last updated before the cutoff: expired.
	for i, st := range []string{space.ProposalFulfilled, space.ProposalRejected, space.ProposalWithdrawn, space.ProposalExpired} {
		p := proposal("lab", fmt.Sprint("gone", i), st, old)
		p.Updated = at(49)
		mustPutProposal(t, s, p)
	}
	// Pending, however old, while its own Expires time is not before the
	// cutoff: kept.
	pending := proposal("lab", "pending", space.ProposalPending, old.Add(-time.Hour))
	pending.Expires, pending.Updated = cutoff, old.Add(-time.Hour)
	mustPutProposal(t, s, pending)
	keep = append(keep, pending)
	// Pending but expired by its Expires time before the cutoff (nobody
	// looked at it since): expired like a closed one.
	lapsed := proposal("lab", "lapsed", space.ProposalPending, old)
	lapsed.Expires, lapsed.Updated = at(49), old
	mustPutProposal(t, s, lapsed)
	// Closed at or after the cutoff: kept.
	atCut := proposal("lab", "at-cutoff", space.ProposalRejected, old)
	atCut.Updated = cutoff
	after := proposal("ops", "after", space.ProposalFulfilled, old.Add(time.Second))
	after.Updated = at(51)
	mustPutProposal(t, s, atCut)
	mustPutProposal(t, s, after)
	keep = append(keep, atCut, after)
	// Another space's closed old proposal goes too: Expire spans spaces.
	other := proposal("ops", "gone-ops", space.ProposalWithdrawn, old)
	other.Updated = old
	mustPutProposal(t, s, other)
	// Remembered ids are untouched by the proposal cutoff.
	mustRemember(t, s, "lab", peer(1), "m", old, true)

	mustExpire(t, s, time.Time{}, cutoff, 0, 6)
	checkProposals(t, s, "", keep...)
	mustRemember(t, s, "lab", peer(1), "m", old, false)
	mustExpire(t, s, time.Time{}, cutoff, 0, 0)
	// Once closed, the pending one expires like any other.
	pending.State, pending.Updated = space.ProposalExpired, at(10)
	mustPutProposal(t, s, pending)
	mustExpire(t, s, time.Time{}, cutoff, 0, 1)
	checkProposals(t, s, "", atCut, after)
	// Both cutoffs at once.
	mustExpire(t, s, at(1000), at(1000), 1, 2)
	checkProposals(t, s, "")
}

func testExpireZeroCutoffs(t *testing.T, s space.Store) {
	mustRemember(t, s, "lab", peer(1), "m", at(0), true)
	mustRemember(t, s, "lab", peer(1), "zero", time.Time{}, true)
	closed := proposal("lab", "p", space.ProposalRejected, at(0))
	closed.Updated = time.Time{}
	mustPutProposal(t, s, closed)
	mustExpire(t, s, time.Time{}, time.Time{}, 0, 0)
	mustRemember(t, s, "lab", peer(1), "zero", at(1), false)
	checkProposals(t, s, "lab", closed)
	// A zero time stored is before any real cutoff.
	mustExpire(t, s, at(-1000), at(-1000), 1, 1)
	mustRemember(t, s, "lab", peer(1), "m", at(1), false)
}

func testGrantRoundTrip(t *testing.T, s space.Store) {
	g := grant("lab", "grant-1", at(1))
	mustPutGrant(t, s, g)
	checkGrants(t, s, "lab", g)
	checkGrants(t, s, "", g)
	// The capability bytes come back byte for byte.
	got, err := s.Grants("lab")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range caps() {
		if !bytes.Equal(got[0].Capabilities[i].Kind, c.Kind) || !bytes.Equal(got[0].Capabilities[i].Payload, c.Payload) {
			t.Errorf("capability %d = %s %s, want %s %s", i, got[0].Capabilities[i].Kind, got[0].Capabilities[i].Payload, c.Kind, c.Payload)
		}
	}
	if len(got[0].Capabilities[1].Payload) != 0 {
		t.Errorf("an absent payload read back as %q", got[0].Capabilities[1].Payload)
	}
}

func testGrantZeroFields(t *testing.T, s space.Store) {
	g := space.Grant{Space: "lab", ID: "bare"}
	mustPutGrant(t, s, g)
	e := space.Grant{Space: "lab", ID: "empty", Capabilities: []meup.Capability{}, Created: at(0)}
	mustPutGrant(t, s, e)
	checkGrants(t, s, "lab", g, e)
	got, err := s.Grants("lab")
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Created.IsZero() || !got[0].Granter.IsZero() || !got[0].Grantee.IsZero() {
		t.Errorf("zero fields read back as %+v", got[0])
	}
}

func testPutGrantReplace(t *testing.T, s space.Store) {
	a := grant("lab", "g", at(1))
	other := grant("ops", "g", at(2)) // same ID, other space
	mustPutGrant(t, s, a)
	mustPutGrant(t, s, other)
	b := space.Grant{
		Space: "lab", ID: "g", Granter: peer(7), Grantee: peer(8),
		Capabilities: []meup.Capability{{ID: "only", Kind: json.RawMessage(`"chat"`)}},
		Created:      at(3),
	}
	mustPutGrant(t, s, b)
	checkGrants(t, s, "lab", b)
	checkGrants(t, s, "ops", other)
	checkGrants(t, s, "", other, b)
	// Replacing with an older Created moves it first.
	c := b
	c.Created = at(0)
	mustPutGrant(t, s, c)
	checkGrants(t, s, "", c, other)
}

func testGrantsOrder(t *testing.T, s space.Store) {
	// Put in an order unrelated to Created, spaces mixed.
	g1 := grant("ops", "z", at(1))
	g2 := grant("lab", "y", at(2))
	g3 := grant("ops", "a", at(3))
	g4 := grant("lab", "b", at(4))
	// Equal Created: ordered by space, then ID.
	t1 := grant("ops", "t", at(5))
	t2 := grant("lab", "u", at(5))
	t3 := grant("lab", "s", at(5))
	for _, g := range []space.Grant{g4, t1, g1, t2, g3, t3, g2} {
		mustPutGrant(t, s, g)
	}
	checkGrants(t, s, "", g1, g2, g3, g4, t3, t2, t1)
	checkGrants(t, s, "lab", g2, g4, t3, t2)
	checkGrants(t, s, "ops", g1, g3, t1)
	checkGrants(t, s, "la")
	checkGrants(t, s, "nowhere")
	// Times in other zones compare as instants.
	utc := grant("lab", "utc", at(3).Add(-time.Nanosecond).UTC())
	mustPutGrant(t, s, utc)
	checkGrants(t, s, "lab", g2, utc, g4, t3, t2)
}

func testDeleteGrants(t *testing.T, s space.Store) {
	var lab []space.Grant
	for i := range 5 {
		g := grant("lab", fmt.Sprint("g", i), at(i))
		mustPutGrant(t, s, g)
		lab = append(lab, g)
	}
	ops := grant("ops", "g1", at(10)) // same ID as a lab grant
	mustPutGrant(t, s, ops)
	del := func(sp string, want int, ids ...string) {
		t.Helper()
		n, err := s.DeleteGrants(sp, ids...)
		if err != nil {
			t.Fatalf("DeleteGrants(%q, %q): %v", sp, ids, err)
		}
		if n != want {
			t.Fatalf("DeleteGrants(%q, %q) = %d, want %d", sp, ids, n, want)
		}
	}
	del("lab", 0)
	checkGrants(t, s, "lab", lab...)
	del("lab", 2, "g1", "nope", "g3", "g1")
	checkGrants(t, s, "lab", lab[0], lab[2], lab[4])
	checkGrants(t, s, "ops", ops)
	// An ID of another space: nothing.
	del("ops", 0, "g0", "g2")
	del("", 0, "g0")
	checkGrants(t, s, "", lab[0], lab[2], lab[4], ops)
	del("ops", 1, "g1")
	del("ops", 0, "g1")
	checkGrants(t, s, "", lab[0], lab[2], lab[4])
	// The ids slice may be reused by the caller at once.
	ids := []string{"g0", "g4"}
	del("lab", 2, ids...)
	ids[0], ids[1] = "g2", "g2"
	checkGrants(t, s, "lab", lab[2])
}

func testGrantInvalidJSON(t *testing.T, s space.Store) {
	good := grant("lab", "g", at(1))
	mustPutGrant(t, s, good)
	bad := []space.Grant{
		{Space: "lab", ID: "g", Capabilities: []meup.Capability{{Kind: json.RawMessage(`"chat`)}}},
		{Space: "lab", ID: "g", Capabilities: []meup.Capability{{Kind: json.RawMessage(`"chat"`)}, {Kind: nil}}},
		{Space: "lab", ID: "g", Capabilities: []meup.Capability{{Kind: json.RawMessage(`"chat"`), Payload: json.RawMessage(`{"a":}`)}}},
		{Space: "lab", ID: "new", Capabilities: []meup.Capability{{Kind: json.RawMessage(`chat`)}}},
	}
	for i, g := range bad {
		if err := s.PutGrant(g); err == nil {
			t.Errorf("PutGrant of bad grant %d succeeded", i)
		}
	}
	checkGrants(t, s, "", good)
}

func testProposalRoundTrip(t *testing.T, s space.Store) {
	p := proposal("lab", "prop-1", space.ProposalPending, at(1))
	mustPutProposal(t, s, p)
	checkProposals(t, s, "lab", p)
	checkProposals(t, s, "", p)
	for _, st := range []string{space.ProposalFulfilled, space.ProposalRejected, space.ProposalWithdrawn, space.ProposalExpired} {
		q := proposal("lab", "prop-"+st, st, at(2))
		q.Key = peer(4)
		mustPutProposal(t, s, q)
		got, err := s.Proposals("lab")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range got {
			if g.ID == q.ID {
				found = true
				if d := diffProposal(g, q); d != "" {
					t.Errorf("proposal in state %s: %s", st, d)
				}
			}
		}
		if !found {
			t.Errorf("proposal %s not listed: %v", q.ID, proposalKeys(got))
		}
	}
}

func testProposalZeroFields(t *testing.T, s space.Store) {
	p := space.Proposal{Space: "lab", ID: "bare", State: space.ProposalPending}
	mustPutProposal(t, s, p)
	e := space.Proposal{Space: "lab", ID: "empty", Payload: json.RawMessage{}, Created: at(0)}
	mustPutProposal(t, s, e)
	checkProposals(t, s, "lab", p, e)
	got, err := s.Proposals("lab")
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Created.IsZero() || !got[0].Expires.IsZero() || !got[0].Updated.IsZero() || !got[0].Key.IsZero() {
		t.Errorf("zero fields read back as %+v", got[0])
	}
}

func testPutProposalReplace(t *testing.T, s space.Store) {
	p := proposal("lab", "p", space.ProposalPending, at(1))
	p.By, p.Reason, p.RequestID, p.ResponseID = "", "", "", ""
	other := proposal("ops", "p", space.ProposalPending, at(2)) // same ID, other space
	mustPutProposal(t, s, p)
	mustPutProposal(t, s, other)
	done := p
	done.State, done.By, done.RequestID, done.ResponseID, done.Updated = space.ProposalFulfilled, "human-2", "req-9", "resp-9", at(9)
	mustPutProposal(t, s, done)
	checkProposals(t, s, "lab", done)
	checkProposals(t, s, "ops", other)
	// Every field is replaced, also with empty values.
	again := space.Proposal{Space: "lab", ID: "p", State: space.ProposalRejected, Reason: "no", Created: at(3)}
	mustPutProposal(t, s, again)
	checkProposals(t, s, "", other, again)
}

func testProposalsOrder(t *testing.T, s space.Store) {
	p1 := proposal("ops", "z", space.ProposalPending, at(1))
	p2 := proposal("lab", "y", space.ProposalRejected, at(2))
	p3 := proposal("ops", "a", space.ProposalPending, at(3))
	t1 := proposal("ops", "t", space.ProposalPending, at(4))
	t2 := proposal("lab", "u", space.ProposalPending, at(4))
	t3 := proposal("lab", "s", space.ProposalFulfilled, at(4))
	for _, p := range []space.Proposal{t1, p3, t2, p1, t3, p2} {
		mustPutProposal(t, s, p)
	}
	checkProposals(t, s, "", p1, p2, p3, t3, t2, t1)
	checkProposals(t, s, "lab", p2, t3, t2)
	checkProposals(t, s, "ops", p1, p3, t1)
	checkProposals(t, s, "op")
}

func testProposalInvalidPayload(t *testing.T, s space.Store) {
	good := proposal("lab", "p", space.ProposalPending, at(1))
	mustPutProposal(t, s, good)
	for i, payload := range []string{`{"method":`, `tools/call`, `{} {}`} {
		bad := good
		bad.Payload, bad.State = json.RawMessage(payload), space.ProposalRejected
		if err := s.PutProposal(bad); err == nil {
			t.Errorf("PutProposal with bad payload %d (%q) succeeded", i, payload)
		}
		bad.ID = "new"
		if err := s.PutProposal(bad); err == nil {
			t.Errorf("PutProposal of a new proposal with bad payload %d (%q) succeeded", i, payload)
		}
	}
	checkProposals(t, s, "", good)
}

func testNoAliasing(t *testing.T, s space.Store) {
	g := grant("lab", "g", at(1))
	want := grant("lab", "g", at(1))
	mustPutGrant(t, s, g)
	// Change what was passed in.
	g.Capabilities[0].Kind[1] = 'X'
	g.Capabilities[0].Payload[0] = '['
	g.Capabilities[1] = meup.Capability{ID: "swapped", Kind: json.RawMessage(`"other"`)}
	checkGrants(t, s, "lab", want)
	// Change what was returned.
	got, err := s.Grants("lab")
	if err != nil {
		t.Fatal(err)
	}
	got[0].Capabilities[0].Kind[1] = 'Y'
	got[0].Capabilities[2].Payload[0] = '['
	got[0].Capabilities[1].ID = "changed"
	got[0].Space = "changed"
	checkGrants(t, s, "lab", want)

	p := proposal("lab", "p", space.ProposalPending, at(1))
	wantP := proposal("lab", "p", space.ProposalPending, at(1))
	mustPutProposal(t, s, p)
	p.Payload[0] = '['
	checkProposals(t, s, "lab", wantP)
	ps, err := s.Proposals("lab")
	if err != nil {
		t.Fatal(err)
	}
	ps[0].Payload[0] = '['
	checkProposals(t, s, "lab", wantP)
}

// The same copy again (its admission was lost) is fresh and changes
// nothing; another copy of the same MEUP id is a repeat, before and
// after the same copy came back.
func testRememberSameCopy(t *testing.T, s space.Store) {
	p := peer(1)
	remember := func(id, copy string, when time.Time, want space.Remembered) {
		t.Helper()
		got, err := s.Remember("lab", p, id, copy, when)
		if err != nil || got != want {
			t.Fatalf("Remember(%q, copy %q) = %v, %v; want %v", id, copy, got, err, want)
		}
	}
	remember("m1", "copy-a", at(1), space.RememberNew)
	remember("m1", "copy-a", at(5), space.RememberSameCopy)
	remember("m1", "copy-b", at(5), space.RememberRepeat)
	remember("m1", "copy-a", at(6), space.RememberSameCopy)
	// The time stays the first one: Expire at 2 forgets the id.
	if n, _, err := s.Expire(at(2), time.Time{}); err != nil || n != 1 {
		t.Fatalf("Expire = %d, %v; want the row seen at 1 gone", n, err)
	}
	remember("m1", "copy-b", at(7), space.RememberNew)
	remember("", "", at(7), space.RememberNew)
	remember("", "", at(7), space.RememberSameCopy)
	remember("", "x", at(7), space.RememberRepeat)
}

func testConcurrentRemember(t *testing.T, s space.Store) {
	const workers, rounds = 16, 8
	// Every round, every worker remembers the same triple: one is fresh.
	fresh := make([]int, rounds)
	var mu sync.Mutex
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				got, err := s.Remember("lab", peer(1), fmt.Sprint("m", r), fmt.Sprint("copy-", r, "-", w), at(r))
				ok := got == space.RememberNew
				if err != nil {
					errs <- err
					return
				}
				if ok {
					mu.Lock()
					fresh[r]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Remember: %v", err)
	}
	for r, n := range fresh {
		if n != 1 {
			t.Errorf("triple %d: fresh %d times among %d workers, want exactly once", r, n, workers)
		}
	}
}

// Different writers and readers at once: each sees a consistent store and
// every write lands.
func testConcurrentMixed(t *testing.T, s space.Store) {
	const workers, each = 8, 6
	errs := make(chan error, workers*each*4)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			sp := fmt.Sprint("space-", w%3)
			for i := range each {
				n := w*each + i
				id := fmt.Sprint("x", n)
				if got, err := s.Remember(sp, peer(byte(w)), id, "c", at(n)); err != nil || got != space.RememberNew {
					errs <- fmt.Errorf("remember %s/%s = %v, %v; want new", sp, id, got, err)
				}
				if err := s.PutGrant(grant(sp, id, at(n))); err != nil {
					errs <- err
				}
				if err := s.PutProposal(proposal(sp, id, space.ProposalPending, at(n))); err != nil {
					errs <- err
				}
				if _, err := s.Grants(""); err != nil {
					errs <- err
				}
				if _, err := s.Proposals(sp); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent use: %v", err)
	}
	gs, err := s.Grants("")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.Proposals("")
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != workers*each || len(ps) != workers*each {
		t.Fatalf("%d grants, %d proposals; want %d each", len(gs), len(ps), workers*each)
	}
	for n := range gs {
		// Created times are distinct and increase with n, so the lists
		// are in n order.
		sp, id := fmt.Sprint("space-", n/each%3), fmt.Sprint("x", n)
		if d := diffGrant(gs[n], grant(sp, id, at(n))); d != "" {
			t.Fatalf("grant %d: %s", n, d)
		}
		if d := diffProposal(ps[n], proposal(sp, id, space.ProposalPending, at(n))); d != "" {
			t.Fatalf("proposal %d: %s", n, d)
		}
	}
}
