package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/meup"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/space"
)

// fakeNode is an in-memory Node: sends to "bob" succeed, "ghost" is
// offline, anything else is unknown.
type fakeNode struct {
	cancelled chan struct{} // a Receive wait ended by its context
	pairCalls atomic.Int32  // PairOffer and PairAccept calls
	mu        sync.Mutex
	watching  bool   // the arrival watcher is long-polling
	watched   uint64 // the arrival watcher asked for items after this one
	msgs      []node.Message
	next      uint64
	changed   chan struct{}
	sent      []string
	params    []json.RawMessage
	opts      []node.SendOptions
	spaceMsgs []node.SpaceMessage // SpaceSend calls
	edits     []node.SpaceEdit    // SpaceEdit calls
	searches  []node.SearchQuery  // Search calls
	queries   []node.Query        // Receive calls
	acks      []node.AckRequest   // Ack calls
}

func newFakeNode() *fakeNode {
	return &fakeNode{next: 1, changed: make(chan struct{}), cancelled: make(chan struct{}, 16)}
}

func (f *fakeNode) Self(context.Context) (node.Self, error) {
	return node.Self{Name: "alice", PubKey: "ed25519:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", PeerUUID: "c2a81ee0-aba0-5e8e-a408-d61864a82361"}, nil
}

func (f *fakeNode) Status(ctx context.Context) (node.Status, error) {
	self, _ := f.Self(ctx)
	self.Home, self.Listen = "/tmp/alice", []string{"uds:///tmp/alice.sock"}
	started := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	next := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f.mu.Lock()
	inbox := len(f.msgs)
	f.mu.Unlock()
	return node.Status{Self: self, Running: true, StartedAt: &started, Peers: 1, Inbox: inbox, Pending: inbox,
		Accepted: 7, AcksSent: 6, Connections: 2, Rejected: map[string]uint64{"bad_signature": 1},
		Outbox: 1, DeadLetters: 1,
		SendPeers: []node.PeerSendState{{Peer: "ghost", PubKey: "ed25519:Aw==", Queued: 1, Breaker: "open", Failures: 3, OpenUntil: &next, LastError: "dial: refused"}},
	}, nil
}

func (f *fakeNode) DropDeadLetters(context.Context, []string, bool) (int, error) { return 0, nil }

func (f *fakeNode) PairWait(context.Context, string) (node.Paired, error) {
	return node.Paired{}, &node.Error{Code: node.CodePairPending, Msg: "the offer is still open"}
}

func (f *fakeNode) PairCancel(context.Context, string) (int, error) { return 0, nil }

func (f *fakeNode) AwaitResponses(context.Context, string, time.Duration, time.Time) (node.Sent, error) {
	return node.Sent{}, nil
}

var _ node.API = (*fakeNode)(nil)

func (f *fakeNode) Spaces(context.Context) ([]node.SpaceInfo, error) {
	return []node.SpaceInfo{{Name: "build", Self: "alice", Delivery: "all", Members: []space.MemberInfo{
		{ID: "alice", Key: "ed25519:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", Self: true, Status: "active", Presence: "online",
			Capabilities: []meup.Capability{{Kind: json.RawMessage(`"*"`)}}},
	}}}, nil
}

func (f *fakeNode) SpaceEdit(_ context.Context, e node.SpaceEdit) (node.SpaceInfo, error) {
	f.mu.Lock()
	f.edits = append(f.edits, e)
	f.mu.Unlock()
	if e.Op == node.SpaceAdd && e.Space != "build" {
		return node.SpaceInfo{}, &node.Error{Code: node.CodeUnknownSpace, Msg: "no space " + e.Space}
	}
	return node.SpaceInfo{Name: e.Space}, nil
}

func (f *fakeNode) SpaceSend(_ context.Context, m node.SpaceMessage) (node.SpaceSent, error) {
	f.mu.Lock()
	f.spaceMsgs = append(f.spaceMsgs, m)
	f.mu.Unlock()
	if m.Space != "build" {
		return node.SpaceSent{}, &node.Error{Code: node.CodeUnknownSpace, Msg: "no space " + m.Space}
	}
	return node.SpaceSent{Space: m.Space, ID: "m-1", Kind: "chat", Envelope: json.RawMessage(`{"protocol":"meup/v0.1","id":"m-1","from":"alice","kind":"chat","payload":{"text":"hi"}}`),
		Copies: []node.SpaceCopy{{Participant: "bob", Key: "ed25519:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=", ID: "0b9d6f6e-0000-4000-8000-000000000001", Delivery: node.DeliveryQueued}}}, nil
}

func (f *fakeNode) Proposals(_ context.Context, q node.ProposalQuery) (node.ProposalsPage, error) {
	return node.ProposalsPage{Proposals: []node.Proposal{{Space: "build", ID: "p-1", Proposer: "carol", Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"read_file"}}`), State: "pending"}}}, nil
}

func (f *fakeNode) Peers(context.Context) ([]node.Peer, error) {
	seen := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	return []node.Peer{
		{Name: "bob", PubKey: "ed25519:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=", Addr: "uds:///tmp/bob.sock", Meta: json.RawMessage(`{"team":"b"}`), LastSeen: &seen, Breaker: "closed",
			Card: &node.CardSummary{Name: "bob", Description: "reviews", Intents: []string{"review-pr"}, FetchedAt: seen}}, // slice E
		{Name: "ghost", PubKey: "ed25519:Aw==", Addr: "uds:///tmp/ghost.sock", Breaker: "open", Queued: 1, LastError: "dial: refused"},
	}, nil
}

func (f *fakeNode) peer(p string) error {
	switch p {
	case "bob":
		return nil
	case "ghost":
		return &node.Error{Code: node.CodePeerOffline, Msg: "peer ghost offline: no ack within the ack timeout"}
	}
	return &node.Error{Code: node.CodeUnknownPeer, Msg: fmt.Sprintf("no trusted peer %q", p)}
}

// queuedGhost is what a reliable send to the offline "ghost" returns.
func queuedGhost(id string) node.Sent {
	return node.Sent{ID: id, Peer: "ghost", Delivery: node.DeliveryQueued, LastError: "dial uds:///tmp/ghost.sock: no such file or directory"}
}

func (f *fakeNode) SendMessage(ctx context.Context, peer, body string, opts node.SendOptions) (node.Sent, error) {
	f.mu.Lock()
	f.opts = append(f.opts, opts)
	f.mu.Unlock()
	if peer == "ghost" && opts.Reliable {
		return queuedGhost("m-q"), nil
	}
	if peer == "slow" { // a peer that takes 300 ms to acknowledge
		select {
		case <-time.After(300 * time.Millisecond):
			return node.Sent{ID: "m-slow", Peer: peer, Delivery: "acked"}, nil
		case <-ctx.Done():
			return node.Sent{}, ctx.Err()
		}
	}
	if err := f.peer(peer); err != nil {
		return node.Sent{}, err
	}
	f.mu.Lock()
	f.sent = append(f.sent, body)
	f.mu.Unlock()
	return node.Sent{ID: "m-1", Peer: peer, Delivery: "acked"}, nil
}

func (f *fakeNode) SendRequest(_ context.Context, peer, intent string, params json.RawMessage, opts node.SendOptions) (node.Sent, error) {
	f.mu.Lock()
	f.opts = append(f.opts, opts)
	f.mu.Unlock()
	if peer == "ghost" && opts.Reliable {
		return queuedGhost("r-q"), nil
	}
	if err := f.peer(peer); err != nil {
		return node.Sent{}, err
	}
	f.mu.Lock()
	f.params = append(f.params, params)
	f.mu.Unlock()
	return node.Sent{ID: "r-1", Peer: peer, Delivery: "acked"}, nil
}

func (f *fakeNode) SendResponse(_ context.Context, peer, rid, status string, result json.RawMessage, opts node.SendOptions) (node.Sent, error) {
	f.mu.Lock()
	f.opts = append(f.opts, opts)
	f.mu.Unlock()
	if err := f.peer(peer); err != nil {
		return node.Sent{}, err
	}
	if rid != "req-known" {
		return node.Sent{}, &node.Error{Code: node.CodeUnknownRequest, Msg: "no request " + rid}
	}
	return node.Sent{ID: "s-1", Peer: peer, Delivery: "written"}, nil
}

func (f *fakeNode) lastOpts() node.SendOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opts[len(f.opts)-1]
}

func (f *fakeNode) Outbox(context.Context) (node.Outbox, error) {
	next := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return node.Outbox{
		Entries: []node.QueuedSend{{ID: "m-q", Peer: "ghost", PubKey: "ed25519:Aw==", Kind: "message", Attempts: 1, NextAttempt: &next, LastError: "dial: refused"}},
		Peers:   []node.PeerSendState{{Peer: "ghost", PubKey: "ed25519:Aw==", Queued: 1, Breaker: "open", Failures: 3, OpenUntil: &next, LastError: "dial: refused"}},
	}, nil
}

func (f *fakeNode) DeadLetters(context.Context) ([]node.DeadLetter, error) {
	return []node.DeadLetter{{ID: "d-1", Peer: "ghost", Kind: "request", Attempts: 2, Reason: "expired: last attempt: dial: refused"}}, nil
}

// DropQueued has send "q-1" queued and "q-2" in flight.
func (f *fakeNode) DropQueued(_ context.Context, ids []string) (node.Dropped, error) {
	d := node.Dropped{Dropped: []string{}, NotQueued: []string{}, InFlight: []string{}, Stored: []string{}}
	for _, id := range ids {
		switch id {
		case "q-1":
			d.Dropped = append(d.Dropped, id)
		case "q-2":
			d.InFlight = append(d.InFlight, id)
		default:
			d.NotQueued = append(d.NotQueued, id)
		}
	}
	return d, nil
}

// RetryOutbox has one send queued for "ghost" and none elsewhere.
func (f *fakeNode) RetryOutbox(_ context.Context, peer string) (int, error) {
	switch peer {
	case "", "ghost":
		return 1, nil
	case "nobody":
		return 0, &node.Error{Code: node.CodeUnknownPeer, Msg: "no trusted peer \"nobody\""}
	}
	return 0, nil
}

func (f *fakeNode) RetryDeadLetters(_ context.Context, ids []string, all bool) (int, error) {
	if all {
		return 1, nil
	}
	if slices.Contains(ids, "d-1") { // as the node: one dead letter, requeued once however often named
		return 1, nil
	}
	return 0, nil
}

func (f *fakeNode) PairOffer(context.Context, node.PairOptions) (node.PairOffer, error) {
	f.pairCalls.Add(1)
	return node.PairOffer{Line: "meerkat-pair/1 AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GA uds:///tmp/a.sock", Expires: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, nil
}

func (f *fakeNode) PairAccept(_ context.Context, line, name string) (node.Paired, error) {
	f.pairCalls.Add(1)
	if !strings.HasPrefix(line, "meerkat-pair/1 ") {
		return node.Paired{}, &node.Error{Code: node.CodePairFailed, Msg: "not a pairing line"}
	}
	if name == "" {
		name = "alice"
	}
	return node.Paired{Name: name, PubKey: "ed25519:x", Addr: "uds:///tmp/a.sock"}, nil
}

func (f *fakeNode) deliver(m node.Message) {
	f.mu.Lock()
	m.Seq = f.next
	f.next++
	f.msgs = append(f.msgs, m)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// waitWatcher waits until the server's arrival watcher has asked for items
// after seq: it has sent whatever it sends for seq. (The watcher is the
// caller waiting watchWait; the tests' own calls wait less.)
func (f *fakeNode) waitWatcher(t *testing.T, seq uint64) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.watching && f.watched >= seq
	})
}

func (f *fakeNode) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	if q.Wait == watchWait {
		f.watching = true
		f.watched = max(f.watched, q.After)
	}
	f.mu.Unlock()
	var deadline <-chan time.Time
	if q.Wait > 0 {
		t := time.NewTimer(q.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		f.mu.Lock()
		b := node.Batch{Cursor: q.After, Pending: len(f.msgs)}
		for _, m := range f.msgs {
			switch {
			case m.Seq <= q.After:
			case q.Limit == 0 || len(b.Messages) < q.Limit:
				b.Messages = append(b.Messages, m)
				b.Cursor = m.Seq
			default:
				b.More = true
			}
		}
		changed := f.changed
		f.mu.Unlock()
		if len(b.Messages) > 0 || q.Wait == 0 {
			return b, nil
		}
		select {
		case <-changed:
		case <-deadline:
			b.TimedOut = true
			return b, nil
		case <-ctx.Done():
			select {
			case f.cancelled <- struct{}{}:
			default: // nobody counts past the buffer
			}
			return node.Batch{}, ctx.Err()
		}
	}
}

func (f *fakeNode) Ack(_ context.Context, a node.AckRequest) (node.Acked, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, a)
	ids, upTo := a.IDs, a.UpTo
	drop := map[string]bool{}
	for _, id := range ids {
		drop[id] = true
	}
	kept := f.msgs[:0]
	for _, m := range f.msgs {
		if !drop[m.ID] && m.Seq > upTo {
			kept = append(kept, m)
		}
	}
	var notFound []string
	for _, id := range ids {
		if !slices.ContainsFunc(f.msgs, func(m node.Message) bool { return m.ID == id }) {
			notFound = append(notFound, id) // as a node lists ids of no pending item
		}
	}
	n := len(f.msgs) - len(kept)
	f.msgs = kept
	r := node.Acked{Acked: n, Pending: len(kept), NotFound: notFound}
	if n == 0 && upTo > 0 {
		r.Above = len(kept) // as a node counts what reads returned above up_to
	}
	return r, nil
}

// The protocol revisions the tests run in: the last one with the
// initialize handshake, and the stateless one (era.go).
const (
	legacyEra = mcp.LATEST_LEGACY_PROTOCOL_VERSION // 2025-11-25
	modernEra = mcp.ProtocolVersion20260728
)

// bothEras runs test once per protocol era.
func bothEras(t *testing.T, test func(t *testing.T, era string)) {
	for _, era := range []string{legacyEra, modernEra} {
		t.Run(era, func(t *testing.T) { test(t, era) })
	}
}

// startClient connects mcp-go's in-process client to a server over node,
// speaking era: initialize for legacyEra, server/discover for modernEra.
func startClient(t *testing.T, api node.API, era string) (*client.Client, *notes) {
	t.Helper()
	return startClientWith(t, api, era, Options{})
}

// startClientWith is startClient with a server built with opts.
func startClientWith(t *testing.T, api node.API, era string, opts Options) (*client.Client, *notes) {
	t.Helper()
	s := New(api, opts)
	c, err := client.NewInProcessClient(s.MCP())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &notes{}
	c.OnNotification(n.add)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = era
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	res, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtocolVersion != era {
		t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, era)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WatchArrivals(ctx)
	}()
	if f, ok := api.(*fakeNode); ok {
		// The watcher skips what is already there when it starts: let it
		// start before the test delivers anything.
		f.waitWatcher(t, 0)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		c.Close()
	})
	return c, n
}

// notes records the notifications a client receives, in order.
type notes struct {
	mu  sync.Mutex
	all []mcp.JSONRPCNotification
}

func (n *notes) add(m mcp.JSONRPCNotification) {
	n.mu.Lock()
	n.all = append(n.all, m)
	n.mu.Unlock()
}

// since returns the notifications with the given method received after the
// first from of them all.
func (n *notes) since(from int, method string) []mcp.JSONRPCNotification {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, x := range n.all[min(from, len(n.all)):] {
		if x.Method == method {
			out = append(out, x)
		}
	}
	return out
}

func (n *notes) mark() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.all)
}

func (n *notes) count(method string) int { return len(n.since(0, method)) }

// waitNote waits up to 10 s for a notification with method after from
// that satisfies ok, and returns it.
func (n *notes) wait(t *testing.T, from int, method string, ok func(mcp.JSONRPCNotification) bool) mcp.JSONRPCNotification {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, x := range n.since(from, method) {
			if ok == nil || ok(x) {
				return x
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s notification after #%d", method, from)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func call(t *testing.T, c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, map[string]any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var structured map[string]any
	if !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &structured)
	}
	return res, structured, nil
}

// wantBadArgument calls tool with args its handler refuses and wants
// the tool error the model sees, bad_argument, not a protocol error.
func wantBadArgument(t *testing.T, c *client.Client, tool string, args map[string]any) {
	t.Helper()
	res, _, err := call(t, c, tool, args)
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), node.CodeBadArgument+": ") {
		t.Errorf("%s %v: %v, %v; want a bad_argument tool error", tool, args, err, res)
	}
}

func text(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestToolList(t *testing.T) { bothEras(t, testToolList) }

func testToolList(t *testing.T, era string) {
	c, _ := startClient(t, newFakeNode(), era)
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"status": true, "send_message": false, "send_request": false, "send_response": false, "list_peers": true, "receive_messages": true, "ack_messages": false,
		"list_outbox": true, "list_dead_letters": true, "retry_dead_letters": false, "retry_outbox": false, "drop_queued": false, "pair_offer": false, "pair_accept": false,
		"list_spaces": true, "list_proposals": true, "space_send": false, "space_chat": false, "space_propose": false, "space_fulfill": false,
		"space_respond": false, "space_reject": false, "space_withdraw": false, "space_grant": false, "space_revoke": false, "edit_space": false,
		"message_status": true, "search_messages": true,
		"broadcast": false, "task_complete": false, "list_tasks": true, "wait_task": true,
		"describe_peer":  true,
		"cancel_request": false, "list_requests": true}
	if len(res.Tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(res.Tools), len(want))
	}
	for _, tool := range res.Tools {
		ro, ok := want[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %q", tool.Name)
			continue
		}
		if tool.OutputSchema.Type != "object" || len(tool.OutputSchema.Properties) == 0 {
			t.Errorf("%s has no output schema", tool.Name)
		}
		if _, ok := tool.OutputSchema.Properties["pending"]; !ok && tool.Name != "receive_messages" {
			t.Errorf("%s output lacks pending", tool.Name)
		}
		if tool.Name == "list_peers" {
			// A peer's meta is any JSON value, not the byte array a
			// json.RawMessage would be described as.
			items, _ := tool.OutputSchema.Properties["peers"].(map[string]any)["items"].(map[string]any)
			props, _ := items["properties"].(map[string]any)
			if m, ok := props["meta"].(map[string]any); !ok || len(m) != 0 {
				t.Errorf("list_peers: peers' meta schema %v, want {} (any JSON value)", props["meta"])
			}
		}
		// The 1.x TypeScript SDK rejects tools/list when a property of an
		// outputSchema is not a JSON object (the boolean schema true, say).
		for p, v := range tool.OutputSchema.Properties {
			if _, ok := v.(map[string]any); !ok {
				t.Errorf("%s: outputSchema property %q is %T, want a JSON object schema", tool.Name, p, v)
			}
		}
		a := tool.Annotations
		if a.ReadOnlyHint == nil || *a.ReadOnlyHint != ro {
			t.Errorf("%s readOnlyHint %v, want %v", tool.Name, a.ReadOnlyHint, ro)
		}
	}
}

func TestSendAndErrors(t *testing.T) { bothEras(t, testSendAndErrors) }

func testSendAndErrors(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	res, out, err := call(t, c, "send_message", map[string]any{"peer": "bob", "body": "hi"})
	if err != nil || res.IsError {
		t.Fatalf("send_message: %v %s", err, text(res))
	}
	if out["id"] != "m-1" || out["delivery"] != "acked" || out["pending"] != float64(0) {
		t.Fatalf("structured result %v", out)
	}
	if !strings.Contains(text(res), `"id":"m-1"`) {
		t.Fatalf("text fallback %q", text(res))
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		code string
	}{
		{"send_message", map[string]any{"peer": "carol", "body": "hi"}, node.CodeUnknownPeer},
		{"send_message", map[string]any{"peer": "ghost", "body": "hi", "reliable": false}, node.CodePeerOffline},
		{"send_request", map[string]any{"peer": "carol", "intent": "x"}, node.CodeUnknownPeer},
		{"send_response", map[string]any{"peer": "bob", "request_id": "nope", "status": "completed"}, node.CodeUnknownRequest},
	} {
		res, _, err := call(t, c, tc.tool, tc.args)
		if err != nil {
			t.Fatalf("%s %v: protocol error %v, want a tool error", tc.tool, tc.args, err)
		}
		if !res.IsError || !strings.HasPrefix(text(res), tc.code+": ") {
			t.Errorf("%s %v: isError %v text %q, want code %s", tc.tool, tc.args, res.IsError, text(res), tc.code)
		}
		if !strings.HasSuffix(text(res), "(pending: 0)") {
			t.Errorf("%s %v: error text %q does not carry pending", tc.tool, tc.args, text(res))
		}
	}
	// Malformed calls are protocol errors (invalid params), not tool results.
	for _, bad := range []struct {
		tool string
		args map[string]any
	}{
		{"send_message", map[string]any{"body": "no peer"}},
		{"send_message", map[string]any{"peer": 7, "body": "x"}},
		{"receive_messages", map[string]any{"wait_ms": 99999}},
		{"ack_messages", map[string]any{}},
	} {
		wantBadArgument(t, c, bad.tool, bad.args)
	}
}

func TestReceiveWaitAndAck(t *testing.T) { bothEras(t, testReceiveWaitAndAck) }

func testReceiveWaitAndAck(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	// An empty wait times out.
	_, out, err := call(t, c, "receive_messages", map[string]any{"wait_ms": 50})
	if err != nil || out["timed_out"] != true {
		t.Fatalf("empty wait: %v %v", out, err)
	}
	// A wait wakes on arrival, and other tools keep working meanwhile.
	got := make(chan map[string]any, 1)
	go func() {
		_, out, _ := call(t, c, "receive_messages", map[string]any{"wait_ms": 20000})
		got <- out
	}()
	if _, _, err := call(t, c, "list_peers", nil); err != nil {
		t.Fatalf("list_peers during a wait: %v", err)
	}
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "hello"})
	select {
	case out := <-got:
		msgs, _ := out["messages"].([]any)
		if len(msgs) != 1 || out["timed_out"] != false {
			t.Fatalf("woken receive: %v", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("receive_messages did not wake on arrival")
	}
	_, out, err = call(t, c, "ack_messages", map[string]any{"ids": []any{"x1"}})
	if err != nil || out["acked"] != float64(1) || out["pending"] != float64(0) {
		t.Fatalf("ack: %v %v", out, err)
	}
}

const (
	updated = "notifications/resources/updated"
	logged  = "notifications/message"
	acked   = "notifications/subscriptions/acknowledged"
)

// Clients of the 2025 revisions get notifications/resources/updated for
// meerkat://inbox while subscribed to it (on each arrival and
// acknowledgement), and a log event for every arrival.
func TestLegacyNotifications(t *testing.T) {
	f := newFakeNode()
	c, n := startClient(t, f, legacyEra)
	ctx := context.Background()
	isLog := func(id string) func(mcp.JSONRPCNotification) bool {
		return func(x mcp.JSONRPCNotification) bool {
			data, _ := x.Params.AdditionalFields["data"].(map[string]any)
			return data["id"] == id
		}
	}
	// One pass of the arrival watcher sends the update before the log
	// event: once the log event is in, an update would be too.
	from := n.mark()
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "secret body"})
	ev := n.wait(t, from, logged, isLog("x1"))
	b, _ := json.Marshal(ev.Params)
	if data := ev.Params.AdditionalFields["data"].(map[string]any); data["kind"] != "message" || data["peer"] != "bob" || data["event"] != "arrival" || ev.Params.AdditionalFields["level"] != "info" {
		t.Errorf("log event %s", b)
	}
	if strings.Contains(string(b), "secret") {
		t.Errorf("the log event carries the body: %s", b)
	}
	if u := n.since(from, updated); len(u) != 0 {
		t.Fatalf("updates without a subscription: %v", u)
	}

	var sub mcp.SubscribeRequest
	sub.Params.URI = InboxURI
	//lint:ignore SA1019 the 2025 revisions subscribe with resources/subscribe, what this test exercises
	if err := c.Subscribe(ctx, sub); err != nil {
		t.Fatal(err)
	}
	from = n.mark()
	f.deliver(node.Message{ID: "x2", Kind: "request", Peer: "bob", Intent: "add"})
	n.wait(t, from, logged, isLog("x2"))
	if u := n.since(from, updated); len(u) != 1 || u[0].Params.AdditionalFields["uri"] != InboxURI || u[0].Params.Meta != nil {
		t.Fatalf("updates on an arrival while subscribed: %+v", u)
	}
	from = n.mark()
	if _, _, err := call(t, c, "ack_messages", map[string]any{"ids": []any{"x1"}}); err != nil {
		t.Fatal(err)
	}
	n.wait(t, from, updated, nil)
	// Acknowledged elsewhere (another session, the CLI): seen by the
	// watcher's next poll, when the pending count changed. The mark comes
	// first: that poll may end as soon as the item is gone.
	from = n.mark()
	f.mu.Lock()
	before := len(f.msgs)
	f.msgs = slices.DeleteFunc(f.msgs, func(m node.Message) bool { return m.ID == "x2" })
	acked := len(f.msgs) < before
	f.mu.Unlock()
	if !acked {
		t.Fatal("x2 is not in the fake's inbox")
	}
	n.wait(t, from, updated, nil)

	var unsub mcp.UnsubscribeRequest
	unsub.Params.URI = InboxURI
	//lint:ignore SA1019 the 2025 revisions unsubscribe with resources/unsubscribe, what this test exercises
	if err := c.Unsubscribe(ctx, unsub); err != nil {
		t.Fatal(err)
	}
	from = n.mark()
	f.deliver(node.Message{ID: "x3", Kind: "message", Peer: "bob", Body: "x"})
	n.wait(t, from, logged, isLog("x3"))
	if u := n.since(from, updated); len(u) != 0 {
		t.Fatalf("updates after unsubscribing: %v", u)
	}
	if c.Listen(ctx, mcp.SubscriptionFilter{ResourceSubscriptions: []string{InboxURI}}) == nil {
		t.Error("subscriptions/listen worked on a 2025 connection")
	}
}

// Clients of 2026-07-28 get nothing unsolicited: an update for
// meerkat://inbox only on a subscriptions/listen stream that asked for it,
// tagged with the stream's id, and never a log event.
func TestModernListen(t *testing.T) {
	f := newFakeNode()
	c, n := startClient(t, f, modernEra)
	ctx := context.Background()
	listen := func() (id any, stop func()) {
		t.Helper()
		from := n.mark()
		stop, err := c.ListenAsync(ctx, mcp.SubscriptionFilter{ResourceSubscriptions: []string{"meerkat://nope", PeersURI, InboxURI}, ToolsListChanged: true}, func(err error) { t.Errorf("listen: %v", err) })
		if err != nil {
			t.Fatal(err)
		}
		ack := n.wait(t, from, acked, nil)
		b, _ := json.Marshal(ack.Params.AdditionalFields["notifications"])
		if string(b) != `{"resourceSubscriptions":["meerkat://inbox"]}` {
			t.Errorf("acknowledged %s, want meerkat://inbox only", b)
		}
		id = ack.Params.Meta[mcp.MetaKeySubscriptionID]
		if id == nil {
			t.Fatalf("acknowledgement without a subscription id: %+v", ack)
		}
		return id, stop
	}

	// Not listening: an arrival is announced to no one. Once the watcher
	// has moved past it, whatever it sent is queued before the next
	// listen's acknowledgement.
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "x"})
	f.waitWatcher(t, 1)
	from := n.mark()
	id, stop := listen()
	if u := n.since(from, updated); len(u) != 0 {
		t.Fatalf("updates before listening: %v", u)
	}

	from = n.mark()
	f.deliver(node.Message{ID: "x2", Kind: "message", Peer: "bob", Body: "x"})
	u := n.wait(t, from, updated, nil)
	if u.Params.AdditionalFields["uri"] != InboxURI || u.Params.Meta[mcp.MetaKeySubscriptionID] != id {
		t.Fatalf("update %+v, want meerkat://inbox tagged %v", u, id)
	}
	from = n.mark()
	if _, _, err := call(t, c, "ack_messages", map[string]any{"ids": []any{"x1"}}); err != nil {
		t.Fatal(err)
	}
	n.wait(t, from, updated, func(x mcp.JSONRPCNotification) bool { return x.Params.Meta[mcp.MetaKeySubscriptionID] == id })

	// Closed: no more updates (stop returns once the server ended the
	// stream).
	stop()
	from = n.mark()
	f.deliver(node.Message{ID: "x3", Kind: "message", Peer: "bob", Body: "x"})
	f.waitWatcher(t, 3)
	id2, stop2 := listen()
	defer stop2()
	if id2 == id {
		t.Errorf("two streams with id %v", id)
	}
	if u := n.since(from, updated); len(u) != 0 {
		t.Fatalf("updates after the stream closed: %v", u)
	}
	if l := n.count(logged); l != 0 {
		t.Errorf("%d log events sent to a 2026-07-28 client", l)
	}
	if caps := c.GetServerCapabilities(); caps.Logging != nil || caps.Resources == nil || !caps.Resources.Subscribe {
		t.Errorf("discovered capabilities %+v: want resource subscriptions, no logging", caps)
	}
}

// Cancelling a receive_messages call ends its wait on the node.
func TestReceiveHonoursCancellation(t *testing.T) { bothEras(t, testReceiveHonoursCancellation) }

func testReceiveHonoursCancellation(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	// Long enough for the call to reach the node on a loaded machine (the
	// in-process client passes the deadline, not a cancellation).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = "receive_messages"
	req.Params.Arguments = map[string]any{"wait_ms": 20000}
	if _, err := c.CallTool(ctx, req); err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	select {
	case <-f.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the node's wait was not cancelled")
	}
}

// Sends are reliable by default; reliable and ttl_seconds reach the node,
// and bad values are protocol errors (invalid params).
func TestSendOptions(t *testing.T) { bothEras(t, testSendOptions) }

func testSendOptions(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want node.SendOptions
	}{
		{"send_message", map[string]any{"peer": "bob", "body": "x"}, node.SendOptions{Reliable: true}},
		{"send_message", map[string]any{"peer": "bob", "body": "x", "reliable": false}, node.SendOptions{}},
		{"send_message", map[string]any{"peer": "bob", "body": "x", "ttl_seconds": 1.5}, node.SendOptions{Reliable: true, TTL: 1500 * time.Millisecond}},
		{"send_message", map[string]any{"peer": "bob", "body": "x", "reliable": true, "ttl_seconds": 0}, node.SendOptions{Reliable: true}},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "ttl_seconds": 60}, node.SendOptions{Reliable: true, TTL: time.Minute}},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "reliable": false}, node.SendOptions{}},
		{"send_response", map[string]any{"peer": "bob", "request_id": "req-known", "status": "completed"}, node.SendOptions{Reliable: true}},
		{"send_response", map[string]any{"peer": "bob", "request_id": "req-known", "status": "accepted", "ttl_seconds": 7}, node.SendOptions{Reliable: true, TTL: 7 * time.Second}},
	} {
		res, _, err := call(t, c, tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s %v: %v %s", tc.tool, tc.args, err, text(res))
		}
		if got := f.lastOpts(); got != tc.want {
			t.Errorf("%s %v: node got %+v, want %+v", tc.tool, tc.args, got, tc.want)
		}
	}
	for _, bad := range []map[string]any{
		{"peer": "bob", "body": "x", "ttl_seconds": -1},
		{"peer": "bob", "body": "x", "ttl_seconds": "60"},
		{"peer": "bob", "body": "x", "ttl_seconds": node.MaxTTL.Seconds() + 1},
		{"peer": "bob", "body": "x", "reliable": "yes"},
		{"peer": "bob", "body": "x", "reliable": false, "ttl_seconds": 5},
		{"peer": "bob", "body": "x", "task_id": ""}, // leave it out for none
	} {
		wantBadArgument(t, c, "send_message", bad)
		if err := checkArgs("send_message", bad); err == nil {
			t.Errorf("checkArgs send_message %v: want invalid params", bad)
		}
		bad["intent"] = "x"
		if err := checkArgs("send_request", bad); err == nil {
			t.Errorf("checkArgs send_request %v: want invalid params", bad)
		}
		bad["request_id"], bad["status"] = "req-known", "completed"
		if err := checkArgs("send_response", bad); err == nil {
			t.Errorf("checkArgs send_response %v: want invalid params", bad)
		}
	}
}

// A reliable send whose first attempt fails is a result, not an error: it
// says queued, why, and where to look.
func TestSendQueued(t *testing.T) { bothEras(t, testSendQueued) }

func testSendQueued(t *testing.T, era string) {
	c, _ := startClient(t, newFakeNode(), era)
	for _, tc := range []struct {
		tool string
		args map[string]any
		id   string
	}{
		{"send_message", map[string]any{"peer": "ghost", "body": "hi"}, "id"},
		{"send_request", map[string]any{"peer": "ghost", "intent": "x"}, "request_id"},
	} {
		res, out, err := call(t, c, tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s to an offline peer: %v %s", tc.tool, err, text(res))
		}
		if out["delivery"] != "queued" || out[tc.id] == "" || !strings.Contains(out["last_error"].(string), "no such file") {
			t.Errorf("%s: %v", tc.tool, out)
		}
		note, _ := out["note"].(string)
		for _, w := range []string{"retry", "list_outbox", "list_dead_letters"} {
			if !strings.Contains(note, w) {
				t.Errorf("%s: note %q does not mention %q", tc.tool, note, w)
			}
		}
	}
	// An acked send has neither.
	_, out, _ := call(t, c, "send_message", map[string]any{"peer": "bob", "body": "hi"})
	if _, ok := out["note"]; ok || out["last_error"] != nil {
		t.Errorf("acked send: %v", out)
	}
}

func TestOutboxTools(t *testing.T) { bothEras(t, testOutboxTools) }

func testOutboxTools(t *testing.T, era string) {
	c, _ := startClient(t, newFakeNode(), era)
	res, out, err := call(t, c, "list_outbox", nil)
	if err != nil || res.IsError {
		t.Fatalf("list_outbox: %v %s", err, text(res))
	}
	entries, _ := out["entries"].([]any)
	peers, _ := out["peers"].([]any)
	if len(entries) != 1 || len(peers) != 1 || out["pending"] != float64(0) {
		t.Fatalf("list_outbox: %v", out)
	}
	e := entries[0].(map[string]any)
	if e["id"] != "m-q" || e["attempts"] != float64(1) || e["expires"] != nil || e["next_attempt"] != "2030-01-02T03:04:05Z" {
		t.Errorf("entry %v", e)
	}
	if p := peers[0].(map[string]any); p["breaker"] != "open" || p["queued"] != float64(1) {
		t.Errorf("peer state %v", p)
	}
	_, out, err = call(t, c, "list_dead_letters", nil)
	dl, _ := out["dead_letters"].([]any)
	if err != nil || len(dl) != 1 || !strings.HasPrefix(dl[0].(map[string]any)["reason"].(string), "expired") {
		t.Fatalf("list_dead_letters: %v %v", out, err)
	}
	_, out, err = call(t, c, "retry_dead_letters", map[string]any{"ids": []any{"D-1", "nope"}})
	if err != nil || out["requeued"] != float64(1) || out["not_found"] != float64(1) {
		t.Fatalf("retry by ids: %v %v", out, err)
	}
	_, out, err = call(t, c, "retry_dead_letters", map[string]any{"ids": []any{"d-1", "D-1", "nope", "nope"}})
	if err != nil || out["requeued"] != float64(1) || out["not_found"] != float64(1) {
		t.Fatalf("retry by ids named twice: %v %v; want one requeued, one not found", out, err)
	}
	_, out, err = call(t, c, "retry_dead_letters", map[string]any{"all": true})
	if err != nil || out["requeued"] != float64(1) || out["not_found"] != float64(0) {
		t.Fatalf("retry all: %v %v", out, err)
	}
	for _, bad := range []map[string]any{{}, {"all": false}, {"all": true, "ids": []any{"d-1"}}, {"all": "yes"}, {"ids": "d-1"}} {
		wantBadArgument(t, c, "retry_dead_letters", bad)
	}
	_, out, err = call(t, c, "drop_queued", map[string]any{"ids": []any{"q-1", "q-2", "q-3"}})
	if err != nil || fmt.Sprint(out["dropped"]) != "[q-1]" || fmt.Sprint(out["in_flight"]) != "[q-2]" || fmt.Sprint(out["not_queued"]) != "[q-3]" {
		t.Fatalf("drop_queued: %v %v", out, err)
	}
	many := make([]any, node.MaxStatusIDs+1)
	for i := range many {
		many[i] = "q-1"
	}
	for _, bad := range []map[string]any{{}, {"ids": []any{}}, {"ids": "q-1"}, {"ids": []any{1}}, {"ids": many}} {
		wantBadArgument(t, c, "drop_queued", bad)
	}
	_, out, err = call(t, c, "retry_outbox", map[string]any{"peer": "ghost"})
	if err != nil || out["due"] != float64(1) {
		t.Fatalf("retry_outbox ghost: %v %v", out, err)
	}
	_, out, err = call(t, c, "retry_outbox", nil)
	if err != nil || out["due"] != float64(1) {
		t.Fatalf("retry_outbox for every peer: %v %v", out, err)
	}
	wantBadArgument(t, c, "retry_outbox", map[string]any{"peer": 7})
	wantBadArgument(t, c, "retry_outbox", map[string]any{"peer": ""})
	res, _, err = call(t, c, "retry_outbox", map[string]any{"peer": "nobody"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), node.CodeUnknownPeer+": ") {
		t.Errorf("retry_outbox nobody: %v %v", res, err)
	}
}

// retry_dead_letters names each dead letter once, so that not_found
// counts what was not found, not the repetitions.
func TestParseRetry(t *testing.T) {
	for _, tc := range []struct {
		args map[string]any
		ids  []string
		all  bool
		bad  bool
	}{
		{map[string]any{"ids": []any{"A", "b"}}, []string{"a", "b"}, false, false},
		{map[string]any{"ids": []any{"d-1", "D-1", "x", "d-1", "x"}}, []string{"d-1", "x"}, false, false},
		{map[string]any{"all": true}, nil, true, false},
		{map[string]any{"ids": []any{}}, nil, false, true},
		{map[string]any{"ids": []any{"a"}, "all": true}, nil, false, true},
	} {
		ids, all, err := parseRetry(args{tc.args})
		if (err != nil) != tc.bad || !tc.bad && (!reflect.DeepEqual(ids, tc.ids) || all != tc.all) {
			t.Errorf("%v: %v, %v, %v; want %v, %v (invalid %v)", tc.args, ids, all, err, tc.ids, tc.all, tc.bad)
		}
	}
}

func TestReadToolsAreTheAPI(t *testing.T) { bothEras(t, testReadToolsAreTheAPI) }

// testReadToolsAreTheAPI checks that the read-only tools show the node
// API's results field for field, as `meerkatd … --json` prints them: the
// structured content is the result's JSON plus pending (status and
// receive_messages carry pending in the result itself).
func testReadToolsAreTheAPI(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	f.deliver(node.Message{ID: "m-a", Kind: "message", From: "ed25519:x", Peer: "bob", Body: "one"})
	f.deliver(node.Message{ID: "r-a", Kind: "request", From: "ed25519:x", Peer: "bob", Intent: "add", Params: json.RawMessage(`{"a":1}`)})
	f.deliver(node.Message{ID: "m-b", Kind: "message", From: "ed25519:x", Peer: "bob", Body: "three"})
	ctx := context.Background()
	st, _ := f.Status(ctx)
	peers, _ := f.Peers(ctx)
	ob, _ := f.Outbox(ctx)
	batch, _ := f.Receive(ctx, node.Query{Limit: 2})
	if !batch.More || len(batch.Messages) != 2 {
		t.Fatalf("fake batch %+v: want two items and more", batch)
	}
	for _, tc := range []struct {
		tool    string
		args    map[string]any
		key     string // the part of the result to compare ("": all of it)
		want    any
		pending bool // the tool adds pending to the API's result
	}{
		{"status", nil, "", st, false},
		{"list_peers", nil, "peers", peers, true},
		{"list_outbox", nil, "", ob, true},
		{"receive_messages", map[string]any{"limit": 2}, "", batch, false},
	} {
		res, out, err := call(t, c, tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", tc.tool, err, text(res))
		}
		if _, ok := out["pending"]; !ok {
			t.Errorf("%s: no pending in %v", tc.tool, out)
		}
		var got any = out
		if tc.key != "" {
			got = out[tc.key]
		} else if tc.pending {
			delete(out, "pending")
		}
		var want any
		b, _ := json.Marshal(tc.want)
		json.Unmarshal(b, &want)
		if !reflect.DeepEqual(got, want) {
			gb, _ := json.Marshal(got)
			t.Errorf("%s: the tool's result is not the API's:\n got %s\nwant %s", tc.tool, gb, b)
		}
	}
}

func TestPairTools(t *testing.T) { bothEras(t, testPairTools) }

func testPairTools(t *testing.T, era string) {
	c, _ := startClient(t, newFakeNode(), era)
	_, out, err := call(t, c, "pair_offer", nil)
	if err != nil || !strings.HasPrefix(out["line"].(string), "meerkat-pair/1 ") || out["expires"] != "2030-01-01T00:00:00Z" {
		t.Fatalf("pair_offer: %v %v", out, err)
	}
	_, out, err = call(t, c, "pair_accept", map[string]any{"code_line": out["line"], "name": "al"})
	if p, _ := out["paired"].(map[string]any); err != nil || p["name"] != "al" || p["pubkey"] != "ed25519:x" {
		t.Fatalf("pair_accept: %v %v", out, err)
	}
	res, _, err := call(t, c, "pair_accept", map[string]any{"code_line": "hello"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), node.CodePairFailed) {
		t.Fatalf("bad line: %v %s", err, text(res))
	}
	for _, bad := range []map[string]any{{}, {"code_line": 3}, {"code_line": "x", "name": false}} {
		wantBadArgument(t, c, "pair_accept", bad)
	}
}

// The space tools' argument checks: the protocol's invalid params.
func TestSpaceArgsInvalid(t *testing.T) {
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"space_send", map[string]any{"space": "build"}},
		{"space_respond", map[string]any{"space": "build", "request_id": "r", "result": map[string]any{}, "error": map[string]any{"code": 1}}},
		{"space_respond", map[string]any{"space": "build", "request_id": "r"}},
		{"list_proposals", map[string]any{"state": "sleeping"}},
	} {
		if err := checkArgs(c.tool, c.args); err == nil {
			t.Errorf("checkArgs %s %v: want invalid params", c.tool, c.args)
		}
	}
	for _, state := range []string{"", "pending", "fulfilled", "rejected", "withdrawn", "expired"} {
		if err := checkArgs("list_proposals", map[string]any{"state": state}); err != nil {
			t.Errorf("checkArgs list_proposals state %q: %v", state, err)
		}
	}
}

// Tell implements node.API (the MCP server has no tool for it).
func (f *fakeNode) Tell(context.Context, string) (node.Told, error) {
	return node.Told{}, &node.Error{Code: node.CodeBadArgument, Msg: "not through MCP"}
}

// A tool error ends with the pending count when it is known, and leaves
// it out when it is not (the node is gone): never a pending: 0 that
// tells the model nothing waits.
func TestToolErrorPending(t *testing.T) {
	err := &node.Error{Code: node.CodeUnavailable, Msg: "the daemon is not running"}
	for _, tc := range []struct {
		pending int
		want    string
	}{
		{3, "unavailable: the daemon is not running (pending: 3)"},
		{0, "unavailable: the daemon is not running (pending: 0)"},
		{-1, "unavailable: the daemon is not running"},
	} {
		res := toolError(err, tc.pending)
		if !res.IsError || len(res.Content) != 1 {
			t.Fatalf("toolError(%d): %+v", tc.pending, res)
		}
		if got := res.Content[0].(mcp.TextContent).Text; got != tc.want {
			t.Errorf("toolError(%d) = %q, want %q", tc.pending, got, tc.want)
		}
	}
}

// An argument the tool does not take is refused, naming the ones it
// takes: a misspelt idempotency_key must not send without one. The
// schemas say so too (additionalProperties: false).
func TestUnknownArgumentRefused(t *testing.T) {
	f := newFakeNode()
	c, _ := startClientWith(t, f, legacyEra, Options{})
	res, _, err := call(t, c, "send_message", map[string]any{"peer": "bob", "body": "x", "idempotencyKey": "k"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), `bad_argument: unknown argument "idempotencyKey": send_message takes `) || !strings.Contains(text(res), "idempotency_key") {
		t.Fatalf("misspelt argument: %v, %s", err, text(res))
	}
	f.mu.Lock()
	sent := len(f.opts) // every SendMessage call
	f.mu.Unlock()
	if sent != 0 {
		t.Fatalf("the node was asked to send %d times", sent)
	}
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.InputSchema.AdditionalProperties != false {
			t.Errorf("%s: additionalProperties %v, want false", tool.Name, tool.InputSchema.AdditionalProperties)
		}
	}
}

// The integer arguments say so in their schemas, with the bounds the
// tools apply: a model learns them from tools/list, not from errors.
func TestIntegerArgumentSchemas(t *testing.T) {
	f := newFakeNode()
	c, _ := startClientWith(t, f, legacyEra, Options{})
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string][2]float64{
		{"receive_messages", "wait_ms"}: {0, float64(MaxWait / time.Millisecond)},
		{"receive_messages", "limit"}:   {1, 1000},
		{"wait_task", "wait_ms"}:        {0, float64(MaxWait / time.Millisecond)},
		{"list_tasks", "limit"}:         {1, node.MaxTasksListed},
		{"list_requests", "limit"}:      {1, node.MaxBatchItems},
	}
	for _, tool := range tools.Tools {
		for name, prop := range tool.InputSchema.Properties {
			bounds, ok := want[[2]string{tool.Name, name}]
			if !ok {
				continue
			}
			delete(want, [2]string{tool.Name, name})
			p, _ := prop.(map[string]any)
			if p["type"] != "integer" || p["minimum"] != bounds[0] || p["maximum"] != bounds[1] {
				t.Errorf("%s.%s: %v, want an integer from %v to %v", tool.Name, name, p, bounds[0], bounds[1])
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("arguments not found: %v", want)
	}
}

// Every argument of every tool says what it is: a model has nothing else
// to go by.
func TestEveryArgumentDescribed(t *testing.T) {
	f := newFakeNode()
	c, _ := startClientWith(t, f, legacyEra, Options{})
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		for name, prop := range tool.InputSchema.Properties {
			if p, _ := prop.(map[string]any); p["description"] == nil || p["description"] == "" {
				t.Errorf("%s.%s has no description", tool.Name, name)
			}
		}
	}
}
