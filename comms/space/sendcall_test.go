package space_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
)

// A send made as a call (a draft with its own id, the call in the
// options) goes out under that MEUP id with the call passed to the
// Sender for each copy; sent again (a retry of the call) its copies go
// out again under the same id, but what it changes here is applied once
// and the retry is not reported as changing nothing. A draft whose
// effect was refused here is checked again at its retry.
func TestSendAsCall(t *testing.T) {
	h := newHarness(t)
	o := space.SendOptions{Call: "key\x00hash"}
	send := func(d space.Draft) space.Sent {
		t.Helper()
		s, err := h.e.Send(context.Background(), "lab", d, o)
		if err != nil {
			t.Fatalf("Send %s: %v", d.Kind, err)
		}
		return s
	}
	for _, d := range []space.Draft{
		{ID: "call-p", Kind: meup.KindMCPProposal, Payload: json.RawMessage(`{"method":"tools/call"}`)},
		{ID: "call-g", Kind: meup.KindCapabilityGrant, Payload: json.RawMessage(`{"recipient":"bob","capabilities":[{"kind":"mcp/request"}]}`)},
		{ID: "call-k", Kind: meup.KindSpaceKick, Payload: json.RawMessage(`{"participant_id":"carol"}`)},
	} {
		t.Run(d.Kind, func(t *testing.T) {
			var grants, proposals int
			for attempt := 1; attempt <= 2; attempt++ {
				s := send(d)
				if s.Envelope.ID != d.ID || s.NotApplied != "" {
					t.Fatalf("attempt %d: id %q, not applied %q: want the draft's id, applied", attempt, s.Envelope.ID, s.NotApplied)
				}
				copies := h.snd.take()
				if len(copies) == 0 {
					t.Fatalf("attempt %d: no copies", attempt)
				}
				for _, c := range copies {
					if c.Env.ID != d.ID || c.Opts != o {
						t.Errorf("attempt %d: copy %+v: want the draft's id and the call", attempt, c)
					}
				}
				gs, _ := h.e.Grants("lab")
				ps, _ := h.e.Proposals("lab", "")
				if attempt == 1 {
					grants, proposals = len(gs), len(ps)
				} else if len(gs) != grants || len(ps) != proposals {
					t.Errorf("the retry changed the state: %d grants, %d proposals; %d and %d after the first", len(gs), len(ps), grants, proposals)
				}
			}
		})
	}
	if _, ok := h.member("lab", "carol"); ok {
		t.Error("carol was not kicked")
	}

	// Refused here (only its proposer withdraws a proposal): checked
	// again at the retry, and refused again.
	h.mustDeliver(kBob, "lab", &env{ID: "bobs", From: "bob", Kind: meup.KindMCPProposal, Payload: `{"method":"tools/call"}`})
	w := space.Draft{ID: "call-w", Kind: meup.KindMCPWithdraw, CorrelationID: []string{"bobs"}, Payload: json.RawMessage(`{}`)}
	for attempt := 1; attempt <= 2; attempt++ {
		if s := send(w); !strings.Contains(s.NotApplied, meup.ReasonNotProposer) {
			t.Errorf("attempt %d of another's withdraw: not applied %q", attempt, s.NotApplied)
		}
	}
	h.snd.take()

	// Sends without an id of their own are new sends each time.
	a := h.send("lab", space.Draft{Kind: meup.KindMCPProposal, Payload: json.RawMessage(`{"method":"x"}`)})
	b := h.send("lab", space.Draft{Kind: meup.KindMCPProposal, Payload: json.RawMessage(`{"method":"x"}`)})
	if a.Envelope.ID == b.Envelope.ID || a.NotApplied != "" || b.NotApplied != "" {
		t.Errorf("two sends without ids: %q (%q), %q (%q)", a.Envelope.ID, a.NotApplied, b.Envelope.ID, b.NotApplied)
	}
}

// The resend of an envelope applied but not admitted (Undo) that was
// built again, with a new ts (the retry of a call under an idempotency
// key), is that envelope: delivered, not refused for the ids its first
// copy put in use, nor applied again.
func TestResendAfterUndoNewTS(t *testing.T) {
	h := newHarness(t)
	stamped := func(e *env, ts string) []byte {
		var m map[string]any
		if err := json.Unmarshal(h.raw(e), &m); err != nil {
			t.Fatal(err)
		}
		m["ts"] = ts
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p := &env{ID: "p1", From: "erin", Kind: meup.KindMCPProposal, Payload: `{"method":"tools/call"}`}
	first := stamped(p, "2030-01-02T03:04:05.000Z")
	if v := h.e.Receive(kErin, "copy-1", "lab", first); !v.Deliver {
		t.Fatalf("first delivery: %+v", v)
	}
	h.e.Undo("lab", kErin, p.ID, first) // the inbox was full
	v := h.e.Receive(kErin, "copy-1", "lab", stamped(p, "2030-01-02T03:04:09.000Z"))
	if !v.Deliver || v.Refused != nil || v.Duplicate || v.Err != nil {
		t.Fatalf("the resend built again: %+v", v)
	}
	if ps, _ := h.e.Proposals("lab", ""); len(ps) != 1 {
		t.Errorf("proposals %+v: want the one", ps)
	}
	// Another envelope under the id is not the resend.
	h.e.Undo("lab", kErin, p.ID, first)
	other := &env{ID: "p1", From: "erin", Kind: meup.KindMCPProposal, Payload: `{"method":"tools/list"}`}
	if v := h.e.Receive(kErin, "copy-1", "lab", stamped(other, "2030-01-02T03:04:09.000Z")); v.Refused == nil {
		t.Fatalf("another proposal under the id: %+v", v)
	}
}
