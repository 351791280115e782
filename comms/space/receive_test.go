package space_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// TestReceiveRefusals sends one envelope per refusal reason and checks
// the verdict, the observation, and the system/error answer: exactly
// one, to the sender only, correlated to the refused id — or none when
// the rules say so.
func TestReceiveRefusals(t *testing.T) {
	tests := []struct {
		name    string
		from    identity.PeerID
		space   string
		raw     string // used instead of e when set
		e       env
		reason  string
		answer  string // participant the system/error goes to; "" none
		answerK identity.PeerID
		detail  string // what the refusal's detail must hold; "" anything
	}{
		{name: "malformed chat", from: kBob, space: "lab",
			raw:    `{"protocol":"meup/v0.2","id":"m1","from":"bob","kind":"chat"}`,
			reason: meup.ReasonInvalidEnvelope, answer: "bob", answerK: kBob},
		{name: "not JSON", from: kBob, space: "lab", raw: `{"protocol":`,
			reason: meup.ReasonInvalidEnvelope},
		{name: "malformed system kind", from: kBob, space: "lab",
			raw:    `{"protocol":"meup/v0.2","id":"m2","from":"bob","kind":"system/presence"}`,
			reason: meup.ReasonInvalidEnvelope},
		{name: "dotted system kind that does not parse", from: kBob, space: "lab",
			raw:    `{"protocol":"meup/v0.1","id":"m3","from":"bob","kind":"system.error","extra":1}`,
			reason: meup.ReasonInvalidEnvelope},
		{name: "unsupported protocol", from: kBob, space: "lab",
			raw:    `{"protocol":"meup/v9","id":"m4","from":"bob","kind":"chat","payload":{"text":"hi"}}`,
			reason: meup.ReasonUnsupportedProtocol, answer: "bob", answerK: kBob},
		{name: "unknown space", from: kBob, space: "nope",
			e:      env{From: "bob", Kind: "chat", Payload: `{"text":"hi"}`},
			reason: meup.ReasonUnknownSpace},
		{name: "space without this node", from: kBob, space: "other",
			e:      env{From: "bob", Kind: "chat", Payload: `{"text":"hi"}`},
			reason: meup.ReasonUnknownSpace},
		{name: "key in no roster", from: kEve, space: "lab",
			e:      env{From: "eve", Kind: "chat", Payload: `{"text":"hi"}`},
			reason: meup.ReasonNotAMember, answer: "eve", answerK: kEve},
		{name: "pending member", from: kDave, space: "lab",
			e:      env{From: "dave", Kind: "chat", Payload: `{"text":"hi"}`},
			reason: meup.ReasonNotAMember},
		{name: "from another participant", from: kBob, space: "lab",
			e:      env{From: "carol", Kind: "chat", Payload: `{"text":"hi"}`},
			reason: meup.ReasonFromMismatch, answer: "bob", answerK: kBob},
		{name: "unknown system kind", from: kBob, space: "lab",
			e:      env{From: "bob", Kind: "system/shutdown", Payload: `{}`},
			reason: meup.ReasonReservedKind},
		{name: "presence for someone else", from: kBob, space: "lab",
			e:      env{From: "bob", Kind: "system/presence", Payload: `{"event":"join","participant":{"id":"carol"}}`},
			reason: meup.ReasonReservedKind},
		{name: "no capability", from: kCarol, space: "lab",
			e:      env{From: "carol", Kind: "mcp/request", Payload: `{"method":"tools/call"}`},
			reason: meup.ReasonCapability, answer: "carol", answerK: kCarol,
			detail: `no capability "carol" holds in space "lab" matches this mcp/request envelope (its kind and payload)`},
		{name: "reject of an unknown proposal", from: kCarol, space: "lab",
			e:      env{From: "carol", Kind: "mcp/reject", Corr: []string{"nope"}},
			reason: meup.ReasonUnknownProposal, answer: "carol", answerK: kCarol},
		{name: "withdraw of an unknown proposal", from: kBob, space: "lab",
			e:      env{From: "bob", Kind: "mcp/withdraw", Corr: []string{"nope"}},
			reason: meup.ReasonUnknownProposal, answer: "bob", answerK: kBob},
		{name: "grant beyond the granter's", from: kBob, space: "lab",
			e:      env{From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`},
			reason: meup.ReasonGrantExceeds, answer: "bob", answerK: kBob},
		{name: "grant to a non-member", from: kBob, space: "lab",
			e:      env{From: "bob", Kind: "capability/grant", Payload: `{"recipient":"zed","capabilities":[{"kind":"chat"}]}`},
			reason: meup.ReasonInvalidEnvelope, answer: "bob", answerK: kBob},
		{name: "kick of a non-member", from: kErin, space: "lab",
			e:      env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"zed"}`},
			reason: meup.ReasonInvalidEnvelope, answer: "erin", answerK: kErin},
		{name: "revoke of an unknown grant", from: kErin, space: "lab",
			e:      env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"carol","grant_id":"g0"}`},
			reason: meup.ReasonInvalidEnvelope, answer: "erin", answerK: kErin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			var data []byte
			if tt.raw != "" {
				data = []byte(tt.raw)
			} else {
				data = h.raw(&tt.e)
			}
			v := h.e.Receive(tt.from, newCopy(), tt.space, data)
			if v.Deliver || v.Refused == nil || v.Refused.Reason != tt.reason {
				t.Fatalf("verdict %+v, want refused %s", v, tt.reason)
			}
			if tt.detail != "" && v.Refused.Detail != tt.detail {
				t.Errorf("detail %q, want %q", v.Refused.Detail, tt.detail)
			}
			if v.Refused.From != tt.from || v.Refused.Space != tt.space {
				t.Errorf("refusal names %v in %q", v.Refused.From, v.Refused.Space)
			}
			obs := h.takeRefused()
			if len(obs) != 1 || obs[0] != *v.Refused {
				t.Errorf("observed %+v, want exactly the refusal", obs)
			}
			sent := h.snd.take()
			if tt.answer == "" {
				if len(sent) != 0 {
					t.Fatalf("answered with %+v, want no answer", sent)
				}
				return
			}
			if len(sent) != 1 {
				t.Fatalf("%d answers, want 1: %+v", len(sent), sent)
			}
			c := sent[0]
			if c.To != tt.answerK || c.Space != tt.space || c.Env.Kind != meup.KindSystemError {
				t.Errorf("answer %s to %v in %q", c.Env.Kind, c.To, c.Space)
			}
			if !slices.Equal(c.Env.To, []string{tt.answer}) || c.Env.From != "alice" {
				t.Errorf("answer from %q to %v", c.Env.From, c.Env.To)
			}
			if want := []string{v.Refused.MEUPID}; !slices.Equal(c.Env.CorrelationID, want) {
				t.Errorf("correlation_id %v, want %v", c.Env.CorrelationID, want)
			}
			if c.Opts != (space.SendOptions{Reliable: true, NoWait: true, TTL: 10 * time.Minute}) {
				t.Errorf("answer sent with %+v", c.Opts)
			}
			p := decode[errorPayload](t, c.Env.Payload)
			if p.Error != tt.reason || p.Message == "" || p.AttemptedKind != v.Refused.Kind || p.YourCapabilities == nil {
				t.Errorf("error payload %+v", p)
			}
		})
	}
}

// TestErrorAnswerCarriesEnforcedCapabilities: your_capabilities is what
// this node holds for the sender, grants included.
func TestErrorAnswerCarriesEnforcedCapabilities(t *testing.T) {
	h := newHarness(t)
	h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"carol","capabilities":[{"kind":"reasoning/start"}]}`)})
	h.snd.take()
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	sent := h.snd.take()
	if len(sent) != 1 {
		t.Fatalf("%d answers", len(sent))
	}
	p := decode[errorPayload](t, sent[0].Env.Payload)
	got := kinds(p.YourCapabilities)
	want := []string{`"reasoning/start"`, `["chat","mcp/withdraw","mcp/reject"]`}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("your_capabilities kinds %v, want %v", got, want)
	}
}

// TestErrorAnswersRateLimited: five answers at once, then one per ten
// seconds; the refusals beyond are still observed and counted.
func TestErrorAnswersRateLimited(t *testing.T) {
	h := newHarness(t)
	bad := func() {
		t.Helper()
		h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	}
	answers := func() int { return len(h.snd.take()) }
	for range 7 {
		bad()
	}
	if n := answers(); n != 5 {
		t.Fatalf("%d answers to 7 refusals at once, want 5", n)
	}
	if n := len(h.takeRefused()); n != 7 {
		t.Errorf("%d refusals observed, want 7", n)
	}
	h.clock.Add(9 * time.Second)
	bad()
	if n := answers(); n != 0 {
		t.Errorf("%d answers after 9 s, want 0", n)
	}
	h.clock.Add(time.Second)
	bad()
	bad()
	if n := answers(); n != 1 {
		t.Errorf("%d answers after 10 s, want 1", n)
	}
	h.clock.Add(time.Hour)
	for range 8 {
		bad()
	}
	if n := answers(); n != 5 {
		t.Errorf("%d answers after an hour, want 5 (the burst)", n)
	}
	// Another sender has a bucket of its own.
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	if n := answers(); n != 1 {
		t.Errorf("%d answers to bob, want 1", n)
	}
	m, _ := h.member("lab", "carol")
	if m.Refused != 18 {
		t.Errorf("carol's refusals %d, want 18", m.Refused)
	}
}

// TestSystemKinds: members may send presence, welcome and error; they
// skip the capability check (carol holds none of them), never grant, and
// only error is delivered. No refused system envelope is answered.
func TestSystemKinds(t *testing.T) {
	h := newHarness(t)
	v := h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "system/error", Corr: []string{"x"}, Payload: `{"error":"capability_violation","message":"no"}`})
	if v.Participant != "carol" {
		t.Errorf("participant %q", v.Participant)
	}
	v = h.recv(kCarol, "lab", &env{From: "carol", Kind: "system/welcome", Payload: `{"you":{"id":"alice","capabilities":[{"kind":"*"}]},"participants":[]}`})
	if v.Deliver || v.Refused != nil {
		t.Errorf("welcome: %+v, want taken and not delivered", v)
	}
	if m, _ := h.member("lab", "carol"); m.Presence != space.PresenceOnline {
		t.Errorf("carol is %s after her welcome", m.Presence)
	}
	if len(h.snd.take()) != 0 {
		t.Error("system envelopes were answered")
	}
	// A presence carrying capabilities grants nothing.
	h.recv(kCarol, "lab", &env{From: "carol", Kind: "system/presence", Payload: `{"event":"join","participant":{"id":"carol","capabilities":[{"kind":"*"}]}}`})
	h.snd.take()
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	// system/error without its error field is refused, unanswered.
	h.snd.take()
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "system/welcome", Payload: `{"you":{"id":"alice"},"extra":{"you":1}, "participants": 5}`}, meup.ReasonReservedKind)
	if len(h.snd.take()) != 0 {
		t.Error("a refused system envelope was answered")
	}
}

// TestPresence: a join makes the member online and is answered with a
// welcome saying what this node enforces; a leave makes it offline.
func TestPresence(t *testing.T) {
	h := newHarness(t)
	if m, _ := h.member("lab", "bob"); m.Presence != space.PresenceUnknown || m.LastSeen != nil {
		t.Fatalf("bob before any envelope: %+v", m)
	}
	join := &env{From: "bob", Kind: "system/presence", Payload: `{"event":"join","participant":{"id":"bob","capabilities":[]}}`}
	v := h.recv(kBob, "lab", join)
	if v.Deliver || v.Refused != nil || v.Err != nil {
		t.Fatalf("join: %+v", v)
	}
	m, _ := h.member("lab", "bob")
	if m.Presence != space.PresenceOnline || m.LastSeen == nil || !m.LastSeen.Equal(h.clock.Now()) {
		t.Errorf("bob after join: %+v", m)
	}
	sent := h.snd.take()
	if len(sent) != 1 || sent[0].To != kBob || sent[0].Env.Kind != meup.KindSystemWelcome {
		t.Fatalf("answer to join: %+v", sent)
	}
	w := sent[0].Env
	if !slices.Equal(w.To, []string{"bob"}) || !slices.Equal(w.CorrelationID, []string{join.ID}) {
		t.Errorf("welcome to %v, correlated %v", w.To, w.CorrelationID)
	}
	type pi struct {
		ID           string            `json:"id"`
		Capabilities []meup.Capability `json:"capabilities"`
	}
	p := decode[struct {
		You          pi   `json:"you"`
		Participants []pi `json:"participants"`
	}](t, w.Payload)
	if p.You.ID != "bob" || len(p.You.Capabilities) != 1 {
		t.Errorf("welcome's you: %+v", p.You)
	}
	var ids []string
	for _, x := range p.Participants {
		ids = append(ids, x.ID)
	}
	if !slices.Equal(ids, []string{"alice", "bob", "carol", "erin"}) {
		t.Errorf("welcome lists %v (dave is pending and must not be listed)", ids)
	}
	// The same join again is a duplicate: no second welcome.
	if v := h.e.Receive(kBob, newCopy(), "lab", h.raw(join)); !v.Duplicate || len(h.snd.take()) != 0 {
		t.Errorf("repeated join: %+v", v)
	}
	h.clock.Add(time.Minute)
	h.recv(kBob, "lab", &env{From: "bob", Kind: "system/presence", Payload: `{"event":"leave","participant":{"id":"bob"}}`})
	if m, _ := h.member("lab", "bob"); m.Presence != space.PresenceOffline || !m.LastSeen.Equal(h.clock.Now()) {
		t.Errorf("bob after leave: %+v", m)
	}
	if len(h.snd.take()) != 0 {
		t.Error("a leave was answered")
	}
}

// TestGrantAndRevoke: a grant lets the grantee do more at once; a revoke
// stops it at the next envelope; both persist.
func TestGrantAndRevoke(t *testing.T) {
	h := newHarness(t)
	req := func() *env { return &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"tools/call"}`} }
	h.mustRefuse(kCarol, "lab", req(), meup.ReasonCapability)

	// A grant from erin (who holds everything), received.
	g := &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"},{"kind":"reasoning/start"}]}`}
	h.mustDeliver(kErin, "lab", g)
	h.mustDeliver(kCarol, "lab", req())
	gs, _ := h.e.Grants("lab")
	if len(gs) != 1 || gs[0].ID != g.ID || gs[0].Granter != kErin || gs[0].Grantee != kCarol || len(gs[0].Capabilities) != 2 {
		t.Fatalf("grants %+v", gs)
	}
	if m, _ := h.member("lab", "carol"); len(m.Granted) != 2 {
		t.Errorf("carol's granted: %+v", m.Granted)
	}

	// Revoke one capability by pattern (written differently: spacing).
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"carol","capabilities":[{ "kind" : "mcp/request" }]}`})
	h.mustRefuse(kCarol, "lab", req(), meup.ReasonCapability)
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "reasoning/start", Payload: `{"message":"hm"}`})
	gs, _ = h.e.Grants("lab")
	if len(gs) != 1 || len(gs[0].Capabilities) != 1 {
		t.Fatalf("after revoking one capability: %+v", gs)
	}

	// Revoke the rest by grant id: the grant is gone.
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"carol","grant_id":"` + g.ID + `"}`})
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "reasoning/start", Payload: `{"message":"hm"}`}, meup.ReasonCapability)
	if gs, _ := h.e.Grants("lab"); len(gs) != 0 {
		t.Fatalf("after revoking by id: %+v", gs)
	}

	// A grant this node sends is enforced here too, and so is its revoke.
	s := h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`)})
	if s.NotApplied != "" {
		t.Fatalf("own grant not applied: %s", s.NotApplied)
	}
	h.mustDeliver(kCarol, "lab", req())
	h.send("lab", space.Draft{Kind: "capability/revoke", Payload: []byte(`{"recipient":"carol","grant_id":"` + s.Envelope.ID + `"}`)})
	h.mustRefuse(kCarol, "lab", req(), meup.ReasonCapability)

	// Bob may grant only what he holds.
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"*"}]}`}, meup.ReasonGrantExceeds)
}

// TestGrantsSurviveRestart: a new engine over the same store enforces the
// grants the old one accepted.
func TestGrantsSurviveRestart(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`})
	e2, err := space.New(h.st, h.snd, testRoster(t), space.Options{Self: kAlice, Trusted: h.isTrusted, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	raw := h.raw(&env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`})
	if v := e2.Receive(kCarol, newCopy(), "lab", raw); !v.Deliver {
		t.Fatalf("granted request after restart: %+v", v)
	}
}

// TestGrantAck: a grant to this node is answered with capability/grant-ack.
func TestGrantAck(t *testing.T) {
	h := newHarness(t)
	g := &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"alice","capabilities":[{"kind":"chat"}]}`}
	h.mustDeliver(kErin, "lab", g)
	sent := h.snd.take()
	if len(sent) != 1 || sent[0].To != kErin || sent[0].Env.Kind != meup.KindCapabilityGrantAck {
		t.Fatalf("answers %+v", sent)
	}
	if !slices.Equal(sent[0].Env.CorrelationID, []string{g.ID}) || !slices.Equal(sent[0].Env.To, []string{"erin"}) {
		t.Errorf("grant-ack correlated %v to %v", sent[0].Env.CorrelationID, sent[0].Env.To)
	}
	// A grant to someone else is not acked by this node.
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[{"kind":"chat"}]}`})
	if n := len(h.snd.take()); n != 0 {
		t.Errorf("%d answers to a grant to bob", n)
	}
}

// The grant-ack a grantee's node sends for a grant this node made needs
// no capability of its own; any other grant-ack does.
func TestAckOfOwnGrantAccepted(t *testing.T) {
	h := newHarness(t)
	sent := h.send("lab", space.Draft{Kind: meup.KindCapabilityGrant, To: []string{"carol"}, Payload: json.RawMessage(`{"recipient":"carol","capabilities":[{"kind":"chat"}]}`)})
	h.snd.take()
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{sent.Envelope.ID}, Payload: `{"status":"accepted"}`})
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{sent.Envelope.ID}, Payload: fmt.Sprintf(`{"grant_id":%q,"status":"accepted"}`, sent.Envelope.ID)})
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{sent.Envelope.ID}})
	// As a gateway answers: the granted capabilities echoed.
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{sent.Envelope.ID}, Payload: `{"status":"accepted","capabilities":[{"kind": "chat"}]}`})
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{"no-such-grant"}, Payload: `{"status":"accepted"}`}, meup.ReasonCapability)
	// Only an answer: anything else in it needs the capability (carol's
	// roster has no grant-ack), or it would carry what it likes to the
	// inbox past every capability.
	for _, payload := range []string{
		`{"status":"accepted","text":"anything at all"}`,
		`{"status":{"nested":"object"}}`,
		`{"status":"` + strings.Repeat("x", 257) + `"}`,
		`{"Status":"accepted"}`,
		`{"status":"accepted","capabilities":[{"kind":"chat","payload":{"text":"anything at all"}}]}`,
		`{"status":"accepted","capabilities":[{"kind":"chat"},{"kind":"chat"}]}`,
	} {
		h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{sent.Envelope.ID}, Payload: payload}, meup.ReasonCapability)
	}
	// Bob's grant to carol is not this node's: carol's ack of it is not
	// let through on its account.
	g := &env{From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`}
	h.mustDeliver(kBob, "lab", g)
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{g.ID}, Payload: `{"status":"accepted"}`}, meup.ReasonCapability)
}

// A grantee's node that was away gets a grant and its revoke together,
// and answers the grant when it applies it: that answer, come after the
// revoke (or a cut that left the grant with less), is no violation. Only
// for grants this node made to that member.
func TestAckOfRevokedGrantAccepted(t *testing.T) {
	h := newHarness(t)
	grant := func(caps string) string {
		s := h.send("lab", space.Draft{Kind: meup.KindCapabilityGrant, To: []string{"carol"}, Payload: json.RawMessage(`{"recipient":"carol","capabilities":` + caps + `}`)})
		h.snd.take()
		return s.Envelope.ID
	}
	whole := grant(`[{"kind":"chat"}]`)
	cut := grant(`[{"kind":"chat"},{"kind":"mcp/proposal"}]`)
	h.send("lab", space.Draft{Kind: "capability/revoke", Payload: []byte(`{"recipient":"carol","grant_id":"` + whole + `"}`)})
	h.send("lab", space.Draft{Kind: "capability/revoke", Payload: []byte(`{"recipient":"carol","capabilities":[{"kind":"mcp/proposal"}]}`)})
	h.snd.take()
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{whole}, Payload: `{"status":"accepted"}`})
	h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{cut}, Payload: `{"status":"accepted","capabilities":[{"kind":"chat"},{"kind":"mcp/proposal"}]}`})
	// Still only an answer, and only from the grantee.
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: meup.KindCapabilityGrantAck, Corr: []string{whole}, Payload: `{"status":"accepted","text":"anything"}`}, meup.ReasonCapability)
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: meup.KindCapabilityGrantAck, Corr: []string{whole}, Payload: `{"status":"accepted"}`}, meup.ReasonCapability)
}

// TestDedup: a repeated MEUP id from the same sender is neither delivered
// nor answered; after Undo it is delivered again. Another sender may use
// the same id.
func TestDedup(t *testing.T) {
	h := newHarness(t)
	e := &env{ID: "same", From: "bob", Kind: "chat", Payload: `{"text":"hi"}`}
	h.mustDeliver(kBob, "lab", e)
	v := h.recv(kBob, "lab", e)
	if v.Deliver || !v.Duplicate || v.Refused != nil {
		t.Fatalf("repeat: %+v", v)
	}
	if len(h.snd.take()) != 0 || len(h.takeRefused()) != 0 {
		t.Error("a duplicate was answered or observed as a refusal")
	}
	h.e.Undo("lab", kBob, "same", h.raw(e))
	h.mustDeliver(kBob, "lab", e)
	h.mustDeliver(kCarol, "lab", &env{ID: "same", From: "carol", Kind: "chat", Payload: `{"text":"hi"}`})
}

// The same Meerkat copy delivered again (its admission, or its ack, was
// lost) is delivered again, so the inbox can store what it lost, but not
// applied again: a proposal fulfilled meanwhile stays fulfilled.
func TestSameCopyRedeliveredNotReapplied(t *testing.T) {
	h := newHarness(t)
	prop := &env{ID: "p1", From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/call"}`}
	raw := h.raw(prop)
	if v := h.e.Receive(kBob, "copy-1", "lab", raw); !v.Deliver {
		t.Fatalf("first delivery: %+v", v)
	}
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "mcp/request", Corr: []string{"p1"}, Payload: `{"method":"tools/call"}`})
	v := h.e.Receive(kBob, "copy-1", "lab", raw)
	if !v.Deliver || v.Duplicate || v.Refused != nil || v.Err != nil {
		t.Fatalf("the same copy again: %+v", v)
	}
	ps, err := h.e.Proposals("lab", "")
	if err != nil || len(ps) != 1 || ps[0].State != space.ProposalFulfilled {
		t.Fatalf("proposals %+v, %v: the redelivery must not reopen the proposal", ps, err)
	}
	if v := h.e.Receive(kBob, "copy-2", "lab", raw); v.Deliver || !v.Duplicate {
		t.Fatalf("another copy of the same MEUP id: %+v", v)
	}
}

// TestStoreFailure: when the store cannot remember an id, the verdict
// carries the error and nothing is delivered or answered.
func TestStoreFailure(t *testing.T) {
	h := newHarness(t)
	h.st.failRemember = errors.New("disk on fire")
	v := h.recv(kBob, "lab", &env{From: "bob", Kind: "chat", Payload: `{"text":"hi"}`})
	if v.Deliver || v.Err == nil || v.Refused != nil || !strings.Contains(v.Err.Error(), "disk on fire") {
		t.Fatalf("verdict %+v", v)
	}
	if len(h.snd.take()) != 0 {
		t.Error("answered")
	}
}

// TestReceiveReleasesLockBeforeSending: the Sender may call the engine
// (a node's send path may look at spaces); Receive must not hold its lock.
func TestReceiveReleasesLockBeforeSending(t *testing.T) {
	h := newHarness(t)
	h.snd.hook = func(identity.PeerID) error {
		_ = h.e.Spaces()
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Receive deadlocked calling the Sender")
	}
}

// TestSenderFailureDoesNotChangeVerdict: an answer that cannot be sent
// is logged; the refusal stands.
func TestSenderFailureDoesNotChangeVerdict(t *testing.T) {
	h := newHarness(t)
	h.snd.hook = func(identity.PeerID) error { return errors.New("outbox full") }
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
}

// An id already used by a tracked proposal or a live grant cannot be
// taken by another envelope: a proposal reviewed as one call cannot be
// swapped for another, a grant cannot be overwritten.
func TestIDsCannotBeTakenOver(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kBob, "lab", &env{ID: "p1", From: "bob", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"name":"read_file"}}`})
	h.mustRefuse(kErin, "lab", &env{ID: "p1", From: "erin", Kind: "mcp/proposal", Payload: `{"method":"tools/call","params":{"name":"rm_rf"}}`}, meup.ReasonInvalidEnvelope)
	ps, err := h.e.Proposals("lab", "")
	if err != nil || len(ps) != 1 || ps[0].Proposer != "bob" || !strings.Contains(string(ps[0].Payload), "read_file") {
		t.Fatalf("proposals %+v, %v", ps, err)
	}
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "mcp/withdraw", Corr: []string{"p1"}})

	h.mustDeliver(kErin, "lab", &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustRefuse(kBob, "lab", &env{ID: "g1", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[{"kind":"chat"}]}`}, meup.ReasonInvalidEnvelope)
	gs, err := h.e.Grants("lab")
	if err != nil || len(gs) != 1 || gs[0].Grantee != kCarol || gs[0].Granter != kErin {
		t.Fatalf("grants %+v, %v", gs, err)
	}
}

// One granter may hold at most MaxGrantsPerGranter live grants in a
// space, so a low-privilege member cannot fill the space's grant slots.
func TestGrantsPerGranterBounded(t *testing.T) {
	h := newHarness(t)
	grant := func(i int) *env {
		return &env{ID: fmt.Sprint("g", i), From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`}
	}
	for i := range space.MaxGrantsPerGranter {
		h.mustDeliver(kBob, "lab", grant(i))
	}
	h.mustRefuse(kBob, "lab", grant(space.MaxGrantsPerGranter), meup.ReasonRateLimited)
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`})
}

// Expired proposals do not hold memory: beyond the bounds they are
// forgotten like closed ones, and the payload bytes of live pending
// proposals are bounded per space.
func TestProposalMemoryBounded(t *testing.T) {
	h := newHarness(t)
	big := `{"method":"tools/call","params":{"blob":"` + strings.Repeat("x", 200<<10) + `"}}`
	// More proposers than the space's budget has shares for: each is held
	// to its share, and the space to its budget.
	const proposers = space.MaxProposalBytes/space.MaxProposalBytesPerPeer + 2
	var keys [proposers]identity.PeerID
	for i := range proposers {
		keys[i] = key(byte(40 + i))
		h.trust(keys[i])
		h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"p%d","key":%q,"capabilities":[{"kind":"mcp/proposal"}]}`, i, keys[i])})
	}
	for round := range 2 {
		var byPeer, bySpace int // refusals for a proposer's share, for the space's budget
		for i := range proposers {
			for n := 0; ; n++ {
				v := h.recv(keys[i], "lab", &env{ID: fmt.Sprint("r", round, "-", i, "-", n), From: fmt.Sprint("p", i), Kind: "mcp/proposal", Payload: big})
				if v.Refused == nil {
					if (n+1)*len(big) > space.MaxProposalBytesPerPeer {
						t.Fatalf("round %d: p%d holds %d pending bytes, over its share %d", round, i, (n+1)*len(big), space.MaxProposalBytesPerPeer)
					}
					continue
				}
				if v.Refused.Reason != meup.ReasonRateLimited {
					t.Fatalf("round %d: p%d refused %+v, want %s", round, i, v.Refused, meup.ReasonRateLimited)
				}
				switch {
				case strings.Contains(v.Refused.Detail, "one proposer's"):
					byPeer++
				case strings.Contains(v.Refused.Detail, "the most they may"):
					bySpace++
				default:
					t.Fatalf("refusal detail %q", v.Refused.Detail)
				}
				break
			}
		}
		if byPeer == 0 || bySpace == 0 {
			t.Fatalf("round %d: %d refusals for a proposer's share, %d for the space's budget; want both", round, byPeer, bySpace)
		}
		h.clock.Add(2 * space.DefaultProposalTTL) // they all expire
	}
	if got := h.e.TrackedBytes("lab"); got > space.MaxProposalBytes+(300<<10) {
		t.Fatalf("proposals hold %d bytes, over the bound %d", got, space.MaxProposalBytes)
	}
}

// Envelopes to spaces this node is not in are not answered and use no
// rate limiter: a peer naming thousands of made-up spaces does not stop
// the answer to a real refusal.
func TestMadeUpSpacesUseNoLimiter(t *testing.T) {
	h := newHarness(t)
	for i := range 5000 {
		v := h.recv(kBob, fmt.Sprint("made-up-", i), &env{From: "bob", Kind: "chat", Payload: `{"text":"x"}`})
		if v.Refused == nil || v.Refused.Reason != meup.ReasonUnknownSpace {
			t.Fatalf("space %d: %+v", i, v)
		}
	}
	if n := len(h.snd.take()); n != 0 {
		t.Fatalf("%d answers to envelopes of unknown spaces", n)
	}
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/request", Payload: `{"method":"tools/call"}`}, meup.ReasonCapability)
	if sent := h.snd.take(); len(sent) != 1 || sent[0].Env.Kind != meup.KindSystemError {
		t.Fatalf("the real refusal was answered with %+v", sent)
	}
}

// A member may revoke the grants it made, or grants it could have made:
// holding capability/revoke alone does not undo the grants of others.
func TestRevokeAuthority(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kErin, "lab", &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustDeliver(kErin, "lab", &env{ID: "g2", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[{"kind":"capability/revoke"}]}`})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "capability/revoke", Payload: `{"recipient":"carol","grant_id":"g1"}`}, meup.ReasonGrantExceeds)
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "capability/revoke", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`}, meup.ReasonGrantExceeds)
	h.mustDeliver(kBob, "lab", &env{ID: "g3", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`})
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "capability/revoke", Payload: `{"recipient":"carol","grant_id":"g3"}`})
	// By capabilities too: erin's grant to carol, which bob could not
	// revoke, is not touched, so it does not stand in the way.
	h.mustDeliver(kBob, "lab", &env{ID: "g4", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`})
	h.mustDeliver(kBob, "lab", &env{From: "bob", Kind: "capability/revoke", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`})
	gs, err := h.e.Grants("lab")
	if err != nil || len(gs) != 2 || gs[0].ID != "g1" || gs[1].ID != "g2" {
		t.Fatalf("grants %+v, %v: want g1 and g2 left", gs, err)
	}
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"carol","grant_id":"g1"}`})
}

// An envelope that does not parse is answered only when its kind is
// plainly known and not system/*: a second spelling of "kind" makes it
// unknown.
func TestUnparsedKindSpellings(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		raw     string
		answers int
	}{
		{`{"id":"u1","from":"bob","kind":"chat"}`, 1}, // no protocol: refused, answered
		{`{"id":"u2","from":"bob","Kind":"chat","kind":"system/error"}`, 0},
		{`{"id":"u3","from":"bob","kind":"system/error","KIND":"chat"}`, 0},
		{`{"id":"u4","from":"bob","kind":"system/presence"}`, 0},
	} {
		v := h.e.Receive(kBob, newCopy(), "lab", []byte(tc.raw))
		if v.Refused == nil || v.Refused.Reason != meup.ReasonUnsupportedProtocol && v.Refused.Reason != meup.ReasonInvalidEnvelope {
			t.Fatalf("%s: %+v", tc.raw, v)
		}
		if n := len(h.snd.take()); n != tc.answers {
			t.Errorf("%s: %d answers, want %d", tc.raw, n, tc.answers)
		}
	}
}

// largeGrants has erin grant carol n grants of 30 capabilities of about
// 7 KiB each: far more than one system/error payload may carry.
func largeGrants(h *harness, n int) {
	h.t.Helper()
	largeGrantsTo(h, "carol", "big-", n)
}

// largeGrantsTo is largeGrants to recipient, with grant ids prefix0,
// prefix1, …
func largeGrantsTo(h *harness, recipient, prefix string, n int) {
	h.t.Helper()
	var caps []string
	for i := range 30 {
		var fields []string
		for j := range 14 {
			fields = append(fields, fmt.Sprintf(`"b%d":"%s"`, j, strings.Repeat("b", 500)))
		}
		caps = append(caps, fmt.Sprintf(`{"kind":"x/%d","payload":{%s}}`, i, strings.Join(fields, ",")))
	}
	for i := range n {
		h.mustDeliver(kErin, "lab", &env{ID: fmt.Sprint(prefix, i), From: "erin", Kind: "capability/grant", Payload: `{"recipient":"` + recipient + `","capabilities":[` + strings.Join(caps, ",") + `]}`})
	}
	h.snd.take()
}

// The answer to a refusal of a member holding many large grants carries
// as many of its capabilities as fit (roster first), says that it was
// cut, and is sent: a payload with all of them would be too large to be.
func TestErrorAnswerCapabilitiesBounded(t *testing.T) {
	h := newHarness(t)
	largeGrants(h, 4)
	h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	sent := h.snd.take()
	if len(sent) != 1 || sent[0].Env.Kind != meup.KindSystemError {
		t.Fatalf("answers %+v, want one system/error", sent)
	}
	var p struct {
		errorPayload
		Truncated bool `json:"capabilities_truncated"`
	}
	if err := json.Unmarshal(sent[0].Env.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if !p.Truncated || len(p.YourCapabilities) < 2 || len(p.YourCapabilities) >= 4*30 {
		t.Fatalf("truncated %v with %d capabilities", p.Truncated, len(p.YourCapabilities))
	}
	if string(p.YourCapabilities[0].Kind) != `["chat","mcp/withdraw","mcp/reject"]` || p.YourCapabilities[1].ID != "big-0" {
		t.Errorf("first capabilities %s, %+v: want the roster's, then the oldest grant's", p.YourCapabilities[0].Kind, p.YourCapabilities[1])
	}
	if n := len(sent[0].Env.Payload); n > 80<<10 {
		t.Errorf("the answer's payload is %d bytes", n)
	}
	// A member with few capabilities gets them all, without the mark.
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	sent = h.snd.take()
	if len(sent) != 1 || strings.Contains(string(sent[0].Env.Payload), "capabilities_truncated") {
		t.Fatalf("answer to bob: %+v", sent)
	}
}

// A refusal that is not answered (the rate limit is spent) does not copy
// what the sender holds: with many large grants that would cost
// megabytes per refused envelope.
func TestUnansweredRefusalCopiesNothing(t *testing.T) {
	h := newHarness(t)
	largeGrants(h, 4)
	for range 5 { // the burst
		h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
	}
	if n := len(h.snd.take()); n != 5 {
		t.Fatalf("%d answers to the burst", n)
	}
	raw := h.raw(&env{ID: "limited", From: "carol", Kind: "mcp/request", Payload: `{"method":"x"}`})
	const n = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if v := h.e.Receive(kCarol, newCopy(), "lab", raw); v.Refused == nil {
			t.Fatalf("verdict %+v", v)
		}
	}
	runtime.ReadMemStats(&after)
	if n := len(h.snd.take()); n != 0 {
		t.Fatalf("%d answers after the burst", n)
	}
	// carol holds about 840 KiB of granted capabilities.
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 128<<10 {
		t.Fatalf("%d bytes allocated per unanswered refusal: the capabilities were copied", per)
	}
}

// Capability patterns whose matching can take seconds are refused where
// capabilities are accepted: in grants, invites and rosters.
func TestCostlyPatternsRefused(t *testing.T) {
	for _, c := range []string{
		`{"kind":"chat","payload":{"$.a[?count($.a[*]) < 0]":1}}`,
		`{"kind":"chat","payload":{"$..[?count(@..*) > 0]":1}}`,
		`{"kind":"chat","payload":{"path":"!/(/"}}`,
	} {
		h := newHarness(t)
		h.mustRefuse(kErin, "lab", &env{From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[` + c + `]}`}, meup.ReasonInvalidEnvelope)
		h.mustRefuse(kErin, "lab", &env{From: "erin", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank","key":%q,"capabilities":[%s]}`, kFrank, c)}, meup.ReasonInvalidEnvelope)
		text := fmt.Sprintf(`{"spaces":[{"name":"lab","members":[{"key":%q,"id":"alice","capabilities":[%s]}]}]}`, kAlice, c)
		if _, err := space.ParseRoster([]byte(text)); err == nil {
			t.Errorf("a roster with %s was accepted", c)
		}
	}
}

// grantIDs lists the live grants of space lab.
func grantIDs(t *testing.T, h *harness) []string {
	t.Helper()
	gs, err := h.e.Grants("lab")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range gs {
		ids = append(ids, g.ID)
	}
	return ids
}

// A member cannot grant to itself: what it held by such a grant would
// outlive the rights it granted from.
func TestGrantToSelfRefused(t *testing.T) {
	h := newHarness(t)
	h.mustDeliver(kErin, "lab", &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[{"kind":"mcp/request"}]}`})
	h.mustRefuse(kBob, "lab", &env{ID: "g2", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[{"kind":"mcp/request"}]}`}, meup.ReasonInvalidEnvelope)
	if s := h.send("lab", space.Draft{Kind: "capability/grant", Payload: []byte(`{"recipient":"alice","capabilities":[{"kind":"chat"}]}`)}); s.NotApplied == "" {
		t.Error("this node's grant to itself was applied")
	}
	h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"bob","grant_id":"g1"}`})
	h.mustRefuse(kBob, "lab", &env{From: "bob", Kind: "mcp/request", Payload: `{"method":"x"}`}, meup.ReasonCapability)
}

// A grant stands only while its granter holds what it gives: revoking
// the grant it stood on, kicking its granter or taking the granter's
// rights away in the roster drops it, and what stood on it in turn.
func TestGrantsFollowTheirGranter(t *testing.T) {
	request := func(from string) *env {
		return &env{From: from, Kind: "mcp/request", Payload: `{"method":"x"}`}
	}
	passOn := `{"kind":["mcp/request","capability/grant"]}`
	// erin gives bob requests and granting (g1); bob passes both on to
	// carol (g2), who passes them back to bob (g3).
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		h.mustDeliver(kErin, "lab", &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[` + passOn + `]}`})
		h.mustDeliver(kBob, "lab", &env{ID: "g2", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[` + passOn + `]}`})
		h.mustDeliver(kCarol, "lab", &env{ID: "g3", From: "carol", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[` + passOn + `]}`})
		h.mustDeliver(kCarol, "lab", request("carol"))
		return h
	}
	noneLeft := func(t *testing.T, h *harness) {
		t.Helper()
		if ids := grantIDs(t, h); len(ids) != 0 {
			t.Errorf("grants left: %v", ids)
		}
		h.mustRefuse(kBob, "lab", request("bob"), meup.ReasonCapability)
		h.mustRefuse(kCarol, "lab", request("carol"), meup.ReasonCapability)
		if gs, _ := h.st.Grants("lab"); len(gs) != 0 {
			t.Errorf("the store keeps %d grants", len(gs))
		}
	}

	t.Run("revoke", func(t *testing.T) {
		// g2 and g3 back each other; nothing else backs them.
		h := setup(t)
		h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"bob","grant_id":"g1"}`})
		noneLeft(t, h)
	})
	t.Run("revoke by capabilities", func(t *testing.T) {
		h := setup(t)
		h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"bob","capabilities":[` + passOn + `]}`})
		noneLeft(t, h)
	})
	t.Run("kick", func(t *testing.T) {
		h := setup(t)
		h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "space/kick", Payload: `{"participant_id":"bob"}`})
		if ids := grantIDs(t, h); len(ids) != 0 {
			t.Errorf("grants left: %v", ids)
		}
		h.mustRefuse(kCarol, "lab", request("carol"), meup.ReasonCapability)
	})
	t.Run("roster", func(t *testing.T) {
		// bob grants carol what his roster entry gives him; the admin
		// then takes it from bob.
		h := newHarness(t)
		h.mustDeliver(kBob, "lab", &env{ID: "g4", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/proposal"}]}`})
		h.mustDeliver(kErin, "lab", &env{ID: "g5", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"reasoning/start"}]}`})
		h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "mcp/proposal", Payload: `{"method":"x"}`})
		r := testRoster(t)
		r.Spaces[0].Members[1].Capabilities = []meup.Capability{}
		if err := h.e.SetRoster(r); err != nil {
			t.Fatal(err)
		}
		h.mustRefuse(kCarol, "lab", &env{From: "carol", Kind: "mcp/proposal", Payload: `{"method":"x"}`}, meup.ReasonCapability)
		if ids := grantIDs(t, h); !slices.Equal(ids, []string{"g5"}) {
			t.Errorf("grants left %v, want erin's g5 only", ids)
		}
		h.mustDeliver(kCarol, "lab", &env{From: "carol", Kind: "reasoning/start", Payload: `{"message":"hm"}`})
	})
	t.Run("restart with another roster", func(t *testing.T) {
		// The roster changed while the node was down.
		h := setup(t)
		r := testRoster(t)
		r.Spaces[0].Members[4].Capabilities = []meup.Capability{{Kind: []byte(`"chat"`)}}
		e2, err := space.New(h.st, h.snd, r, space.Options{Self: kAlice, Trusted: h.isTrusted, Now: h.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if gs, _ := e2.Grants("lab"); len(gs) != 0 {
			t.Errorf("grants after the restart: %+v", gs)
		}
		if v := e2.Receive(kCarol, newCopy(), "lab", h.raw(request("carol"))); v.Refused == nil {
			t.Errorf("carol's request after the restart: %+v", v)
		}
	})
	t.Run("other grants stay", func(t *testing.T) {
		// A grant backed by the granter's roster entry survives the
		// revoke of another grant to the granter.
		h := setup(t)
		h.mustDeliver(kBob, "lab", &env{ID: "g6", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/proposal"}]}`})
		h.mustDeliver(kErin, "lab", &env{ID: "g7", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"bob","capabilities":[` + passOn + `]}`})
		h.mustDeliver(kErin, "lab", &env{From: "erin", Kind: "capability/revoke", Payload: `{"recipient":"bob","grant_id":"g1"}`})
		if ids := grantIDs(t, h); !slices.Equal(ids, []string{"g2", "g3", "g6", "g7"}) {
			t.Errorf("grants left %v: g7 backs bob's g2 (and so g3); his roster entry backs g6", ids)
		}
	})
}

// An envelope whose admission failed after it was applied (Undo) is
// delivered when its sender's outbox sends the same copy again: not
// refused because its grant or proposal id is now in use, and not
// applied twice.
func TestResendAfterUndo(t *testing.T) {
	for _, e := range []env{
		{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`},
		{ID: "p1", From: "erin", Kind: "mcp/proposal", Payload: `{"method":"tools/call"}`},
		{ID: "k1", From: "erin", Kind: "space/kick", Payload: `{"participant_id":"bob"}`},
		{ID: "i1", From: "erin", Kind: "space/invite", Payload: fmt.Sprintf(`{"participant_id":"frank","key":%q}`, kFrank)},
	} {
		t.Run(e.Kind, func(t *testing.T) {
			h := newHarness(t)
			raw := h.raw(&e)
			if v := h.e.Receive(kErin, "copy-1", "lab", raw); !v.Deliver {
				t.Fatalf("first delivery: %+v", v)
			}
			h.snd.take()
			grants, _ := h.e.Grants("lab")
			props, _ := h.e.Proposals("lab", "")
			h.e.Undo("lab", kErin, e.ID, raw) // the inbox was full
			v := h.e.Receive(kErin, "copy-1", "lab", raw)
			if !v.Deliver || v.Refused != nil || v.Duplicate || v.Err != nil {
				t.Fatalf("the resend after Undo: %+v", v)
			}
			if sent := h.snd.take(); len(sent) != 0 {
				t.Errorf("the resend was answered: %+v", sent)
			}
			if r := h.takeRefused(); len(r) != 0 {
				t.Errorf("refusals observed: %+v", r)
			}
			if gs, _ := h.e.Grants("lab"); len(gs) != len(grants) {
				t.Errorf("grants %+v, want %+v", gs, grants)
			}
			if ps, _ := h.e.Proposals("lab", ""); len(ps) != len(props) {
				t.Errorf("proposals %+v, want %+v", ps, props)
			}
			// Admitted now: a further copy is a repeat.
			if v := h.e.Receive(kErin, "copy-2", "lab", raw); !v.Duplicate {
				t.Errorf("another copy after the admission: %+v", v)
			}
		})
	}
	// Undo is about one sender's id: another sender's envelope reusing
	// the grant id is still refused.
	h := newHarness(t)
	g1 := &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`}
	h.mustDeliver(kErin, "lab", g1)
	h.e.Undo("lab", kErin, "g1", h.raw(g1))
	h.mustRefuse(kBob, "lab", &env{ID: "g1", From: "bob", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"chat"}]}`}, meup.ReasonInvalidEnvelope)
	// Nor does it let the same sender pass another envelope under the
	// id unchecked: only the same bytes are the resend.
	h.mustRefuse(kErin, "lab", &env{ID: "g1", From: "erin", Kind: "capability/grant", Payload: `{"recipient":"carol","capabilities":[{"kind":"mcp/request"}]}`}, meup.ReasonInvalidEnvelope)
	h.mustDeliver(kErin, "lab", g1)
}

// Spaces (list_spaces) shows at most maxListedGrantBytes of a member's
// grants, oldest first, and says when it left some out: grants come from
// peers and may be many and large.
func TestSpacesListBoundsGrants(t *testing.T) {
	h := newHarness(t)
	largeGrants(h, 4)
	for _, sp := range h.e.Spaces() {
		for _, m := range sp.Members {
			b, err := json.Marshal(m.Granted)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 64<<10 {
				t.Errorf("%s in %s: %d bytes of grants listed", m.ID, sp.Name, len(b))
			}
			carol := sp.Name == "lab" && m.ID == "carol" // the one holding them
			if carol && (!m.GrantedTruncated || len(m.Granted) == 0 || m.Granted[0].ID != "big-0") {
				t.Errorf("carol: truncated %v, %d grants listed, want the oldest first and the mark", m.GrantedTruncated, len(m.Granted))
			}
			if !carol && m.GrantedTruncated {
				t.Errorf("%s: marked truncated", m.ID)
			}
		}
	}
}
