package space_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/meerkatd/meerkatd/internal/testutil"
)

func proposal(h *harness, id string) space.Proposal {
	h.t.Helper()
	ps, err := h.e.Proposals("lab", "")
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range ps {
		if p.ID == id {
			return p
		}
	}
	h.t.Fatalf("no proposal %q in %+v", id, ps)
	return space.Proposal{}
}

// TestProposalLifecycle: pending → fulfilled (with its response
// correlated back), rejected, withdrawn only by the proposer, expired
// by the clock.
func TestProposalLifecycle(t *testing.T) {
	h := newHarness(t)
	propose := func() *env {
		e := &env{From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"name":"ls"}}`}
		h.mustDeliver(kBob, "lab", e)
		return e
	}

	// Fulfilled by a request this node sends, then answered by bob.
	p1 := propose()
	got := proposal(h, p1.ID)
	if got.State != space.ProposalPending || got.Proposer != "bob" || got.Key != kBob || !got.Expires.Equal(h.clock.Now().Add(time.Hour)) {
		t.Fatalf("new proposal %+v", got)
	}
	req := h.send("lab", space.Draft{Kind: "mcp/request", CorrelationID: []string{p1.ID}, Payload: []byte(`{"method":"tools/call","params":{"name":"ls"}}`)})
	got = proposal(h, p1.ID)
	if got.State != space.ProposalFulfilled || got.By != "alice" || got.RequestID != req.Envelope.ID {
		t.Fatalf("after the request: %+v", got)
	}
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "mcp/response", Corr: []string{req.Envelope.ID}, Payload: `{"result":{}}`})
	if got = proposal(h, p1.ID); got.ResponseID == "" || got.State != space.ProposalFulfilled {
		t.Fatalf("after the response: %+v", got)
	}
	if sp, _ := h.st.proposal("lab", p1.ID); sp.ResponseID != got.ResponseID {
		t.Errorf("stored %+v", sp)
	}

	// Rejected by carol, with a reason.
	p2 := propose()
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "mcp/reject", Corr: []string{p2.ID}, Payload: `{"reason":"too risky"}`})
	if got = proposal(h, p2.ID); got.State != space.ProposalRejected || got.By != "carol" || got.Reason != "too risky" {
		t.Fatalf("rejected: %+v", got)
	}

	// Withdrawn only by bob.
	p3 := propose()
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/withdraw", Corr: []string{p3.ID}}, meup.ReasonNotProposer)
	if got = proposal(h, p3.ID); got.State != space.ProposalPending {
		t.Fatalf("after carol's withdraw: %+v", got)
	}
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "mcp/withdraw", Corr: []string{p3.ID}})
	if got = proposal(h, p3.ID); got.State != space.ProposalWithdrawn {
		t.Fatalf("withdrawn: %+v", got)
	}

	// Expired by the clock; a late request fulfils nothing.
	p4 := propose()
	if in := h.e.Spaces(); in[0].Pending != 1 {
		t.Errorf("pending count %d, want 1", in[0].Pending)
	}
	h.clock.Add(time.Hour)
	h.send("lab", space.Draft{Kind: "mcp/request", CorrelationID: []string{p4.ID}, Payload: []byte(`{"method":"tools/call"}`)})
	exp, err := h.e.Proposals("lab", space.ProposalExpired)
	if err != nil || len(exp) != 1 || exp[0].ID != p4.ID {
		t.Fatalf("expired list %+v, %v", exp, err)
	}
	if sp, _ := h.st.proposal("lab", p4.ID); sp.State != space.ProposalExpired {
		t.Errorf("stored state %q, want expired", sp.State)
	}
	if in := h.e.Spaces(); in[0].Pending != 0 {
		t.Errorf("pending count %d, want 0", in[0].Pending)
	}
	for state, n := range map[string]int{space.ProposalPending: 0, space.ProposalFulfilled: 1, space.ProposalRejected: 1, space.ProposalWithdrawn: 1, "": 4} {
		if ps, _ := h.e.Proposals("lab", state); len(ps) != n {
			t.Errorf("%d proposals in state %q, want %d", len(ps), state, n)
		}
	}
	// Rejecting a closed proposal changes nothing but is no error.
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "mcp/reject", Corr: []string{p3.ID}})
	if got = proposal(h, p3.ID); got.State != space.ProposalWithdrawn {
		t.Errorf("closed proposal changed: %+v", got)
	}
}

// TestProposalsSurviveRestart: a proposal made before a restart can be
// withdrawn after it.
func TestProposalsSurviveRestart(t *testing.T) {
	h := newHarness(t)
	p := &env{From: "bob", Kind: "mcp/proposal", Payload: `{"method":"x"}`}
	h.mustDeliver(kBob, "lab", p)
	e2, err := space.New(h.st, h.snd, testRoster(t), space.Options{Self: kAlice, Trusted: h.isTrusted, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h.e = e2
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/withdraw", Corr: []string{p.ID}}, meup.ReasonNotProposer)
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "mcp/withdraw", Corr: []string{p.ID}})
}

// TestPendingProposalsBounded: a proposer with MaxPendingPerPeer pending
// proposals is refused more until one closes.
func TestPendingProposalsBounded(t *testing.T) {
	h := newHarness(t)
	var first string
	for i := range space.MaxPendingPerPeer {
		e := &env{From: "bob", Kind: "mcp/proposal", Payload: `{"method":"x"}`}
		h.mustDeliver(kBob, "lab", e)
		if i == 0 {
			first = e.ID
		}
	}
	v := h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/proposal", Payload: `{"method":"x"}`}, meup.ReasonRateLimited)
	if !strings.Contains(v.Refused.Detail, "pending proposals") {
		t.Errorf("detail %q", v.Refused.Detail)
	}
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "mcp/withdraw", Corr: []string{first}})
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "mcp/proposal", Payload: `{"method":"x"}`})
}

// TestKickAndInvite: a kick removes a member (and its grants) and saves
// the roster; an invite adds one that stays pending until its key is
// trusted; an invite may not pass on more than the inviter holds.
func TestKickAndInvite(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/kick", Payload: `{"participant_id":"carol"}`}, meup.ReasonCapability)
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"carol"}`})
	if _, ok := h.member("lab", "carol"); ok {
		t.Fatal("carol is still a member")
	}
	if gs, _ := h.e.Grants("lab"); len(gs) != 0 {
		t.Errorf("the kicked member's grants stay: %+v", gs)
	}
	h.mu.Lock()
	saved := len(h.saved)
	h.mu.Unlock()
	if saved != 1 {
		t.Errorf("roster saved %d times, want 1", saved)
	}
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "chat", Payload: `{"text":"hi"}`}, meup.ReasonNotAMember)
	// carol is still in "desk".
	h.mustDeliver(kCarol, "desk", &env{From: "carol", Kind: "chat", Payload: `{"text":"hi"}`})

	// Erin invites frank, whose key is not trusted yet.
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank","key":%q,"capabilities":[{"kind":"chat"}]}`, kFrank)})
	m, ok := h.member("lab", "frank")
	if !ok || m.Status != space.StatusPending || m.Key != kFrank.String() {
		t.Fatalf("frank after the invite: %+v, %v", m, ok)
	}
	chat := func() *env { return &env{From: "frank", Kind: "chat", Payload: `{"text":"hi"}`} }
	h.mustRefuse(kFrank, "lab", chat(), meup.ReasonNotAMember)
	s := h.send("lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"hello"}`)})
	for _, c := range s.Copies {
		if c.Participant == "frank" && c.Skipped != space.SkippedNotTrusted {
			t.Errorf("frank's copy %+v", c)
		}
	}
	h.trust(kFrank)
	h.mustDeliver(kFrank, "lab", chat())
	if m, _ := h.member("lab", "frank"); m.Status != space.StatusActive {
		t.Errorf("frank trusted: %+v", m)
	}
	if r := h.e.Roster(); !slices.ContainsFunc(r.Spaces[0].Members, func(m space.Member) bool { return m.ID == "frank" }) {
		t.Error("Roster() lacks frank")
	}

	// Bob holds capability/grant only for chat-like kinds; give him
	// space/invite and see him try to pass on more than he holds.
	h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"bob","capabilities":[{"kind":"space/invite"}]}`)})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"gus","key":%q,"capabilities":[{"kind":"mcp/request"}]}`, key(8))}, meup.ReasonGrantExceeds)
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank2","key":%q}`, kFrank)}, meup.ReasonInvalidEnvelope)
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"gus","key":%q,"capabilities":[{"kind":"chat"}]}`, key(8))})
	// An id that reads as a member's (it differs only in a variation
	// selector) is refused.
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"hal\u00a9","key":%q,"capabilities":[{"kind":"chat"}]}`, key(9))})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"hal\u00a9\ufe0f","key":%q,"capabilities":[{"kind":"chat"}]}`, key(10))}, meup.ReasonInvalidEnvelope)
}

// TestKickSelf: a node kicked from a space drops it.
func TestKickSelf(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"alice"}`})
	for _, in := range h.e.Spaces() {
		if in.Name == "lab" {
			t.Fatal("lab is still listed")
		}
	}
	h.mustRefuse(kErin, "lab", &env{From: "erin", Kind: "chat", Payload: `{"text":"hi"}`}, meup.ReasonUnknownSpace)
	if _, err := h.e.Send(context.Background(), "lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)}, space.SendOptions{}); err == nil {
		t.Error("Send to a dropped space succeeded")
	}
}

// TestSendCopies: one copy per other active member, carrying a fresh
// envelope from this node; untrusted members and those marked NoMEUP are
// skipped with the reason; the caller's options reach the Sender.
func TestSendCopies(t *testing.T) {
	h := newHarness(t)
	o := space.SendOptions{Reliable: true, TTL: time.Minute}
	s, err := h.e.Send(context.Background(), "lab", space.Draft{Kind: "chat", To: []string{"bob"}, Context: "c1", Payload: []byte(`{"text":"hello"}`)}, o)
	if err != nil {
		t.Fatal(err)
	}
	sent := s.Envelope
	if sent.From != "alice" || sent.Protocol != meup.DefaultProtocol || sent.ID == "" || sent.Kind != "chat" {
		t.Errorf("envelope %+v", sent)
	}
	if ts, err := time.Parse(time.RFC3339, sent.TS); err != nil || !ts.Equal(h.clock.Now()) {
		t.Errorf("ts %q: %v", sent.TS, err)
	}
	var sentTo, skipped []string
	for _, c := range s.Copies {
		if c.Skipped != "" {
			skipped = append(skipped, c.Participant+": "+c.Skipped)
		} else {
			sentTo = append(sentTo, c.Participant)
			if c.ID == "" || c.Delivery != "queued" {
				t.Errorf("copy %+v", c)
			}
		}
	}
	if !slices.Equal(sentTo, []string{"bob", "carol", "erin"}) || !slices.Equal(skipped, []string{"dave: " + space.SkippedNotTrusted}) {
		t.Errorf("sent to %v, skipped %v", sentTo, skipped)
	}
	for _, c := range h.snd.take() {
		if c.Opts != o || c.Env.ID != sent.ID || c.Space != "lab" {
			t.Errorf("copy sent %+v", c)
		}
	}
	s2 := h.send("lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"again"}`)})
	if s2.Envelope.ID == sent.ID {
		t.Error("two sends share an id")
	}
	h.snd.take()

	// NoMEUP: bob gets no copies until he sends MEUP himself.
	h.e.NoMEUP(kBob, "connection closed on a meup frame")
	if m, _ := h.member("lab", "bob"); m.Status != space.StatusNoMEUP || !strings.Contains(m.Note, "meup frame") {
		t.Errorf("bob marked: %+v", m)
	}
	s = h.send("lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)})
	if c := s.Copies[0]; c.Participant != "bob" || !strings.HasPrefix(c.Skipped, space.SkippedNoMEUP) {
		t.Errorf("bob's copy %+v", c)
	}
	if slices.Contains(participants(h.snd.take()), kBob) {
		t.Error("a copy went to bob")
	}
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "chat", Payload: `{"text":"I do speak it"}`})
	h.send("lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)})
	if !slices.Contains(participants(h.snd.take()), kBob) {
		t.Error("no copy to bob after he sent MEUP")
	}

	// A mark lasts NoMEUPFor: a peer that refused MEUP because it did
	// not trust this node yet gets copies again later.
	h.e.NoMEUP(kBob, "closed")
	h.clock.Add(space.NoMEUPFor - time.Second)
	if m, _ := h.member("lab", "bob"); m.Status != space.StatusNoMEUP {
		t.Errorf("bob before the mark ends: %+v", m)
	}
	h.clock.Add(time.Second)
	if m, _ := h.member("lab", "bob"); m.Status != space.StatusActive {
		t.Errorf("bob after the mark ends: %+v", m)
	}
	h.send("lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)})
	if !slices.Contains(participants(h.snd.take()), kBob) {
		t.Error("no copy to bob after his mark ended")
	}
}

// TestSendAddressed: in an addressed space only the members named in to
// get a copy; with no to, all do.
func TestSendAddressed(t *testing.T) {
	h := newHarness(t)
	s := h.send("desk", space.Draft{Kind: "chat", To: []string{"carol"}, Payload: []byte(`{"text":"psst"}`)})
	if got := participants(h.snd.take()); !slices.Equal(got, []identity.PeerID{kCarol}) {
		t.Errorf("copies to %v, want carol only", got)
	}
	if c := s.Copies[0]; c.Participant != "bob" || c.Skipped != space.SkippedNotAddressed {
		t.Errorf("bob's copy %+v", c)
	}
	h.send("desk", space.Draft{Kind: "chat", Payload: []byte(`{"text":"all"}`)})
	if got := participants(h.snd.take()); len(got) != 2 {
		t.Errorf("copies to %v, want bob and carol", got)
	}
}

// TestSendErrors: Send refuses what does not validate, unknown
// addressees and spaces this node is not in — and sends nothing.
func TestSendErrors(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		space string
		d     space.Draft
		want  error
		text  string // in the error, if not ""
	}{
		{"lab", space.Draft{Kind: "chat"}, space.ErrInvalid, ""},
		{"lab", space.Draft{Kind: "Bad Kind", Payload: []byte(`{"text":"x"}`)}, space.ErrInvalid, ""},
		{"lab", space.Draft{Kind: "chat", To: []string{"zed"}, Payload: []byte(`{"text":"x"}`)}, space.ErrInvalid, `"zed" is not a member of space "lab"`},
		{"other", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)}, space.ErrUnknownSpace, ""},
		{"nope", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)}, space.ErrUnknownSpace, ""},
		{"lab", space.Draft{Kind: meup.KindMCPProposal, Payload: []byte(`{"method":"tools/call","params":"str"}`)}, space.ErrInvalid, `payload.params: an object or an array (JSON-RPC params), not "str"`},
		{"lab", space.Draft{Kind: meup.KindMCPRequest, Payload: []byte(`{"method":"tools/call","params":null}`)}, space.ErrInvalid, "not null"},
		{"lab", space.Draft{Kind: meup.KindMCPProposal, Payload: []byte(`{"method":"tools/call","params":5}`)}, space.ErrInvalid, "not 5"},
		{"lab", space.Draft{Kind: meup.KindMCPProposal, Payload: []byte(`{"method":"bad method with spaces"}`)}, space.ErrInvalid, "a method name has no spaces"},
		{"lab", space.Draft{Kind: meup.KindMCPRequest, Payload: []byte(`{"method":"tools/call\t"}`)}, space.ErrInvalid, "a method name has no spaces"},
		{"lab", space.Draft{Kind: meup.KindMCPRequest, Payload: []byte(`{"method":"tools/\u200bcall"}`)}, space.ErrInvalid, "a method name has no spaces"},
	}
	for _, tt := range tests {
		_, err := h.e.Send(context.Background(), tt.space, tt.d, space.SendOptions{})
		if !errors.Is(err, tt.want) || err != nil && !strings.Contains(err.Error(), tt.text) {
			t.Errorf("Send %q %+v: %v, want %v with %q", tt.space, tt.d, err, tt.want, tt.text)
		}
	}
	if n := len(h.snd.take()); n != 0 {
		t.Errorf("%d copies sent", n)
	}
}

// A strict draft (the node's actions: revoke, grant, withdraw…) that
// breaks a rule every member's node applies alike is refused, and no copy
// goes out; one that breaks a rule hanging on this node's own roster (a
// grant beyond what its participant holds here) is sent, with
// NotApplied. A refused draft with its own id is no call made: the same
// id sent later is checked and applied as new.
func TestStrictSendRefusesWhatMembersRefuse(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kBob, "lab", &env{ID: "bobs", From: "bob", Kind: meup.KindMCPProposal, Payload: `{"method":"tools/call"}`})
	h.snd.take()
	for _, tc := range []struct {
		name   string
		d      space.Draft
		reason string
		detail string
	}{
		{"revoke of no live grant", space.Draft{Kind: meup.KindCapabilityRevoke, Payload: json.RawMessage(`{"recipient":"bob","grant_id":"nope"}`)},
			meup.ReasonInvalidEnvelope, `"bob" holds no live grant "nope" in space "lab"`},
		{"revoke of capabilities nobody holds", space.Draft{Kind: meup.KindCapabilityRevoke, Payload: json.RawMessage(`{"recipient":"bob","capabilities":[{"kind":"chat"}]}`)},
			meup.ReasonInvalidEnvelope, `no live grant of "bob" in space "lab" holds those capabilities`},
		{"grant to itself", space.Draft{Kind: meup.KindCapabilityGrant, Payload: json.RawMessage(`{"recipient":"alice","capabilities":[{"kind":"chat"}]}`)},
			meup.ReasonInvalidEnvelope, `"alice" cannot grant to itself`},
		{"withdraw of another's proposal", space.Draft{Kind: meup.KindMCPWithdraw, CorrelationID: []string{"bobs"}, Payload: json.RawMessage(`{}`)},
			meup.ReasonNotProposer, `proposal "bobs" was made by "bob"; only it may withdraw it`},
		{"reject of no known proposal", space.Draft{Kind: meup.KindMCPReject, CorrelationID: []string{"nope"}, Payload: json.RawMessage(`{}`)},
			meup.ReasonUnknownProposal, "correlation_id names no proposal known in this space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.Strict = true
			_, err := h.e.Send(context.Background(), "lab", tc.d, space.SendOptions{})
			var rule *space.RuleError
			if !errors.As(err, &rule) || rule.Reason != tc.reason || rule.Detail != tc.detail || !errors.Is(err, space.ErrInvalid) {
				t.Fatalf("got %v; want a RuleError %s: %s", err, tc.reason, tc.detail)
			}
			if n := len(h.snd.take()); n != 0 {
				t.Fatalf("%d copies sent", n)
			}
			// Not strict (a plain send): sent, and says what it breaks.
			tc.d.Strict = false
			if s := h.send("lab", tc.d); !strings.Contains(s.NotApplied, tc.reason+": "+tc.detail) || len(h.snd.take()) == 0 {
				t.Fatalf("plain send: not applied %q", s.NotApplied)
			}
		})
	}

	// Refused under an id, then sent again once the grant is live: not
	// taken for a retry of a call made before.
	revoke := space.Draft{ID: "call-r", Kind: meup.KindCapabilityRevoke, Payload: json.RawMessage(`{"recipient":"bob","grant_id":"g1"}`), Strict: true}
	if _, err := h.e.Send(context.Background(), "lab", revoke, space.SendOptions{}); !errors.As(err, new(*space.RuleError)) {
		t.Fatalf("revoke of a grant not made yet: %v", err)
	}
	h.mustDeliver(kErin, "lab", &env{ID: "g1", From: "erin", Kind: meup.KindCapabilityGrant, Payload: `{"recipient":"bob","capabilities":[{"kind":"mcp/request"}]}`})
	h.snd.take()
	if s := h.send("lab", revoke); s.NotApplied != "" || len(h.snd.take()) == 0 {
		t.Fatalf("revoke of the live grant: not applied %q", s.NotApplied)
	}
	if gs, _ := h.e.Grants("lab"); len(gs) != 0 {
		t.Fatalf("grants after the revoke: %+v", gs)
	}

	// What this node's participant holds here decides a grant_exceeds:
	// members whose rosters differ may take the grant.
	h2 := newHarness(t)
	r := testRoster(t)
	r.Spaces[0].Members[0].Capabilities = []meup.Capability{{Kind: json.RawMessage(`["chat", "capability/grant"]`)}}
	if err := h2.e.SetRoster(r); err != nil {
		t.Fatal(err)
	}
	s := h2.send("lab", space.Draft{Kind: meup.KindCapabilityGrant, Payload: json.RawMessage(`{"recipient":"bob","capabilities":[{"kind":"mcp/request"}]}`), Strict: true})
	if !strings.Contains(s.NotApplied, meup.ReasonGrantExceeds) || len(h2.snd.take()) == 0 {
		t.Fatalf("strict grant beyond what this node holds: not applied %q", s.NotApplied)
	}
	// So does whether it may send the kind at all: a strict kick it may
	// not send here is sent, not applied here.
	s = h2.send("lab", space.Draft{Kind: meup.KindSpaceKick, Payload: json.RawMessage(`{"participant_id":"bob"}`), Strict: true})
	if !strings.Contains(s.NotApplied, meup.ReasonCapability) || len(h2.snd.take()) == 0 {
		t.Fatalf("strict kick this node may not send: not applied %q", s.NotApplied)
	}
	if _, ok := h2.member("lab", "bob"); !ok {
		t.Fatal("bob was kicked here by a kick this node's roster does not let it send")
	}
	// A strict draft that every member refuses whatever its roster says
	// is refused also when this node's roster lacks its kind.
	h3 := newHarness(t)
	r = testRoster(t)
	r.Spaces[0].Members[0].Capabilities = []meup.Capability{{Kind: json.RawMessage(`"chat"`)}}
	if err := h3.e.SetRoster(r); err != nil {
		t.Fatal(err)
	}
	for _, d := range []space.Draft{
		{Kind: meup.KindCapabilityGrant, Payload: json.RawMessage(`{"recipient":"alice","capabilities":[{"kind":"chat"}]}`), Strict: true},
		{Kind: meup.KindCapabilityRevoke, Payload: json.RawMessage(`{"recipient":"bob","grant_id":"nope"}`), Strict: true},
		{Kind: meup.KindMCPReject, CorrelationID: []string{"nope"}, Payload: json.RawMessage(`{}`), Strict: true},
	} {
		s, err := h3.e.Send(context.Background(), "lab", d, space.SendOptions{})
		if n := len(h3.snd.take()); !errors.As(err, new(*space.RuleError)) || n != 0 {
			t.Errorf("strict %s without the capability here: %v, %d copies, not applied %q; want a RuleError and nothing sent", d.Kind, err, n, s.NotApplied)
		}
	}
	// The grant-ack for a grant made to this node needs no capability:
	// the granter's node takes it.
	h3.mustDeliver(kBob, "lab", &env{ID: "g9", From: "bob", Kind: meup.KindCapabilityGrant, Payload: `{"recipient":"alice","capabilities":[{"kind":"chat"}]}`})
	h3.snd.take()
	if s = h3.send("lab", space.Draft{Kind: meup.KindCapabilityGrantAck, To: []string{"bob"}, CorrelationID: []string{"g9"}, Payload: json.RawMessage(`{"grant_id":"g9","status":"accepted"}`)}); s.NotApplied != "" {
		t.Errorf("grant-ack of a grant made to this node: not applied %q", s.NotApplied)
	}
	h3.snd.take()
	// Only as an answer: with more in it, it needs the capability, which
	// this node does not hold here, as bob's node will find.
	if s = h3.send("lab", space.Draft{Kind: meup.KindCapabilityGrantAck, To: []string{"bob"}, CorrelationID: []string{"g9"}, Payload: json.RawMessage(`{"status":"accepted","text":"more"}`)}); !strings.Contains(s.NotApplied, meup.ReasonCapability) {
		t.Errorf("grant-ack carrying more than an answer: not applied %q, want %s", s.NotApplied, meup.ReasonCapability)
	}
	h3.snd.take()
}

// TestSendAppliesLocally: what this node sends changes its own state as a
// receiver's; a kick's copy still reaches the kicked member; an envelope
// that breaks a rule here (its own capabilities included) is sent but
// changes nothing, and says so.
func TestSendAppliesLocally(t *testing.T) {
	h := newHarness(t)
	s := h.send("lab", space.Draft{Kind: "mcp/proposal", Payload: []byte(`{"method":"tools/call"}`)})
	if p := proposal(h, s.Envelope.ID); p.Proposer != "alice" || p.State != space.ProposalPending {
		t.Errorf("own proposal %+v", p)
	}
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/withdraw", Corr: []string{s.Envelope.ID}}, meup.ReasonNotProposer)
	h.snd.take()

	s = h.send("lab", space.Draft{Kind: "space/kick", Payload: []byte(`{"participant_id":"bob"}`)})
	if !slices.Contains(participants(h.snd.take()), kBob) {
		t.Error("the kicked member got no copy of its kick")
	}
	if _, ok := h.member("lab", "bob"); ok {
		t.Error("bob is still a member after this node kicked him")
	}

	s = h.send("lab", space.Draft{Kind: "mcp/withdraw", CorrelationID: []string{"nope"}})
	if !strings.Contains(s.NotApplied, meup.ReasonUnknownProposal) || len(h.snd.take()) == 0 {
		t.Errorf("withdraw of nothing: NotApplied %q", s.NotApplied)
	}

	// This node may send what its own roster entry does not allow; it
	// is not applied here, as members with the same roster refuse it
	// (capability_violation), and the result says so.
	h2 := newHarness(t)
	r := testRoster(t)
	r.Spaces[0].Members[0].Capabilities = []meup.Capability{{Kind: json.RawMessage(`"chat"`)}}
	if err := h2.e.SetRoster(r); err != nil {
		t.Fatal(err)
	}
	s = h2.send("lab", space.Draft{Kind: "mcp/request", Payload: []byte(`{"method":"x"}`)})
	if len(h2.snd.take()) != 3 || !strings.Contains(s.NotApplied, meup.ReasonCapability) {
		t.Errorf("copies %+v, not applied %q", s.Copies, s.NotApplied)
	}
	for _, d := range []space.Draft{
		{Kind: meup.KindSpaceKick, Payload: []byte(`{"participant_id":"bob"}`)},
		{Kind: meup.KindCapabilityGrant, Payload: []byte(`{"recipient":"bob","capabilities":[{"kind":"chat"}]}`)},
		{Kind: "mcp/proposal", Payload: []byte(`{"method":"tools/call"}`)},
	} {
		s = h2.send("lab", d)
		if len(h2.snd.take()) == 0 || !strings.Contains(s.NotApplied, meup.ReasonCapability) {
			t.Errorf("%s: copies %+v, not applied %q; want sent, not applied (%s)", d.Kind, s.Copies, s.NotApplied, meup.ReasonCapability)
		}
	}
	if _, ok := h2.member("lab", "bob"); !ok {
		t.Error("a kick this node may not send removed bob here")
	}
	if gs, _ := h2.e.Grants("lab"); len(gs) != 0 {
		t.Errorf("a grant this node may not send stands here: %+v", gs)
	}
	if ps, _ := h2.e.Proposals("lab", ""); len(ps) != 0 {
		t.Errorf("a proposal this node may not send is listed here: %+v", ps)
	}
	// Chat, which it may send, is.
	if s = h2.send("lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"hi"}`)}); s.NotApplied != "" {
		t.Errorf("chat: not applied %q", s.NotApplied)
	}
	h2.snd.take()

	// Reserved kinds: those members send go out as they are; others are
	// sent, and the result says every member refuses them.
	s = h.send("lab", space.Draft{Kind: "system/foo", Payload: []byte(`{}`)})
	if len(h.snd.take()) == 0 || !strings.Contains(s.NotApplied, meup.ReasonReservedKind) {
		t.Errorf("system/foo: not applied %q", s.NotApplied)
	}
	s = h.send("lab", space.Draft{Kind: meup.KindSystemError, Payload: []byte(`{"error":"x"}`)})
	if len(h.snd.take()) == 0 || s.NotApplied != "" {
		t.Errorf("system/error: not applied %q", s.NotApplied)
	}
}

// TestSendConcurrencyBounded: copies go out concurrently, at most
// MaxConcurrentSends at a time, and Send waits for all of them.
func TestSendConcurrencyBounded(t *testing.T) {
	testutil.CheckGoroutines(t)
	members := []space.Member{{Key: kAlice, ID: "alice"}}
	for i := range 60 {
		members = append(members, space.Member{Key: key(byte(10 + i)), ID: fmt.Sprintf("m%d", i)})
	}
	var inFlight, most atomic.Int32
	var calls atomic.Int32
	snd := &fakeSender{t: t, hook: func(identity.PeerID) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		calls.Add(1)
		return nil
	}}
	e, err := space.New(newFakeStore(), snd, &space.Roster{Spaces: []space.Config{{Name: "big", Members: members}}},
		space.Options{Self: kAlice, Trusted: func(identity.PeerID) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Send(context.Background(), "big", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)}, space.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 60 || len(s.Copies) != 60 {
		t.Errorf("%d calls, %d copies, want 60", calls.Load(), len(s.Copies))
	}
	if m := most.Load(); m > space.MaxConcurrentSends || m < 2 {
		t.Errorf("%d copies in flight at most, want 2..%d", m, space.MaxConcurrentSends)
	}

	// A cancelled context: the copies not yet started fail with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err = e.Send(ctx, "big", space.Draft{Kind: "chat", Payload: []byte(`{"text":"x"}`)}, space.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, c := range s.Copies {
		if c.LastError != "" {
			failed++
		}
	}
	if failed == 0 {
		t.Error("no copy failed with a cancelled context")
	}
}

// TestAnnounce: join goes reliably without waiting to every other active
// member of every space this node is in; leave goes directly.
func TestAnnounce(t *testing.T) {
	testutil.CheckGoroutines(t)
	h := newHarness(t)
	h.e.Announce(context.Background(), space.EventJoin)
	sent := h.snd.take()
	bySpace := map[string][]identity.PeerID{}
	for _, c := range sent {
		bySpace[c.Space] = append(bySpace[c.Space], c.To)
		if c.Env.Kind != meup.KindSystemPresence || c.Opts != (space.SendOptions{Reliable: true, NoWait: true, TTL: 10 * time.Minute}) {
			t.Errorf("join copy %+v", c)
		}
		p := decode[struct {
			Event       string `json:"event"`
			Participant struct {
				ID           string            `json:"id"`
				Capabilities []meup.Capability `json:"capabilities"`
			} `json:"participant"`
		}](t, c.Env.Payload)
		if p.Event != "join" || p.Participant.ID != "alice" || len(p.Participant.Capabilities) != 1 {
			t.Errorf("join payload %+v", p)
		}
	}
	slices.SortFunc(bySpace["lab"], func(a, b identity.PeerID) int { return bytes.Compare(a[:], b[:]) })
	if !slices.Equal(bySpace["lab"], []identity.PeerID{kBob, kCarol, kErin}) || len(bySpace["desk"]) != 2 || len(bySpace) != 2 {
		t.Errorf("join went to %v", bySpace)
	}
	h.e.Announce(context.Background(), space.EventLeave)
	for _, c := range h.snd.take() {
		if c.Opts != (space.SendOptions{}) {
			t.Errorf("leave sent with %+v", c.Opts)
		}
	}
	h.e.Announce(context.Background(), "dance")
	if n := len(h.snd.take()); n != 0 {
		t.Errorf("unknown event sent %d copies", n)
	}
}

// A node whose roster entry holds more capabilities than a payload may
// carry still announces itself: its presence lists as many of them as
// fit, in roster order, says that it cut the list, and is sent; in a
// space where its entry is small, the presence lists it whole.
func TestAnnounceCapabilitiesBounded(t *testing.T) {
	var caps []string
	for i := range meup.MaxCapabilities {
		var fields []string
		for j := range 14 {
			fields = append(fields, fmt.Sprintf(`"p%d":"%s"`, j, strings.Repeat("p", 500)))
		}
		caps = append(caps, fmt.Sprintf(`{"kind":"x/%d","payload":{%s}}`, i, strings.Join(fields, ",")))
	}
	all := "[" + strings.Join(caps, ",") + "]"
	if len(all) < 3*meup.MaxPayloadBytes/2 {
		t.Fatalf("the roster entry's capabilities are %d bytes: not over the payload limit by far", len(all))
	}
	r, err := space.ParseRoster([]byte(fmt.Sprintf(`{"spaces": [
	  {"name": "lab", "members": [{"key": %q, "id": "alice", "capabilities": %s}, {"key": %q, "id": "bob", "capabilities": [{"kind": "chat"}]}]},
	  {"name": "desk", "members": [{"key": %q, "id": "alice", "capabilities": [{"kind": "chat"}]}, {"key": %q, "id": "bob", "capabilities": [{"kind": "chat"}]}]}
	]}`, kAlice, all, kBob, kAlice, kBob)))
	if err != nil {
		t.Fatal(err)
	}
	snd := &fakeSender{t: t}
	e, err := space.New(newFakeStore(), snd, r, space.Options{Self: kAlice, Trusted: func(k identity.PeerID) bool { return k == kBob }})
	if err != nil {
		t.Fatal(err)
	}
	for _, event := range []string{space.EventJoin, space.EventLeave} {
		e.Announce(context.Background(), event)
		sent := map[string]sentCopy{}
		for _, c := range snd.take() {
			sent[c.Space] = c
		}
		if len(sent) != 2 {
			t.Fatalf("%s: presence sent in %d spaces, want lab and desk", event, len(sent))
		}
		for name, c := range sent {
			if n := len(c.Env.Payload); c.Env.Kind != meup.KindSystemPresence || c.To != kBob || n > meup.MaxPayloadBytes {
				t.Fatalf("%s in %s: %s to %v, payload %d bytes", event, name, c.Env.Kind, c.To, n)
			}
			p := decode[struct {
				Event       string `json:"event"`
				Participant struct {
					ID           string            `json:"id"`
					Capabilities []meup.Capability `json:"capabilities"`
					Truncated    *bool             `json:"capabilities_truncated"`
				} `json:"participant"`
			}](t, c.Env.Payload)
			got := p.Participant
			if p.Event != event || got.ID != "alice" {
				t.Errorf("%s in %s: event %q, participant %q", event, name, p.Event, got.ID)
			}
			if name == "desk" {
				if got.Truncated != nil || len(got.Capabilities) != 1 || string(got.Capabilities[0].Kind) != `"chat"` {
					t.Errorf("%s in desk: %d capabilities (truncated %v), want its one, whole", event, len(got.Capabilities), got.Truncated)
				}
				continue
			}
			if got.Truncated == nil || !*got.Truncated || len(got.Capabilities) < 2 || len(got.Capabilities) >= meup.MaxCapabilities {
				t.Fatalf("%s in lab: %d of %d capabilities, truncated %v: want some, cut and marked", event, len(got.Capabilities), meup.MaxCapabilities, got.Truncated)
			}
			for i, c := range got.Capabilities {
				if string(c.Kind) != fmt.Sprintf(`"x/%d"`, i) || c.ID != "" || len(c.Payload) < 14*500 {
					t.Fatalf("%s in lab: capability %d is %s (id %q, payload %d bytes), want the roster's, in order, whole", event, i, c.Kind, c.ID, len(c.Payload))
				}
			}
		}
	}
}

// TestSetRoster: a new roster keeps what was learnt about members that
// stay; an invalid one is refused whole.
func TestSetRoster(t *testing.T) {
	h := newHarness(t)
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	h.recv(kCarol, "lab", &env{From: "carol", Kind: "system/presence", Payload: `{"event":"join","participant":{"id":"carol"}}`})
	r := testRoster(t)
	r.Spaces[0].Members[2].Capabilities = append(r.Spaces[0].Members[2].Capabilities, meup.Capability{Kind: []byte(`"mcp/request"`)})
	if err := h.e.SetRoster(r); err != nil {
		t.Fatal(err)
	}
	m, _ := h.member("lab", "carol")
	if m.Refused != 1 || m.Presence != space.PresenceOnline {
		t.Errorf("carol after SetRoster: %+v", m)
	}
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`})

	bad := testRoster(t)
	bad.Spaces[0].Members[1].ID = "carol"
	if err := h.e.SetRoster(bad); err == nil {
		t.Fatal("SetRoster took a roster with a duplicate id")
	}
	if _, ok := h.member("lab", "bob"); !ok {
		t.Error("the roster in force changed")
	}
	// Roster() is a copy.
	got := h.e.Roster()
	got.Spaces[0].Name = "changed"
	if h.e.Roster().Spaces[0].Name != "lab" {
		t.Error("Roster() shares memory with the engine")
	}
}

// TestConcurrentUse runs receives, sends and listings at once under the
// race detector.
func TestConcurrentUse(t *testing.T) {
	testutil.CheckGoroutines(t)
	h := newHarness(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	fail := func(format string, a ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				raw := []byte(fmt.Sprintf(`{"protocol":"meup/v0.2","id":"c%d-%d","from":"bob","kind":"chat","payload":{"text":"x"}}`, i, j))
				if v := h.e.Receive(kBob, newCopy(), "lab", raw); !v.Deliver {
					fail("bob's chat c%d-%d: %+v", i, j, v)
				}
				if v := h.e.Receive(kCarol, newCopy(), "lab", raw); v.Refused == nil || v.Refused.Reason != meup.ReasonFromMismatch {
					fail("carol's copy of c%d-%d: %+v", i, j, v)
				}
				if _, err := h.e.Send(context.Background(), "lab", space.Draft{Kind: "chat", Payload: []byte(`{"text":"y"}`)}, space.SendOptions{}); err != nil {
					fail("send: %v", err)
				}
				if len(h.e.Spaces()) == 0 {
					fail("no spaces listed")
				}
				if _, err := h.e.Proposals("", ""); err != nil {
					fail("proposals: %v", err)
				}
				h.e.NoMEUP(kErin, "x")
			}
		})
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	// Every one of bob's 160 chats was remembered exactly once.
	if v := h.e.Receive(kBob, newCopy(), "lab", []byte(`{"protocol":"meup/v0.2","id":"c3-7","from":"bob","kind":"chat","payload":{"text":"x"}}`)); !v.Duplicate {
		t.Errorf("a repeat after the concurrent run: %+v", v)
	}
}

// TestNew: New refuses what it cannot run with.
func TestNew(t *testing.T) {
	st, snd := newFakeStore(), &fakeSender{t: t}
	bad := testRoster(t)
	bad.Spaces[1].Name = "LAB"
	tests := []struct {
		name   string
		st     space.Store
		snd    space.Sender
		roster *space.Roster
		o      space.Options
	}{
		{"no store", nil, snd, nil, space.Options{Self: kAlice}},
		{"no sender", st, nil, nil, space.Options{Self: kAlice}},
		{"no self", st, snd, nil, space.Options{}},
		{"read-only protocol", st, snd, nil, space.Options{Self: kAlice, Protocol: meup.ProtocolMCPx01}},
		{"unknown protocol", st, snd, nil, space.Options{Self: kAlice, Protocol: "meup/v9"}},
		{"invalid roster", st, snd, bad, space.Options{Self: kAlice}},
	}
	for _, tt := range tests {
		if _, err := space.New(tt.st, tt.snd, tt.roster, tt.o); err == nil {
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
	e, err := space.New(st, snd, nil, space.Options{Self: kAlice, Protocol: meup.ProtocolMEW04})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Spaces(); len(got) != 0 {
		t.Errorf("spaces of an empty roster: %+v", got)
	}
}

// TestResendOfAppliedEnvelope: the resend of a kick (its ack was lost)
// breaks the rules only because the kick was applied; it is taken as a
// duplicate, not refused and answered.
func TestResendOfAppliedEnvelope(t *testing.T) {
	h := newHarness(t)
	kick := &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"carol"}`}
	h.mustDeliver(kErin, "lab", kick)
	v := h.recv(kErin, "lab", kick)
	if !v.Duplicate || v.Refused != nil || v.Deliver {
		t.Fatalf("resent kick: %+v", v)
	}
	if len(h.snd.take()) != 0 || len(h.takeRefused()) != 0 {
		t.Error("the resend was answered or observed")
	}
	// A new kick of the same member is refused, and can be sent again
	// once it would apply (its id was not kept).
	again := &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"carol"}`}
	h.mustRefuse(kErin, "lab", again, meup.ReasonInvalidEnvelope)
	h.mustRefuse(kErin, "lab", again, meup.ReasonInvalidEnvelope)
}

// A member removed from the roster takes its grants (made and received)
// with it, and its pending proposals expire; added again, it starts
// without them. A space deleted and created again starts without the
// grants and pending proposals of before.
func TestRosterRemovalDropsGrantsAndProposals(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kErin, "lab", &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustDeliver(kBob, "lab", &env{ID: "g2", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/proposal"}]}`})
	h.mustDeliver(kErin, "lab", &env{ID: "g3", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustDeliver(kBob, "lab", &env{ID: "p1", From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/call"}`})
	h.mustDeliver(kErin, "lab", &env{ID: "p2", From: "erin", Kind: "mcp/proposal", Payload: `{"method":"tools/call"}`})

	without := testRoster(t)
	without.Spaces[0].Members = slices.DeleteFunc(without.Spaces[0].Members, func(m space.Member) bool { return m.ID == "bob" })
	if err := h.e.SetRoster(without); err != nil {
		t.Fatal(err)
	}
	if err := h.e.SetRoster(testRoster(t)); err != nil { // bob is back
		t.Fatal(err)
	}
	if ids := grantIDs(t, h); !slices.Equal(ids, []string{"g3"}) {
		t.Errorf("grants %v, want g3 only", ids)
	}
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	if p := proposal(h, "p1"); p.State != space.ProposalExpired {
		t.Errorf("bob's proposal is %s", p.State)
	}
	if p := proposal(h, "p2"); p.State != space.ProposalPending {
		t.Errorf("erin's proposal is %s", p.State)
	}

	noLab := testRoster(t)
	noLab.Spaces = noLab.Spaces[1:]
	if err := h.e.SetRoster(noLab); err != nil {
		t.Fatal(err)
	}
	if err := h.e.SetRoster(testRoster(t)); err != nil { // lab again
		t.Fatal(err)
	}
	if ids := grantIDs(t, h); len(ids) != 0 {
		t.Errorf("grants of the recreated space: %v", ids)
	}
	if gs, _ := h.st.Grants("lab"); len(gs) != 0 {
		t.Errorf("the store keeps %d grants of the deleted space", len(gs))
	}
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	if p := proposal(h, "p2"); p.State != space.ProposalExpired {
		t.Errorf("the proposal of the deleted space is %s", p.State)
	}
}
