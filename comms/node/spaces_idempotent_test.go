package node

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/transport"
)

// A space send under an idempotency key whose copies all reached their
// members but whose acks were all lost fails and releases its key; the
// retry with the key sends the same MEUP envelope (the same MEUP id)
// under the same envelope ids, so each member drops the repeat and acks
// it: the retry succeeds and each member holds the envelope once. A
// proposal and its fulfilment too, which the sender applied at the first
// attempt: the retry neither applies them again nor reports them as
// changing nothing (their ids are in use only because they were applied),
// and the fulfilment of a proposal it fulfilled is not refused.
func TestIdempotentSpaceSendAfterLostAcks(t *testing.T) {
	var (
		mu      sync.Mutex
		proxies []*ackDropper
	)
	all := `[{"kind": "*"}]`
	nodes := spaceNodesVia(t, map[string]string{"prop": all, "orch": all, "carol": all}, func(from, to string, addr transport.Addr) transport.Addr {
		if from != "prop" {
			return addr
		}
		p := newAckDropper(t, addr)
		mu.Lock()
		proxies = append(proxies, p)
		mu.Unlock()
		return p.addr
	}, "prop", "orch", "carol")
	prop := nodes["prop"]
	members := []*Node{nodes["orch"], nodes["carol"]}
	drop := func(on bool) (dropped int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range proxies {
			p.drop.Store(on)
			dropped += p.dropped.Load()
		}
		return dropped
	}
	counts := func(meupKind string) []int {
		var n []int
		for _, m := range members {
			n = append(n, len(meupItems(t, m, meupKind)))
		}
		return n
	}
	plus1 := func(had []int) []int {
		var n []int
		for _, h := range had {
			n = append(n, h+1)
		}
		return n
	}

	var proposal string // the MEUP id of the proposal, for its fulfilment
	var grant string    // the MEUP id of the grant, for its revoke
	for _, c := range []struct {
		name, meupKind string
		msg            func() SpaceMessage
	}{
		{"chat", meup.KindChat, func() SpaceMessage {
			return SpaceMessage{Space: "build", Action: ActChat, Text: "exactly once", SendOptions: SendOptions{IdempotencyKey: "chat-1"}}
		}},
		{"propose", meup.KindMCPProposal, func() SpaceMessage {
			return SpaceMessage{Space: "build", Action: ActPropose, Method: "tools/call", Params: json.RawMessage(`{"name":"read_file"}`), SendOptions: SendOptions{IdempotencyKey: "propose-1"}}
		}},
		{"fulfill", meup.KindMCPRequest, func() SpaceMessage {
			return SpaceMessage{Space: "build", Action: ActFulfill, Proposal: proposal, SendOptions: SendOptions{IdempotencyKey: "fulfill-1"}}
		}},
		{"grant", meup.KindCapabilityGrant, func() SpaceMessage {
			return SpaceMessage{Space: "build", Action: ActGrant, Recipient: "orch", Capabilities: json.RawMessage(`[{"kind":"chat"}]`), To: []string{"orch", "carol"}, SendOptions: SendOptions{IdempotencyKey: "grant-1"}}
		}},
		// The retry of a revoke applied at the first attempt is not
		// refused although the grant it names is gone: it is the same
		// call, not checked again.
		{"revoke", meup.KindCapabilityRevoke, func() SpaceMessage {
			return SpaceMessage{Space: "build", Action: ActRevoke, Recipient: "orch", GrantID: grant, To: []string{"orch", "carol"}, SendOptions: SendOptions{IdempotencyKey: "revoke-1"}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "fulfill" && proposal == "" || c.name == "revoke" && grant == "" {
				t.Skip("no proposal or grant")
			}
			// A new connection carries one envelope at a time until its
			// first ack: each link has carried one before the acks go.
			for _, m := range members {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := prop.SendMessage(ctx, m.h.Config.Name, "warm-up", SendOptions{})
				cancel()
				if err != nil || s.Delivery != DeliveryAcked {
					t.Fatalf("warm-up to %s: %+v, %v", m.h.Config.Name, s, err)
				}
			}
			had := counts(c.meupKind)
			lost := drop(true)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			first, err := prop.SpaceSend(ctx, c.msg())
			cancel()
			if err != nil || len(first.Copies) != len(members) {
				t.Fatalf("first attempt: %+v, %v", first, err)
			}
			switch c.name {
			case "propose":
				proposal = first.ID
			case "grant":
				grant = first.ID
			}
			for _, cp := range first.Copies {
				if cp.Delivery != "" {
					t.Fatalf("first attempt: copy %+v delivered although its ack was dropped", cp)
				}
			}
			waitFor(t, 5*time.Second, "the first attempt to arrive", func() bool { return slices.Equal(counts(c.meupKind), plus1(had)) })
			if drop(false) == lost {
				t.Fatal("no ack was dropped")
			}

			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			again, err := prop.SpaceSend(ctx, c.msg())
			if err != nil || again.Replayed || len(again.Copies) != len(members) {
				t.Fatalf("retry with the key: %+v, %v; want sent again", again, err)
			}
			for i, cp := range again.Copies {
				if cp.Delivery != DeliveryAcked {
					t.Errorf("retry: copy %+v not acked", cp)
				}
				if cp.ID != first.Copies[i].ID || cp.ID == "" {
					t.Errorf("retry: %s's copy sealed as %s, the first attempt's as %s: want one envelope id", cp.Participant, cp.ID, first.Copies[i].ID)
				}
			}
			if again.ID != first.ID {
				t.Errorf("retry: MEUP id %s, the first attempt's %s: want one", again.ID, first.ID)
			}
			if again.NotApplied != "" || first.NotApplied != "" {
				t.Errorf("not applied: first %q, retry %q", first.NotApplied, again.NotApplied)
			}
			if n := counts(c.meupKind); !slices.Equal(n, plus1(had)) {
				t.Fatalf("the members hold %v %s envelopes, had %v: want exactly one more each", n, c.meupKind, had)
			}
			// Now kept: another retry replays.
			if r, err := prop.SpaceSend(ctx, c.msg()); err != nil || !r.Replayed || r.ID != first.ID {
				t.Fatalf("retry after the success: %+v, %v", r, err)
			}

			switch c.name {
			case "propose":
				for _, n := range append([]*Node{prop}, members...) {
					ps, err := AllProposals(ctx, n, ProposalQuery{Space: "build"})
					if err != nil || len(ps) != 1 || ps[0].ID != first.ID || ps[0].State != space.ProposalPending {
						t.Errorf("%s's proposals %+v, %v: want the one, pending", n.h.Config.Name, ps, err)
					}
				}
			case "fulfill":
				for _, n := range append([]*Node{prop}, members...) {
					ps, err := AllProposals(ctx, n, ProposalQuery{Space: "build"})
					if err != nil || len(ps) != 1 || ps[0].State != space.ProposalFulfilled || ps[0].RequestID != first.ID {
						t.Errorf("%s's proposals %+v, %v: want it fulfilled by %s", n.h.Config.Name, ps, err, first.ID)
					}
				}
			}
		})
	}
}
