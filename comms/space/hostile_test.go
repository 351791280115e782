package space_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
)

// Member names are read exactly: a payload member that is a field in
// other letter case is refused before any rule reads the payload, so a
// capability limited by a field's value cannot be passed on one spelling
// and applied on another.
func TestFieldInOtherCaseRefused(t *testing.T) {
	h := newHarness(t)
	// bob may kick dave only.
	h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"bob","capabilities":[{"kind":"space/kick","payload":{"participant_id":"dave"}}]}`)})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/kick", Payload: `{"participant_id":"carol"}`}, meup.ReasonCapability)
	for _, payload := range []string{
		`{"participant_id":"dave","Participant_ID":"carol"}`,
		`{"Participant_ID":"carol","participant_id":"dave"}`,
		`{"participant_id":"dave","PARTICIPANT_ID":"alice"}`,
	} {
		h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/kick", Payload: payload}, meup.ReasonInvalidEnvelope)
	}
	for _, id := range []string{"carol", "alice", "dave"} {
		if _, ok := h.member("lab", id); !ok {
			t.Errorf("%s was kicked", id)
		}
	}
	// erin may invite with the key of one peer only; U+212A KELVIN SIGN
	// folds to k.
	h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(fmt.Sprintf(`{"recipient":"carol","capabilities":[{"kind":"space/invite","payload":{"key":%q}}]}`, kFrank))})
	h.trust(kEve)
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"eve","key":%q,"\u212aey":%q}`, kFrank, kEve)}, meup.ReasonInvalidEnvelope)
	if _, ok := h.member("lab", "eve"); ok {
		t.Error("eve was invited")
	}
	// This node's own sends are held to the same rule.
	if _, err := h.e.Send(t.Context(), "lab", space.Draft{Kind: "space/kick", Payload: []byte(`{"participant_id":"dave","Participant_id":"bob"}`)}, space.SendOptions{}); err == nil {
		t.Error("a kick with participant_id in two spellings was sent")
	}
}

// What an invite gives is a roster entry, which outlasts grants: only the
// inviter's own roster entry may cover it. Rights held by a grant are
// passed on by a grant, and go when it does.
func TestInviteGivesOnlyRosterRights(t *testing.T) {
	h := newHarness(t)
	h.trust(kEve)
	h.trust(kFrank)
	s := h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"bob","capabilities":[{"kind":"space/invite"},{"kind":"mcp/request"}]}`)})
	if s.NotApplied != "" {
		t.Fatalf("grant not applied: %s", s.NotApplied)
	}
	v := h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"eve","key":%q,"capabilities":[{"kind":"mcp/request"}]}`, kEve)}, meup.ReasonGrantExceeds)
	if !strings.Contains(v.Refused.Detail, "roster entry") {
		t.Errorf("refusal detail %q does not say why", v.Refused.Detail)
	}
	// chat is in bob's roster entry: an invite may give it.
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"eve","key":%q,"capabilities":[{"kind":"chat"}]}`, kEve)})
	// An invite without capabilities, then a grant, is the way to pass on
	// what bob holds by a grant: it goes with bob's grant.
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank","key":%q}`, kFrank)})
	h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"bob","capabilities":[{"kind":"capability/grant"}]}`)})
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "capability/grant", Payload: `{"recipient":"frank","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustDeliver(kFrank, "lab", &env{From: "frank", Kind: "mcp/request", Payload: `{"method":"tools/call"}`})
	h.send("lab", space.Draft{Kind: "capability/revoke", Payload: []byte(fmt.Sprintf(`{"recipient":"bob","grant_id":%q}`, s.Envelope.ID))})
	h.mustRefuse(kFrank, "lab", &env{From: "frank", Kind: "mcp/request", Payload: `{"method":"tools/call"}`}, meup.ReasonCapability)
	h.mustDeliver(kEve, "lab", &env{From: "eve", Kind: "chat", Payload: `{"text":"hi"}`})
}

// A request fulfils the proposal it is correlated to only if it makes the
// proposed call: a member allowed another call only cannot close it.
func TestFulfilOnlyBySameCall(t *testing.T) {
	h := newHarness(t)
	h.trust(kFrank)
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank","key":%q,"capabilities":[{"kind":"mcp/request","payload":{"method":"tools/list"}}]}`, kFrank)})
	h.mustDeliver(kBob, "lab", &env{ID: "prop-1", From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"name":"deploy"}}`})
	h.mustRefuse(kFrank, "lab", &env{From: "frank", Kind: "mcp/reject", Corr: []string{"prop-1"}}, meup.ReasonCapability)
	h.mustDeliver(kFrank, "lab", &env{ID: "req-1", From: "frank", Kind: "mcp/request", Corr: []string{"prop-1"}, Payload: `{"method":"tools/list"}`})
	// The same method with other params is another call too, also when
	// they differ only past what a float64 holds.
	h.mustDeliver(kErin, "lab", &env{ID: "req-2", From: "erin", Kind: "mcp/request", Corr: []string{"prop-1"}, Payload: `{"method":"tools/call","params":{"name":"wipe"}}`})
	h.mustDeliver(kBob, "lab", &env{ID: "prop-big", From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"amount":100000000000000001}}`})
	h.mustDeliver(kErin, "lab", &env{ID: "req-big", From: "erin", Kind: "mcp/request", Corr: []string{"prop-big"}, Payload: `{"method":"tools/call","params":{"amount":100000000000000000}}`})
	state := func() space.Proposal {
		t.Helper()
		ps, err := h.e.Proposals("lab", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ID == "prop-1" {
				return p
			}
		}
		t.Fatal("prop-1 not listed")
		return space.Proposal{}
	}
	if p := state(); p.State != space.ProposalPending {
		t.Fatalf("after other calls: %s by %s (request %s), want pending", p.State, p.By, p.RequestID)
	}
	ps, _ := h.e.Proposals("lab", "")
	for _, p := range ps {
		if p.ID == "prop-big" && p.State != space.ProposalPending {
			t.Fatalf("prop-big: %s by %s, want pending (another amount)", p.State, p.By)
		}
	}
	// The proposed call, its members in another order and spacing.
	h.mustDeliver(kErin, "lab", &env{ID: "req-3", From: "erin", Kind: "mcp/request", Corr: []string{"prop-1"}, Payload: `{"params": {"name": "deploy"}, "method": "tools/call"}`})
	if p := state(); p.State != space.ProposalFulfilled || p.By != "erin" || p.RequestID != "req-3" {
		t.Fatalf("after the proposed call: %s by %s (request %s), want fulfilled by erin (req-3)", p.State, p.By, p.RequestID)
	}
}

// The response to a proposal's request is recorded only from a
// participant the request addressed: another member allowed to respond
// cannot put its answer in the place of the real one. A request that
// addressed nobody in particular takes the first member's response.
func TestProposalResponseOnlyFromAddressed(t *testing.T) {
	h := newHarness(t)
	proposal := func(id string) space.Proposal {
		t.Helper()
		ps, err := h.e.Proposals("lab", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ID == id {
				return p
			}
		}
		t.Fatalf("%s not listed", id)
		return space.Proposal{}
	}
	call := `{"method":"tools/call","params":{"name":"deploy"}}`
	h.mustDeliver(kBob, "lab", &env{ID: "prop-1", From: "bob", To: []string{"erin"}, Kind: "mcp/proposal", Payload: call})
	h.mustDeliver(kErin, "lab", &env{ID: "req-1", From: "erin", To: []string{"alice"}, Kind: "mcp/request", Corr: []string{"prop-1"}, Payload: call})
	if p := proposal("prop-1"); p.State != space.ProposalFulfilled || p.RequestID != "req-1" {
		t.Fatalf("prop-1: %+v, want fulfilled by req-1", p)
	}
	// bob may respond (his roster has mcp/response): delivered, not recorded.
	h.mustDeliver(kBob, "lab", &env{ID: "resp-bob", From: "bob", Kind: "mcp/response", Corr: []string{"req-1"}, Payload: `{"result":{"ok":false}}`})
	if p := proposal("prop-1"); p.ResponseID != "" {
		t.Fatalf("bob's response recorded for a request addressed to alice: %+v", p)
	}
	s := h.send("lab", space.Draft{Kind: "mcp/response", CorrelationID: []string{"req-1"}, Payload: []byte(`{"result":{"ok":true}}`)})
	if p := proposal("prop-1"); p.ResponseID != s.Envelope.ID {
		t.Fatalf("alice's response %s not recorded: %+v", s.Envelope.ID, p)
	}

	// Addressed to nobody in particular: the first response is recorded.
	h.mustDeliver(kBob, "lab", &env{ID: "prop-2", From: "bob", Kind: "mcp/proposal", Payload: call})
	h.mustDeliver(kErin, "lab", &env{ID: "req-2", From: "erin", Kind: "mcp/request", Corr: []string{"prop-2"}, Payload: call})
	h.mustDeliver(kBob, "lab", &env{ID: "resp-2", From: "bob", Kind: "mcp/response", Corr: []string{"req-2"}, Payload: `{"result":{}}`})
	if p := proposal("prop-2"); p.ResponseID != "resp-2" {
		t.Fatalf("prop-2: %+v, want resp-2 recorded", p)
	}
}

// A proposal let go of by the engine's memory (past MaxTrackedPerSpace)
// is still stored with its history: another member cannot take its id
// over with a new proposal.
func TestForgottenProposalIDNotReused(t *testing.T) {
	h := newHarness(t)
	rounds := space.MaxTrackedPerSpace/space.MaxPendingPerPeer + 1
	for r := range rounds {
		for i := range space.MaxPendingPerPeer {
			h.mustDeliver(kBob, "lab", &env{ID: fmt.Sprintf("p-%d-%d", r, i), From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/list"}`})
		}
		h.clock.Add(2 * space.DefaultProposalTTL) // they expire, and may be let go
	}
	v := h.mustRefuse(kErin, "lab", &env{ID: "p-0-0", From: "erin", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"name":"deploy"}}`}, meup.ReasonInvalidEnvelope)
	if !strings.Contains(v.Refused.Detail, "in use") {
		t.Fatalf("refusal %q", v.Refused.Detail)
	}
	h.mustDeliver(kErin, "lab", &env{ID: "p-new", From: "erin", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"name":"deploy"}}`})
}
