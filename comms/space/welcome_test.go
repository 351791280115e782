package space_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/identity"
)

// welcomeEntry is a participant in a welcome.
type welcomeEntry struct {
	ID           string            `json:"id"`
	Capabilities []meup.Capability `json:"capabilities"`
	Truncated    bool              `json:"capabilities_truncated"`
}

// welcomeBody is a welcome's payload.
type welcomeBody struct {
	You          welcomeEntry   `json:"you"`
	Participants []welcomeEntry `json:"participants"`
	Truncated    bool           `json:"participants_truncated"`
}

// joinWelcome has from (participant id) join lab and returns the
// welcome this node answers with, and its payload's size.
func joinWelcome(t *testing.T, h *harness, from identity.PeerID, id string) welcomeBody {
	t.Helper()
	h.snd.take()
	v := h.recv(from, "lab", &env{From: id, Kind: "system/presence", Payload: fmt.Sprintf(`{"event":"join","participant":{"id":%q,"capabilities":[]}}`, id)})
	if v.Refused != nil || v.Err != nil {
		t.Fatalf("join: %+v", v)
	}
	sent := h.snd.take()
	if len(sent) != 1 || sent[0].Env.Kind != meup.KindSystemWelcome {
		t.Fatalf("answers to %s's join: %d, want one system/welcome (it is not sent when its payload is over %d bytes)", id, len(sent), meup.MaxPayloadBytes)
	}
	var w welcomeBody
	if err := json.Unmarshal(sent[0].Env.Payload, &w); err != nil {
		t.Fatal(err)
	}
	if n := len(sent[0].Env.Payload); n > meup.MaxPayloadBytes {
		t.Fatalf("welcome payload %d bytes, over %d", n, meup.MaxPayloadBytes)
	}
	return w
}

// A member holding many large grants is welcomed: the welcome carries as
// many of each member's capabilities as fit, marks those it cut, and
// stays within the payload limit. One member's grants do not crowd out
// the others'.
func TestWelcomeCapabilitiesBounded(t *testing.T) {
	h := newHarness(t)
	largeGrants(h, 4) // carol: about 840 KiB of capabilities
	largeGrantsTo(h, "bob", "bob-", 2)

	w := joinWelcome(t, h, kCarol, "carol")
	if w.You.ID != "carol" || !w.You.Truncated || len(w.You.Capabilities) < 2 || len(w.You.Capabilities) >= 4*30 {
		t.Fatalf("you: carol, truncated %v, %d capabilities", w.You.Truncated, len(w.You.Capabilities))
	}
	if string(w.You.Capabilities[0].Kind) != `["chat","mcp/withdraw","mcp/reject"]` || w.You.Capabilities[1].ID != "big-0" {
		t.Errorf("first capabilities %s, %+v: want the roster's, then the oldest grant's", w.You.Capabilities[0].Kind, w.You.Capabilities[1])
	}
	got := map[string]welcomeEntry{}
	var ids []string
	for _, p := range w.Participants {
		got[p.ID] = p
		ids = append(ids, p.ID)
	}
	if strings.Join(ids, " ") != "alice bob carol erin" || w.Truncated {
		t.Fatalf("participants %v (truncated %v), want alice bob carol erin", ids, w.Truncated)
	}
	for _, id := range []string{"bob", "carol"} {
		if p := got[id]; !p.Truncated || len(p.Capabilities) < 2 {
			t.Errorf("%s: truncated %v with %d capabilities", id, p.Truncated, len(p.Capabilities))
		}
	}
	for _, id := range []string{"alice", "erin"} {
		if p := got[id]; p.Truncated || len(p.Capabilities) != 1 || string(p.Capabilities[0].Kind) != `"*"` {
			t.Errorf("%s: %+v, want its one capability, whole", id, p)
		}
	}

	// A member with few capabilities gets its own whole; the welcome
	// lists the others as before.
	w = joinWelcome(t, h, kErin, "erin")
	if w.You.Truncated || len(w.You.Capabilities) != 1 || len(w.Participants) != 4 || w.Truncated {
		t.Fatalf("erin's welcome: you %+v, %d participants (truncated %v)", w.You, len(w.Participants), w.Truncated)
	}
}

// A space of many members with long ids and large rosters entries is
// welcomed too: the welcome lists those that fit and says it left some
// out.
func TestWelcomeParticipantsBounded(t *testing.T) {
	var members []string
	members = append(members, fmt.Sprintf(`{"key": %q, "id": "alice", "capabilities": [{"kind": "*"}]}`, kAlice))
	var caps []string
	for j := range 2 {
		caps = append(caps, fmt.Sprintf(`{"kind":"chat","payload":{"c%d":"%s"}}`, j, strings.Repeat("c", 500)))
	}
	trusted := map[identity.PeerID]bool{}
	for i := range space.MaxMembers - 1 {
		k := key(byte(20 + i%200))
		if i >= 200 {
			b := make([]byte, 32)
			b[0], b[1] = 0xee, byte(i)
			var err error
			if k, err = identity.PeerIDFromBytes(b); err != nil {
				t.Fatal(err)
			}
		}
		trusted[k] = true
		id := fmt.Sprintf("%03d", i) + strings.Repeat("<", meup.MaxIDLen-3) // six bytes each in JSON
		members = append(members, fmt.Sprintf(`{"key": %q, "id": %q, "capabilities": [%s]}`, k, id, strings.Join(caps, ",")))
	}
	r, err := space.ParseRoster([]byte(`{"spaces": [{"name": "lab", "members": [` + strings.Join(members, ",") + `]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	snd := &fakeSender{t: t}
	e, err := space.New(newFakeStore(), snd, r, space.Options{Self: kAlice, Trusted: func(k identity.PeerID) bool { return trusted[k] }})
	if err != nil {
		t.Fatal(err)
	}
	first := r.Spaces[0].Members[1]
	raw := fmt.Sprintf(`{"protocol":"meup/v0.1","id":"j1","from":%q,"kind":"system/presence","payload":{"event":"join","participant":{"id":%q,"capabilities":[]}}}`, first.ID, first.ID)
	if v := e.Receive(first.Key, "c1", "lab", []byte(raw)); v.Refused != nil || v.Err != nil {
		t.Fatalf("join: %+v", v)
	}
	sent := snd.take()
	if len(sent) != 1 || sent[0].Env.Kind != meup.KindSystemWelcome {
		t.Fatalf("answers to the join: %d, want one system/welcome", len(sent))
	}
	var w welcomeBody
	if err := json.Unmarshal(sent[0].Env.Payload, &w); err != nil {
		t.Fatal(err)
	}
	if n := len(sent[0].Env.Payload); n > meup.MaxPayloadBytes {
		t.Fatalf("welcome payload %d bytes", n)
	}
	if !w.Truncated || len(w.Participants) < 100 || len(w.Participants) >= space.MaxMembers || w.Participants[0].ID != "alice" || w.You.ID != first.ID || w.You.Truncated {
		t.Fatalf("welcome: you %s (truncated %v), %d participants (truncated %v)", w.You.ID, w.You.Truncated, len(w.Participants), w.Truncated)
	}
}
