package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/space"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Rosters are edited in the home's file with or without a running node,
// with errors a caller can act on.
func TestSpaceEditWithoutDaemon(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	n := startTest(t, h, ModeSend)
	ctx := context.Background()
	edit := func(e SpaceEdit) (SpaceInfo, error) { return n.SpaceEdit(ctx, e) }

	info, err := edit(SpaceEdit{Op: SpaceCreate, Space: "build", As: "orchestrator"})
	if err != nil || info.Name != "build" || info.Self != "orchestrator" || len(info.Members) != 1 || !info.Members[0].Self {
		t.Fatalf("create: %+v, %v", info, err)
	}
	// No node of this home runs: it shows as offline.
	if p := info.Members[0].Presence; p != space.PresenceOffline {
		t.Errorf("this node's presence without a daemon: %q, want %q", p, space.PresenceOffline)
	}
	fi, err := os.Stat(h.SpacesPath())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("spaces file: %v, %v", fi, err)
	}
	// A trusted peer by name; a key nobody trusts yet (pending).
	stranger, _ := identity.GenerateKeypair()
	if _, err := edit(SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "bob", ID: "worker", Capabilities: json.RawMessage(`[{"kind":"chat"},{"kind":"mcp/response"}]`)}); err != nil {
		t.Fatal(err)
	}
	info, err = edit(SpaceEdit{Op: SpaceAdd, Space: "BUILD", Peer: stranger.ID().String(), ID: "proposer"})
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, m := range info.Members {
		status[m.ID] = m.Status
		if m.ID == "worker" && m.Key != bob.ID().String() {
			t.Errorf("worker's key %s, want bob's", m.Key)
		}
		if m.ID == "proposer" {
			caps, _ := json.Marshal(m.Capabilities)
			if !strings.Contains(string(caps), "mcp/proposal") || strings.Contains(string(caps), "mcp/request") {
				t.Errorf("default capabilities %s: want chat and proposals only", caps)
			}
		}
	}
	if status["worker"] != space.StatusActive || status["proposer"] != space.StatusPending {
		t.Fatalf("statuses %v: a trusted member is active, an untrusted one pending", status)
	}
	for _, tc := range []struct {
		name string
		e    SpaceEdit
		code string
		msg  string // in the error, if not ""
	}{
		{"create twice", SpaceEdit{Op: SpaceCreate, Space: "Build", As: "x"}, CodeBadArgument, ""},
		// Errors are worded for the command line and MCP alike.
		{"create without as", SpaceEdit{Op: SpaceCreate, Space: "other"}, CodeBadArgument, "your participant id in the space is needed (meerkatd space create --as ID, or edit_space's as)"},
		{"no space name", SpaceEdit{Op: SpaceCreate, As: "x"}, CodeBadArgument, ""},
		// What is wrong with the name or id, not where in spaces.json
		// the new space would have gone, nor the name again.
		{"a space name with a space", SpaceEdit{Op: SpaceCreate, Space: "spa ce", As: "x"}, CodeBadArgument, "space name: ' ' is not allowed"},
		{"a long space name", SpaceEdit{Op: SpaceCreate, Space: strings.Repeat("n", 1000), As: "x"}, CodeBadArgument, "space name: 1000 bytes, over the limit"},
		{"an id with a space", SpaceEdit{Op: SpaceCreate, Space: "other", As: "a b"}, CodeBadArgument, "your participant id (as): holds white space"},
		{"add an id with a space", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "bob", ID: "a b"}, CodeBadArgument, "the member's participant id: holds white space"},
		{"unknown op", SpaceEdit{Op: "rename", Space: "build"}, CodeBadArgument, ""},
		{"add to unknown space", SpaceEdit{Op: SpaceAdd, Space: "nope", Peer: "bob", ID: "w"}, CodeUnknownSpace, "(list_spaces or meerkatd space list shows them)"},
		{"add unknown peer", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "carol", ID: "w"}, CodeUnknownPeer, ""},
		// Written as a key, but not one a node accepts (all zero): the
		// key's fault is named, not an unknown peer.
		{"add a malformed key", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", ID: "w"}, CodeBadArgument, "ed25519:AAAA"},
		{"add a short key", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "ed25519:AAAA", ID: "w"}, CodeBadArgument, ""},
		{"add without id", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "bob"}, CodeBadArgument, ""},
		{"add duplicate id", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: stranger.ID().String(), ID: "worker"}, CodeBadArgument, ""},
		{"add a member again under another id", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "bob", ID: "worker2"}, CodeBadArgument, `is member "worker" of space "build" already`},
		{"bad capability", SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "bob", ID: "w", Capabilities: json.RawMessage(`[{"kind":"/(/"}]`)}, CodeBadArgument, ""},
		{"remove missing", SpaceEdit{Op: SpaceRemove, Space: "build", ID: "ghost"}, CodeBadArgument, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(h.SpacesPath())
			if _, err := edit(tc.e); CodeOf(err) != tc.code || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Fatalf("got %v (code %s), want code %s and %q", err, CodeOf(err), tc.code, tc.msg)
			}
			if after, _ := os.ReadFile(h.SpacesPath()); string(after) != string(before) {
				t.Fatal("a refused edit changed the file")
			}
		})
	}
	// Added again under its id: its capabilities are replaced.
	info, err = edit(SpaceEdit{Op: SpaceAdd, Space: "build", Peer: "bob", ID: "worker", Capabilities: json.RawMessage(`[{"kind":"chat"}]`)})
	if err != nil || len(info.Members) != 3 {
		t.Fatalf("add again: %+v, %v", info, err)
	}
	for _, m := range info.Members {
		if caps, _ := json.Marshal(m.Capabilities); m.ID == "worker" && strings.Contains(string(caps), "mcp/response") {
			t.Errorf("worker's capabilities after adding it again: %s, want chat only", caps)
		}
	}
	if info, err = edit(SpaceEdit{Op: SpaceRemove, Space: "build", ID: "proposer"}); err != nil || len(info.Members) != 2 {
		t.Fatalf("remove: %+v, %v", info, err)
	}
	// By the trusted peer's name, as add takes it.
	if info, err = edit(SpaceEdit{Op: SpaceRemove, Space: "build", Peer: "bob"}); err != nil || len(info.Members) != 1 {
		t.Fatalf("remove by the peer's name: %+v, %v", info, err)
	}
	if _, err = edit(SpaceEdit{Op: SpaceRemove, Space: "build", Peer: "bob"}); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "remove takes a participant id") {
		t.Fatalf("remove of a peer no longer a member: %v", err)
	}
	list, err := n.Spaces(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "build" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := n.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActChat, Text: "hi"}); CodeOf(err) != CodeNoDaemon {
		t.Fatalf("send without a daemon: %v", err)
	}
	if _, err := n.Proposals(ctx, ProposalQuery{}); CodeOf(err) != CodeNoDaemon {
		t.Fatalf("proposals without a daemon: %v", err)
	}
	gone, err := edit(SpaceEdit{Op: SpaceDelete, Space: "build"})
	if err != nil {
		t.Fatal(err)
	}
	// The shape list_spaces has, empty: members [] as for any space, not
	// null.
	if b, _ := json.Marshal(gone); string(b) != `{"name":"build","self":"","delivery":"","members":[],"pending_proposals":0}` {
		t.Fatalf("delete's result: %s", b)
	}
	if list, _ := n.Spaces(ctx); len(list) != 0 {
		t.Fatalf("after delete: %+v", list)
	}
	if err := os.WriteFile(h.SpacesPath(), []byte(`{"spaces": [{"name": "x", "members": [{"key": "nonsense", "id": "a"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A broken file is no bad argument: it fails as run and config
	// check fail on it (exit 1), naming the space and member at fault.
	if _, err := n.Spaces(ctx); CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), SpacesFileName) || !strings.Contains(err.Error(), `space 1 ("x"), member 1 ("a")`) {
		t.Fatalf("a broken file: %v (%s)", err, CodeOf(err))
	}
	if _, err := edit(SpaceEdit{Op: SpaceCreate, Space: "y", As: "me"}); CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), SpacesFileName) {
		t.Fatalf("an edit of a broken file: %v (%s)", err, CodeOf(err))
	}
}

// spaceNodes starts serving nodes (memory inbox) that trust each other
// and share one space "build", each member with the capabilities given.
func spaceNodes(t testing.TB, caps map[string]string, names ...string) map[string]*Node {
	t.Helper()
	return spaceNodesVia(t, caps, nil, names...)
}

// spaceNodesVia is spaceNodes where node from reaches node to at the
// address via returns for to's own (nil: at its own).
func spaceNodesVia(t testing.TB, caps map[string]string, via func(from, to string, addr transport.Addr) transport.Addr, names ...string) map[string]*Node {
	t.Helper()
	nodes := map[string]*Node{}
	for _, name := range names {
		h, _ := testHome(t, name, func(c *config.Config) { c.Store.Mode = config.StoreMemory })
		nodes[name] = startTest(t, h, ModeServe)
	}
	// Every node closes before any home's goroutine check runs (each
	// testHome registers one, and cleanups run last first).
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	var peers []trust.Peer
	for _, name := range names {
		peers = append(peers, trust.Peer{Name: name, ID: nodes[name].h.Key.ID(), Addr: nodes[name].Addrs()[0]})
	}
	var members []string
	for _, name := range names {
		members = append(members, fmt.Sprintf(`{"key": %q, "id": %q, "capabilities": %s}`, nodes[name].h.Key.ID(), name, caps[name]))
	}
	roster := `{"spaces": [{"name": "build", "members": [` + strings.Join(members, ",") + `]}]}`
	for _, name := range names {
		n := nodes[name]
		mine := slices.DeleteFunc(slices.Clone(peers), func(p trust.Peer) bool { return p.Name == name })
		for i := range mine {
			if via != nil {
				mine[i].Addr = via(name, mine[i].Name, mine[i].Addr)
			}
		}
		l, err := trust.New(mine...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Save(n.h.TrustPath()); err != nil {
			t.Fatal(err)
		}
	}
	// Every node trusts the others before any has the space and announces
	// itself: a node not set up yet closes the connection of a join from
	// a key it does not trust, and the joining node's outbox takes that
	// for a refusal (a dead letter, and its notice in the inbox). The
	// trust file is read on the watcher's goroutine, so wait for it.
	for _, name := range names {
		nodes[name].ReloadTrust()
	}
	for _, name := range names {
		n := nodes[name]
		waitFor(t, 5*time.Second, name+" trusts the others", func() bool {
			for _, p := range peers {
				if _, ok := n.r.Trust().Lookup(p.ID); !ok && p.Name != name {
					return false
				}
			}
			return true
		})
	}
	for _, name := range names {
		if err := os.WriteFile(nodes[name].h.SpacesPath(), []byte(roster), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		nodes[name].ReloadTrust() // also re-reads spaces.json
	}
	for _, name := range names {
		n := nodes[name]
		waitFor(t, 5*time.Second, name+" knows the space and trusts its members", func() bool {
			sp, _ := n.Spaces(context.Background())
			if len(sp) != 1 || sp[0].Self != name || len(sp[0].Members) != len(names) {
				return false
			}
			for _, m := range sp[0].Members {
				if m.Status != space.StatusActive {
					return false
				}
			}
			return true
		})
	}
	return nodes
}

// meupItems reads n's MEUP items of kind meupKind.
func meupItems(t *testing.T, n *Node, meupKind string) []Message {
	t.Helper()
	b, err := n.Receive(context.Background(), Query{Kinds: []string{wire.TypeMEUP}, MEUPFilter: MEUPFilter{MEUPKinds: []string{meupKind}}})
	if err != nil {
		t.Fatal(err)
	}
	return b.Messages
}

// The actions build the envelopes the issue describes and the items
// arrive with their space, participant and envelope; filters and pending
// see them.
func TestSpaceActionsBetweenNodes(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{
		"orch": `[{"kind": "*"}]`,
		"prop": `[{"kind": ["chat", "mcp/proposal", "mcp/withdraw", "mcp/response"]}]`,
	}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()

	sent, err := prop.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActChat, Text: "hello", Context: "t1", SendOptions: SendOptions{Reliable: true}})
	if err != nil || sent.Kind != meup.KindChat || len(sent.Copies) != 1 || sent.Copies[0].Participant != "orch" || sent.Copies[0].Delivery != DeliveryAcked {
		t.Fatalf("chat: %+v, %v", sent, err)
	}
	if sent.Copies[0].ID == "" || sent.Copies[0].ID == sent.ID {
		t.Fatalf("the copy's Meerkat id %q must exist and differ from the MEUP id %q", sent.Copies[0].ID, sent.ID)
	}
	waitFor(t, 5*time.Second, "the chat arrives", func() bool { return len(meupItems(t, orch, meup.KindChat)) == 1 })
	got := meupItems(t, orch, meup.KindChat)[0]
	if got.Kind != wire.TypeMEUP || got.MEUP == nil || got.MEUP.Space != "build" || got.MEUP.Participant != "prop" || got.MEUP.ID != sent.ID || got.MEUP.Context != "t1" || got.ID != sent.Copies[0].ID {
		t.Fatalf("chat item %+v (meup %+v)", got, got.MEUP)
	}
	var env meup.Envelope
	if err := json.Unmarshal(got.MEUP.Envelope.(json.RawMessage), &env); err != nil || string(env.Payload) != `{"text":"hello"}` || env.Protocol != meup.DefaultProtocol {
		t.Fatalf("envelope %+v, %v", env, err)
	}
	for _, q := range []MEUPFilter{{Space: "other"}, {Context: "t2"}, {MEUPKinds: []string{"mcp/proposal"}}} {
		if b, _ := orch.Receive(ctx, Query{MEUPFilter: q}); len(b.Messages) != 0 {
			t.Errorf("filter %+v shows %d items", q, len(b.Messages))
		}
	}
	if b, _ := orch.Receive(ctx, Query{MEUPFilter: MEUPFilter{Space: "build", Context: "t1"}}); len(b.Messages) != 1 || b.Pending != 1 {
		t.Errorf("space and context filter: %d items, pending %d (want 1, 1)", len(b.Messages), b.Pending)
	}

	// Prop proposes a call of its own tool (addressed to itself); orch
	// fulfils it (the request goes to the participants the proposal
	// addressed), prop answers it.
	p, err := prop.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActPropose, Method: "tools/call", Params: json.RawMessage(`{"name":"read_file"}`), To: []string{"prop"}})
	if err != nil || p.Kind != meup.KindMCPProposal {
		t.Fatalf("propose: %+v, %v", p, err)
	}
	waitFor(t, 5*time.Second, "orch tracks the proposal", func() bool {
		ps, _ := AllProposals(ctx, orch, ProposalQuery{Space: "build", State: space.ProposalPending})
		return len(ps) == 1 && ps[0].ID == p.ID && ps[0].Proposer == "prop" && slices.Equal(ps[0].To, []string{"prop"})
	})
	f, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActFulfill, Proposal: p.ID})
	if err != nil || f.Kind != meup.KindMCPRequest {
		t.Fatalf("fulfill: %+v, %v", f, err)
	}
	var req meup.Envelope
	if err := json.Unmarshal(f.Envelope, &req); err != nil || !slices.Equal(req.CorrelationID, []string{p.ID}) || !slices.Equal(req.To, []string{"prop"}) ||
		string(req.Payload) != `{"method":"tools/call","params":{"name":"read_file"}}` {
		t.Fatalf("the fulfilment %s, %v", f.Envelope, err)
	}
	if _, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActFulfill, Proposal: p.ID}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("fulfilling twice: %v", err)
	}
	waitFor(t, 5*time.Second, "prop gets the request", func() bool { return len(meupItems(t, prop, meup.KindMCPRequest)) == 1 })
	// Forget what was tracked since the start, as a restart would: the
	// request is found in the inbox.
	prop.spaces.mu.Lock()
	clear(prop.spaces.requests)
	prop.spaces.reqOrder = nil
	prop.spaces.mu.Unlock()
	r, err := prop.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActRespond, Request: f.ID, Result: json.RawMessage(`{"ok":true}`)})
	if err != nil || r.Kind != meup.KindMCPResponse {
		t.Fatalf("respond: %+v, %v", r, err)
	}
	var resp meup.Envelope
	if err := json.Unmarshal(r.Envelope, &resp); err != nil || !slices.Equal(resp.CorrelationID, []string{f.ID}) || !slices.Equal(resp.To, []string{"orch"}) {
		t.Fatalf("the response %s, %v", r.Envelope, err)
	}
	waitFor(t, 5*time.Second, "the proposal is fulfilled with both ids", func() bool {
		ps, _ := AllProposals(ctx, orch, ProposalQuery{State: space.ProposalFulfilled})
		return len(ps) == 1 && ps[0].By == "orch" && ps[0].RequestID == f.ID && ps[0].ResponseID == r.ID
	})

	// A withdraw of another's proposal is refused, not sent: every
	// member's node knows the proposer by its key and would refuse it.
	if w, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActWithdraw, Proposal: p.ID}); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), meup.ReasonNotProposer) {
		t.Fatalf("withdraw of prop's proposal by orch: %v (%s), not applied %q: want refused", err, CodeOf(err), w.NotApplied)
	}

	for _, tc := range []struct {
		name string
		m    SpaceMessage
		code string
	}{
		{"unknown space", SpaceMessage{Space: "nope", Action: ActChat, Text: "x"}, CodeUnknownSpace},
		{"send without kind", SpaceMessage{Space: "build"}, CodeBadArgument},
		{"unknown action", SpaceMessage{Space: "build", Action: "shout"}, CodeBadArgument},
		{"empty chat", SpaceMessage{Space: "build", Action: ActChat}, CodeBadArgument},
		{"propose without method", SpaceMessage{Space: "build", Action: ActPropose}, CodeBadArgument},
		{"fulfill unknown proposal", SpaceMessage{Space: "build", Action: ActFulfill, Proposal: "nope"}, CodeUnknownProposal},
		{"reject unknown proposal", SpaceMessage{Space: "build", Action: ActReject, Proposal: "nope"}, CodeUnknownProposal},
		{"withdraw unknown proposal", SpaceMessage{Space: "build", Action: ActWithdraw, Proposal: "nope"}, CodeUnknownProposal},
		{"respond to an unknown request", SpaceMessage{Space: "build", Action: ActRespond, Request: "nope", Result: json.RawMessage(`1`)}, CodeUnknownProposal},
		{"respond with result and error", SpaceMessage{Space: "build", Action: ActRespond, Request: f.ID, Result: json.RawMessage(`1`), Error: json.RawMessage(`2`)}, CodeBadArgument},
		{"grant without capabilities", SpaceMessage{Space: "build", Action: ActGrant, Recipient: "prop"}, CodeBadArgument},
		{"revoke without what", SpaceMessage{Space: "build", Action: ActRevoke, Recipient: "prop"}, CodeBadArgument},
		{"ttl too long", SpaceMessage{Space: "build", Action: ActChat, Text: "x", SendOptions: SendOptions{Reliable: true, TTL: MaxTTL + time.Second}}, CodeBadArgument},
		{"kind outside the grammar", SpaceMessage{Space: "build", Kind: "Bad Kind!"}, CodeBadArgument},
		{"a number the wire cannot carry", SpaceMessage{Space: "build", Kind: "reasoning/thought", Payload: json.RawMessage(`{"n":1e400}`)}, CodeBadArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := orch.SpaceSend(ctx, tc.m); CodeOf(err) != tc.code {
				t.Fatalf("got %v (code %s), want %s", err, CodeOf(err), tc.code)
			}
		})
	}
	// Worded for the command line and MCP alike, without the layers'
	// names.
	_, err = orch.SpaceSend(ctx, SpaceMessage{Space: "build", Kind: "chat", Payload: json.RawMessage(`"notobj"`)})
	if want := "not sent: payload: not a JSON object"; err == nil || err.Error() != want {
		t.Fatalf("a chat whose payload is a string: %v, want %q", err, want)
	}
	_, err = orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActFulfill, Proposal: "nope"})
	if want := `space "build" has no proposal "nope" (list_proposals or meerkatd space proposals shows them)`; err == nil || err.Error() != want {
		t.Fatalf("fulfil of an unknown proposal: %v, want %q", err, want)
	}
}

// The actions (CLI space grant/revoke/withdraw…, MCP space_grant,
// space_revoke…) refuse, before anything is applied or sent, an envelope
// every member's node would refuse: a revoke of a grant the recipient
// does not hold, a grant to oneself, a withdraw of another's proposal.
// What hangs on this node's own roster (a grant beyond what its
// participant holds here) is still sent, with not_applied, and so is a
// plain send of any envelope.
func TestSpaceActionsRefuseWhatMembersRefuse(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{
		"orch": `[{"kind": "*"}]`,
		"prop": `[{"kind": ["chat", "mcp/proposal", "capability/grant"]}]`,
	}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()
	g, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActGrant, Recipient: "prop", Capabilities: json.RawMessage(`[{"kind":"mcp/request"}]`), SendOptions: reliable})
	if err != nil || g.NotApplied != "" {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	p, err := prop.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActPropose, Method: "tools/call", SendOptions: reliable})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "orch has prop's proposal", func() bool {
		ps, _ := AllProposals(ctx, orch, ProposalQuery{Space: "build"})
		return len(ps) == 1 && ps[0].ID == p.ID
	})

	for _, tc := range []struct {
		name string
		m    SpaceMessage
		want string // in the error
	}{
		{"revoke of a grant id that is not live", SpaceMessage{Action: ActRevoke, Recipient: "prop", GrantID: "nonexistent"},
			`not sent: "prop" holds no live grant "nonexistent" in space "build" (invalid_envelope: the members' nodes would refuse it); list_spaces or meerkatd space show lists each member's live grants with their ids (if this node revoked it already and that revoke did not reach every member, send the revoke again as a plain envelope`},
		{"revoke of a live grant from another member", SpaceMessage{Action: ActRevoke, Recipient: "orch", GrantID: g.ID, To: []string{"prop"}},
			`"orch" holds no live grant "` + g.ID + `"`},
		{"revoke of capabilities nobody was granted", SpaceMessage{Action: ActRevoke, Recipient: "prop", Capabilities: json.RawMessage(`[{"kind":"chat"}]`)},
			`no live grant of "prop" in space "build" holds those capabilities`},
		{"revoke of a grant id with capabilities it does not hold", SpaceMessage{Action: ActRevoke, Recipient: "prop", GrantID: g.ID, Capabilities: json.RawMessage(`[{"kind":"chat"}]`)},
			`"prop" holds no live grant "` + g.ID + `" with those capabilities`},
		{"grant to oneself", SpaceMessage{Action: ActGrant, Recipient: "orch", Capabilities: json.RawMessage(`[{"kind":"chat"}]`)},
			`"orch" cannot grant to itself (invalid_envelope`},
		{"withdraw of another's proposal", SpaceMessage{Action: ActWithdraw, Proposal: p.ID},
			`(not_proposer: the members' nodes would refuse it)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.Space, tc.m.SendOptions = "build", reliable
			s, err := orch.SpaceSend(ctx, tc.m)
			if CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v (%s), not applied %q, %d copies; want bad_argument, %q", err, CodeOf(err), s.NotApplied, len(s.Copies), tc.want)
			}
			// Under an idempotency key too, and the refusal is not
			// remembered as the call's result.
			tc.m.IdempotencyKey = "k-" + tc.name
			for range 2 {
				if _, err := orch.SpaceSend(ctx, tc.m); CodeOf(err) != CodeBadArgument {
					t.Fatalf("under a key: %v", err)
				}
			}
		})
	}
	if gs, _ := orch.spaces.eng.Grants("build"); len(gs) != 1 {
		t.Fatalf("grants after the refusals: %+v", gs)
	}
	// The way out the revoke's refusal names: a plain envelope of the
	// kind is sent as given, for the members to judge (a revoke this
	// node applied already, whose copies did not all arrive).
	plain := SpaceMessage{Space: "build", Kind: meup.KindCapabilityRevoke, Payload: json.RawMessage(`{"recipient":"prop","grant_id":"nonexistent"}`), SendOptions: reliable}
	if s, err := orch.SpaceSend(ctx, plain); err != nil || !strings.Contains(s.NotApplied, "no live grant") || len(s.Copies) == 0 {
		t.Fatalf("a plain revoke envelope: %+v, %v; want it sent, with not_applied", s, err)
	}
	if ps, _ := AllProposals(ctx, orch, ProposalQuery{Space: "build", State: space.ProposalPending}); len(ps) != 1 {
		t.Fatalf("pending proposals after the refusals: %+v", ps)
	}

	// A grant beyond what prop holds here may pass where prop's roster
	// entry says more: sent, with not_applied.
	if s, err := prop.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActGrant, Recipient: "orch", Capabilities: json.RawMessage(`[{"kind":"space/kick"}]`), SendOptions: reliable}); err != nil || !strings.Contains(s.NotApplied, meup.ReasonGrantExceeds) || len(s.Copies) != 1 || s.Copies[0].Delivery != DeliveryAcked {
		t.Fatalf("a grant beyond what prop holds: %+v, %v", s, err)
	}
	// A plain send goes out as given, and says what rule it breaks here.
	raw, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Kind: meup.KindCapabilityRevoke, Payload: json.RawMessage(`{"recipient":"prop","grant_id":"nonexistent"}`), SendOptions: reliable})
	if err != nil || !strings.Contains(raw.NotApplied, `holds no live grant "nonexistent"`) || len(raw.Copies) != 1 || raw.Copies[0].Delivery != DeliveryAcked {
		t.Fatalf("a plain send of the revoke: %+v, %v", raw, err)
	}
	if want := "members whose rosters agree refuse it and answer with a system/error"; raw.NotAppliedEffect() != want {
		t.Fatalf("effect of a plain revoke breaking a rule: %q, want %q", raw.NotAppliedEffect(), want)
	}
	// A payload over the MEUP limit is too large, as a body is, not a bad
	// argument.
	huge := json.RawMessage(`{"blob":"` + strings.Repeat("A", meup.MaxPayloadBytes) + `"}`)
	if _, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Kind: "chat", Payload: huge, SendOptions: reliable}); CodeOf(err) != CodeBodyTooLarge || !strings.Contains(err.Error(), "262144") {
		t.Fatalf("a payload over the limit: %v (%s), want %s naming the limit", err, CodeOf(err), CodeBodyTooLarge)
	}
	// A reserved system kind: every member refuses it, and none answers.
	sys, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Kind: "system/foo", Payload: json.RawMessage(`{}`), SendOptions: reliable})
	if err != nil || !strings.HasPrefix(sys.NotApplied, meup.ReasonReservedKind+":") {
		t.Fatalf("a reserved system kind: %+v, %v", sys, err)
	}
	if want := "every member refuses it, and none answers a system/* envelope"; sys.NotAppliedEffect() != want {
		t.Fatalf("effect of a reserved kind: %q, want %q", sys.NotAppliedEffect(), want)
	}
	if (SpaceSent{}).NotAppliedEffect() != "" {
		t.Fatal("an applied send has an effect of not being applied")
	}
	// A revoke of the live grant is sent and applied.
	if s, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActRevoke, Recipient: "prop", GrantID: g.ID, SendOptions: reliable}); err != nil || s.NotApplied != "" {
		t.Fatalf("revoke of the live grant: %+v, %v", s, err)
	}
	if gs, _ := orch.spaces.eng.Grants("build"); len(gs) != 0 {
		t.Fatalf("grants after the revoke: %+v", gs)
	}
	// Capabilities written as kinds, as edit_space and rosters take them,
	// go out as capability objects, and a revoke takes them back.
	s, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActGrant, Recipient: "prop", Capabilities: json.RawMessage(`["mcp/request:tools/*", {"kind":"chat"}]`), SendOptions: reliable})
	if err != nil || s.NotApplied != "" || !strings.Contains(string(s.Envelope), `"capabilities":[{"kind":"mcp/request","payload":{"method":"tools/*"}},{"kind":"chat"}]`) {
		t.Fatalf("a grant of kinds written as strings: %+v (%s), %v", s, s.Envelope, err)
	}
	if s, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActRevoke, Recipient: "prop", Capabilities: json.RawMessage(`["chat"]`), SendOptions: reliable}); err != nil || s.NotApplied != "" {
		t.Fatalf("a revoke of a kind written as a string: %+v, %v", s, err)
	}
	if gs, _ := orch.spaces.eng.Grants("build"); len(gs) != 1 {
		t.Fatalf("grants after revoking chat: %+v, want the mcp/request one", gs)
	}
	if _, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActGrant, Recipient: "prop", Capabilities: json.RawMessage(`["/(/"]`), SendOptions: reliable}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("a grant of a bad pattern: %v, want %s", err, CodeBadArgument)
	}
}

// An envelope the engine refuses is acknowledged (Push succeeds, so the
// Router acks it) and stored nowhere.
func TestRefusedMEUPIsAckedNotStored(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": "chat"}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	kind := func(env string) wire.Kind {
		v, err := wire.ParseJSON([]byte(env))
		if err != nil {
			t.Fatal(err)
		}
		m, err := wire.Map(wire.Member{Key: "type", Value: wire.Text(wire.TypeMEUP)}, wire.Member{Key: "space", Value: wire.Text("build")}, wire.Member{Key: "envelope", Value: v})
		if err != nil {
			t.Fatal(err)
		}
		k, err := wire.NewKind(m)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	push := func(env string) error {
		e, err := wire.Seal(prop.h.Key, identity.NewUUID(), orch.h.Key.ID(), kind(env))
		if err != nil {
			t.Fatal(err)
		}
		return orch.inbox.Push(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "prop"})
	}
	for _, env := range []string{
		`{"protocol":"meup/v0.1","id":"r1","from":"prop","kind":"mcp/request","payload":{"method":"tools/call"}}`, // capability
		`{"protocol":"meup/v0.1","id":"r2","from":"orch","kind":"chat","payload":{"text":"forged"}}`,              // from
		`{"protocol":"meup/v9","id":"r3","from":"prop","kind":"chat","payload":{"text":"x"}}`,                     // protocol
	} {
		if err := push(env); err != nil {
			t.Fatalf("refused envelope not acknowledged: %v", err)
		}
	}
	if m := fromPeers(t, orch); len(m) != 0 { // the node's own notices aside
		t.Fatalf("refused envelopes stored: %+v", m)
	}
	if err := push(`{"protocol":"meup/v0.1","id":"ok","from":"prop","kind":"chat","payload":{"text":"fine"}}`); err != nil {
		t.Fatal(err)
	}
	if m := fromPeers(t, orch); len(m) != 1 {
		t.Fatalf("an allowed envelope: %d items", len(m))
	}
	// A node that runs no spaces refuses (does not acknowledge) MEUP.
	rec := newRecordingInbox(orch.mail)
	e, _ := wire.Seal(prop.h.Key, identity.NewUUID(), orch.h.Key.ID(), kind(`{"protocol":"meup/v0.1","id":"x","from":"prop","kind":"chat","payload":{"text":"x"}}`))
	if err := rec.Push(comms.Item{Type: comms.ItemExternal, Envelope: e}); !errors.Is(err, errNoSpaces) {
		t.Fatalf("no spaces: %v", err)
	}
}

// A member that closes the connection on MEUP envelopes three times in a
// row is marked: its attempt becomes permanent (a dead letter, not hours
// of retries) and later sends skip it. Other failures and successes
// between them do not count.
func TestNoMEUPLearning(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "rust": `[{"kind": "*"}]`}, "orch", "rust")
	orch, rust := nodes["orch"], nodes["rust"]
	peer := rust.h.Key.ID()
	closed := &comms.PeerOfflineError{Peer: "rust", Reason: comms.OfflineClosed}
	timeout := &comms.PeerOfflineError{Peer: "rust", Reason: comms.OfflineTimeout}
	s := orch.spaces
	// The joins of the setup may have met a node that did not trust the
	// other yet (closed, as a node that does not speak MEUP would): let
	// them all be delivered, then start from a clean count, with any mark
	// cleared by a MEUP envelope from rust.
	waitFor(t, 10*time.Second, "the setup's joins to be delivered", func() bool { return orch.ob.Len() == 0 && rust.ob.Len() == 0 })
	if _, err := rust.SpaceSend(context.Background(), SpaceMessage{Space: "build", Action: ActChat, Text: "I speak MEUP"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "rust's chat", func() bool { return len(meupItems(t, orch, meup.KindChat)) == 1 })
	s.mu.Lock()
	clear(s.closes)
	s.mu.Unlock()
	for i, step := range []struct {
		err       error
		permanent bool
	}{
		{closed, false}, {closed, false}, {nil, false}, // a success resets the count
		{closed, false}, {timeout, false}, {closed, false}, {closed, true}, {closed, true},
	} {
		err := s.attempted(peer, step.err)
		if got := errors.Is(err, outbox.ErrPermanent); got != step.permanent {
			t.Fatalf("step %d: %v, permanent %v, want %v", i, err, got, step.permanent)
		}
		if step.err == nil && err != nil {
			t.Fatalf("step %d: a success became %v", i, err)
		}
	}
	sp, _ := orch.Spaces(context.Background())
	var st string
	for _, m := range sp[0].Members {
		if m.ID == "rust" {
			st = m.Status
		}
	}
	if st != space.StatusNoMEUP {
		t.Fatalf("status %q, want %s", st, space.StatusNoMEUP)
	}
	sent, err := orch.SpaceSend(context.Background(), SpaceMessage{Space: "build", Action: ActChat, Text: "hi"})
	if err != nil || len(sent.Copies) != 1 || sent.Copies[0].Skipped == "" || sent.Copies[0].ID != "" {
		t.Fatalf("a send to a no_meup member: %+v, %v", sent, err)
	}
}

// meupItem seals MEUP envelope env in space "build" from one node to
// another, as the Router would hand it to the inbox.
func meupItemFrom(t *testing.T, from, to *Node, env string) comms.Item {
	t.Helper()
	v, err := wire.ParseJSON([]byte(env))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.Map(wire.Member{Key: "type", Value: wire.Text(wire.TypeMEUP)}, wire.Member{Key: "space", Value: wire.Text("build")}, wire.Member{Key: "envelope", Value: v})
	if err != nil {
		t.Fatal(err)
	}
	k, err := wire.NewKind(m)
	if err != nil {
		t.Fatal(err)
	}
	e, err := wire.Seal(from.h.Key, identity.NewUUID(), to.h.Key.ID(), k)
	if err != nil {
		t.Fatal(err)
	}
	return comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: from.h.Config.Name}
}

// fullOnce is a mailbox whose first Push fails as a full inbox does.
type fullOnce struct {
	mailStore
	failed bool
}

func (f *fullOnce) Push(it comms.Item) error {
	if !f.failed {
		f.failed = true
		return inbox.ErrFull
	}
	return f.mailStore.Push(it)
}

// A MEUP envelope applied by the engine but refused by a full inbox is
// not acknowledged; the sender's outbox sends the same copy again, and
// that copy is stored, not refused because its proposal (or grant) id
// is now in use.
func TestMEUPResentAfterInboxFull(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": ["chat", "mcp/proposal"]}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	rec := newRecordingInbox(&fullOnce{mailStore: orch.mail})
	rec.meup = orch.spaces.admit
	it := meupItemFrom(t, prop, orch, `{"protocol":"meup/v0.1","id":"p1","from":"prop","kind":"mcp/proposal","payload":{"method":"tools/call"}}`)
	if err := rec.Push(it); !errors.Is(err, inbox.ErrFull) {
		t.Fatalf("first push: %v, want the inbox full", err)
	}
	if err := rec.Push(it); err != nil {
		t.Fatalf("the resend: %v", err)
	}
	if items := meupItems(t, orch, meup.KindMCPProposal); len(items) != 1 || items[0].MEUP.ID != "p1" {
		t.Fatalf("proposals in the inbox: %+v", items)
	}
	ps, err := AllProposals(context.Background(), orch, ProposalQuery{Space: "build"})
	if err != nil || len(ps) != 1 || ps[0].State != space.ProposalPending {
		t.Fatalf("proposals %+v, %v", ps, err)
	}
}

// A member removed from a space and added again, or a space deleted and
// created again, starts without the grants of before.
func TestSpaceRemoveDropsGrants(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": "chat"}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()
	grant := func() {
		t.Helper()
		s, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActGrant, Recipient: "prop", Capabilities: json.RawMessage(`[{"kind":"mcp/request"}]`)})
		if err != nil || s.NotApplied != "" {
			t.Fatalf("grant: %+v, %v", s, err)
		}
	}
	grants := func() []space.Grant {
		t.Helper()
		gs, err := orch.spaces.eng.Grants("build")
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	edit := func(e SpaceEdit) {
		t.Helper()
		if _, err := orch.SpaceEdit(ctx, e); err != nil {
			t.Fatalf("%s: %v", e.Op, err)
		}
	}
	grant()
	if gs := grants(); len(gs) != 1 {
		t.Fatalf("grants %+v", gs)
	}
	edit(SpaceEdit{Op: SpaceRemove, Space: "build", ID: "prop"})
	edit(SpaceEdit{Op: SpaceAdd, Space: "build", Peer: prop.h.Key.ID().String(), ID: "prop", Capabilities: json.RawMessage(`[{"kind":"chat"}]`)})
	if gs := grants(); len(gs) != 0 {
		t.Fatalf("grants after prop was removed and added again: %+v", gs)
	}

	grant()
	edit(SpaceEdit{Op: SpaceDelete, Space: "build"})
	edit(SpaceEdit{Op: SpaceCreate, Space: "build", As: "orch"})
	edit(SpaceEdit{Op: SpaceAdd, Space: "build", Peer: prop.h.Key.ID().String(), ID: "prop", Capabilities: json.RawMessage(`[{"kind":"chat"}]`)})
	if gs := grants(); len(gs) != 0 {
		t.Fatalf("grants after the space was deleted and created again: %+v", gs)
	}
}

// A spaces file that goes away while the node runs (moved away and back,
// an editor's rename) changes nothing: the rosters stay in force and no
// grant is dropped; the next change writes the file again.
func TestSpacesFileGoneKeepsRostersAndGrants(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": "chat"}]`}, "orch", "prop")
	orch := nodes["orch"]
	ctx := context.Background()
	if s, err := orch.SpaceSend(ctx, SpaceMessage{Space: "build", Action: ActGrant, Recipient: "prop", Capabilities: json.RawMessage(`[{"kind":"mcp/request"}]`)}); err != nil || s.NotApplied != "" {
		t.Fatalf("grant: %+v, %v", s, err)
	}
	path := orch.h.SpacesPath()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	orch.spaces.reload() // as the watcher does when it sees the file gone
	if gs, err := orch.spaces.eng.Grants("build"); err != nil || len(gs) != 1 {
		t.Fatalf("grants after the file went away: %+v, %v", gs, err)
	}
	if gs, err := orch.spaces.st.Grants("build"); err != nil || len(gs) != 1 {
		t.Fatalf("stored grants after the file went away: %+v, %v", gs, err)
	}
	if _, err := orch.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: "other", As: "orch"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), `"other"`) || !strings.Contains(string(data), `"prop"`) {
		t.Fatalf("the file after the next change: %s (%v)", data, err)
	}
	if gs, err := orch.spaces.eng.Grants("build"); err != nil || len(gs) != 1 {
		t.Fatalf("grants after the file was written again: %+v, %v", gs, err)
	}
}

// A member removed, or a space deleted, without a daemon leaves nothing
// behind in the database: added again (or created again) before the next
// start, it starts without the grants it had, as it would had a daemon
// applied the edits.
func TestSpaceEditWithoutDaemonDropsGrants(t *testing.T) {
	h, _ := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreSQLite })
	ctx := context.Background()
	granted := func(n *Node, id string) []meup.Capability {
		t.Helper()
		list, err := n.Spaces(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			for _, m := range in.Members {
				if in.Name == "lab" && m.ID == id {
					return m.Granted
				}
			}
		}
		t.Fatalf("no member %q in lab", id)
		return nil
	}
	setUp := func() {
		d := startTest(t, h, ModeServe)
		if _, err := d.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: "lab", As: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.SpaceEdit(ctx, SpaceEdit{Op: SpaceAdd, Space: "lab", Peer: "bob", ID: "bob"}); err != nil {
			t.Fatal(err)
		}
		if g, err := d.SpaceSend(ctx, SpaceMessage{Space: "lab", Action: ActGrant, Recipient: "bob", Capabilities: json.RawMessage(`[{"kind":"mcp/request"}]`), SendOptions: reliable}); err != nil || g.NotApplied != "" {
			t.Fatalf("grant: %+v, %v", g, err)
		}
		if len(granted(d, "bob")) != 1 {
			t.Fatal("the grant is not live")
		}
		d.Close()
	}
	for _, tc := range []struct {
		name  string
		edits []SpaceEdit
	}{
		{"member removed and added again", []SpaceEdit{
			{Op: SpaceRemove, Space: "lab", ID: "bob"},
			{Op: SpaceAdd, Space: "lab", Peer: "bob", ID: "bob"},
		}},
		{"space deleted and created again", []SpaceEdit{
			{Op: SpaceDelete, Space: "lab"},
			{Op: SpaceCreate, Space: "lab", As: "alice"},
			{Op: SpaceAdd, Space: "lab", Peer: "bob", ID: "bob"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Remove(h.SpacesPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			setUp()
			o := startTest(t, h, ModeSend)
			for _, e := range tc.edits {
				if _, err := o.SpaceEdit(ctx, e); err != nil {
					t.Fatalf("%s: %v", e.Op, err)
				}
			}
			o.Close()
			d := startTest(t, h, ModeServe)
			if g := granted(d, "bob"); len(g) != 0 {
				t.Errorf("bob's grants came back: %+v", g)
			}
			d.Close()
		})
	}
	// A database that cannot drop them leaves the file as it was: the
	// edit fails whole, and can be made again once the database is back.
	t.Run("database unusable", func(t *testing.T) {
		before, err := os.ReadFile(h.SpacesPath())
		if err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(h.Dir, DBFileName)
		for _, f := range []string{db + "-wal", db + "-shm"} {
			os.Remove(f)
		}
		if err := os.Truncate(db, 0); err != nil { // as a copy cut short: refused on open
			t.Fatal(err)
		}
		o := startTest(t, h, ModeSend)
		if _, err := o.SpaceEdit(ctx, SpaceEdit{Op: SpaceRemove, Space: "lab", ID: "bob"}); err == nil || !strings.Contains(err.Error(), "spaces.json is not changed") {
			t.Fatalf("remove with an unusable database: %v", err)
		}
		if after, _ := os.ReadFile(h.SpacesPath()); string(after) != string(before) {
			t.Fatal("the file was changed by an edit that failed")
		}
	})
}

// TestSpaceEditsWithoutDaemonAtOnce: edits made at once without a daemon
// (each `meerkatd space add` its own send-only node reading, editing and
// saving the whole file) lose none of each other's members.
func TestSpaceEditsWithoutDaemonAtOnce(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	ctx := context.Background()
	first := startTest(t, h, ModeSend)
	if _, err := first.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: "par", As: "alice"}); err != nil {
		t.Fatal(err)
	}
	const editors = 8
	nodes := make([]*Node, editors)
	for i := range nodes {
		nodes[i] = startTest(t, h, ModeSend)
	}
	errs := make(chan error, editors)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			kp, err := identity.GenerateKeypair()
			if err == nil {
				_, err = n.SpaceEdit(ctx, SpaceEdit{Op: SpaceAdd, Space: "par", Peer: kp.ID().String(), ID: fmt.Sprintf("m%d", i)})
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	roster, err := space.LoadRoster(h.SpacesPath())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(roster)
	for i := range editors {
		if !strings.Contains(string(b), fmt.Sprintf(`"m%d"`, i)) {
			t.Errorf("member m%d lost from %s", i, b)
		}
	}
}
