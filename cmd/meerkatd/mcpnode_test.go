package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/mcpserver"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// mcpTestNode is a node (not listening) whose trust list holds peer "bob".
func mcpTestNode(t *testing.T) (*mcpNode, *identity.Keypair) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkm") // short: the control socket's path must fit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := initHome(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	bob, _ := identity.GenerateKeypair()
	l, err := trust.New(trust.Peer{Name: "bob", ID: bob.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/bob.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(filepath.Join(dir, trust.FileName)); err != nil {
		t.Fatal(err)
	}
	e := newEnv(io.Discard, io.Discard, mapEnv(nil))
	h, err := e.openHome(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNode(h, slog.New(slog.DiscardHandler), nodeSendOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return &mcpNode{n: n}, bob
}

// arrive pushes an envelope from bob into the node's inbox, as the Router
// would after checking it.
func arrive(t *testing.T, m *mcpNode, from *identity.Keypair, kind wire.Kind) wire.Envelope {
	t.Helper()
	e, err := wire.Seal(from, identity.NewUUID(), m.n.h.kp.ID(), kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.n.inbox.Push(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "bob"}); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestMCPNodeReceiveFiltersAndAck(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	msg := arrive(t, m, bob, wire.Message("one"))
	req := arrive(t, m, bob, wire.Request("add", wire.Int(1)))
	resp := arrive(t, m, bob, wire.Response(identity.NewUUID(), wire.StatusCompleted, wire.Null()))

	b, err := m.Receive(ctx, mcpserver.Query{})
	if err != nil || len(b.Messages) != 3 || b.Pending != 2 || b.Cursor != 3 {
		t.Fatalf("all: %+v, %v (pending counts messages and requests only)", b, err)
	}
	b, _ = m.Receive(ctx, mcpserver.Query{Kinds: []string{"request"}})
	if len(b.Messages) != 1 || b.Messages[0].ID != req.ID.String() || b.Messages[0].Intent != "add" {
		t.Fatalf("kinds filter: %+v", b.Messages)
	}
	rid, _ := resp.Kind.InReplyTo()
	b, _ = m.Receive(ctx, mcpserver.Query{RequestID: rid.String()})
	if len(b.Messages) != 1 || b.Messages[0].RequestID != rid.String() {
		t.Fatalf("request_id filter: %+v", b.Messages)
	}
	b, _ = m.Receive(ctx, mcpserver.Query{Limit: 1})
	if len(b.Messages) != 1 || b.Cursor != 1 {
		t.Fatalf("limit 1: cursor %d, %+v", b.Cursor, b.Messages)
	}
	b, _ = m.Receive(ctx, mcpserver.Query{After: 1})
	if len(b.Messages) != 2 {
		t.Fatalf("after 1: %+v", b.Messages)
	}
	if _, err := m.Receive(ctx, mcpserver.Query{From: "carol"}); codeOfErr(err) != mcpserver.CodeUnknownPeer {
		t.Fatalf("unknown from: %v", err)
	}
	b, _ = m.Receive(ctx, mcpserver.Query{After: 3, Wait: 20 * time.Millisecond})
	if !b.TimedOut || len(b.Messages) != 0 {
		t.Fatalf("empty wait: %+v", b)
	}
	acked, pending, err := m.Ack(ctx, []string{msg.ID.String()}, 0, mcpserver.Query{})
	if err != nil || acked != 1 || pending != 1 {
		t.Fatalf("ack by id: %d %d %v", acked, pending, err)
	}
	acked, pending, _ = m.Ack(ctx, nil, 3, mcpserver.Query{})
	if acked != 2 || pending != 0 {
		t.Fatalf("ack up to: %d %d", acked, pending)
	}
}

func TestMCPNodeWaitWakes(t *testing.T) {
	m, bob := mcpTestNode(t)
	got := make(chan mcpserver.Batch, 1)
	go func() {
		b, _ := m.Receive(context.Background(), mcpserver.Query{Wait: 20 * time.Second})
		got <- b
	}()
	arrive(t, m, bob, wire.Message("wake"))
	select {
	case b := <-got:
		if len(b.Messages) != 1 || b.TimedOut {
			t.Fatalf("woke with %+v", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("wait did not wake")
	}
}

func TestMCPNodeResponseChecks(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	direct := mcpserver.SendOptions{}
	if _, err := m.SendResponse(ctx, "bob", identity.NewUUID().String(), "completed", nil, direct); codeOfErr(err) != mcpserver.CodeUnknownRequest {
		t.Fatalf("never received: %v", err)
	}
	if _, err := m.SendResponse(ctx, "bob", "not-a-uuid", "completed", nil, direct); codeOfErr(err) != mcpserver.CodeUnknownRequest {
		t.Fatalf("not a uuid: %v", err)
	}
	if _, err := m.SendResponse(ctx, "bob", identity.NewUUID().String(), "done", nil, direct); codeOfErr(err) != mcpserver.CodeBadStatus {
		t.Fatalf("bad status: %v", err)
	}
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	// Bob's address is unreachable, so the direct send itself fails
	// offline — but only after the request passed the checks.
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "completed", nil, direct); codeOfErr(err) != mcpserver.CodePeerOffline {
		t.Fatalf("known request to an offline peer: %v", err)
	}
	m.n.inbox.markAnswered(req.ID)
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "completed", nil, direct); codeOfErr(err) != mcpserver.CodeAlreadyAnswered {
		t.Fatalf("answered twice: %v", err)
	}
	if _, err := m.SendMessage(ctx, "carol", "x", direct); codeOfErr(err) != mcpserver.CodeUnknownPeer {
		t.Fatalf("unknown peer: %v", err)
	}
}

func codeOfErr(err error) string {
	var me *mcpserver.Error
	if errors.As(err, &me) {
		return me.Code
	}
	return ""
}

// up_to with filters acknowledges only what the filtered read could show.
func TestMCPNodeFilteredAckKeepsUnseen(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	arrive(t, m, bob, wire.Request("r", wire.Null()))
	msg := arrive(t, m, bob, wire.Message("unseen"))
	b, _ := m.Receive(ctx, mcpserver.Query{Kinds: []string{"request"}})
	if len(b.Messages) != 1 {
		t.Fatalf("filtered read: %+v", b.Messages)
	}
	acked, pending, err := m.Ack(ctx, nil, b.Cursor, mcpserver.Query{Kinds: []string{"request"}})
	if err != nil || acked != 1 || pending != 1 {
		t.Fatalf("filtered ack: acked %d pending %d, %v", acked, pending, err)
	}
	if left := m.n.mail.List(0, 0); len(left) != 1 || left[0].Item.Envelope.ID != msg.ID {
		t.Fatalf("the unseen message was acknowledged: %v", left)
	}
}

// Concurrent final answers to one request: exactly one passes the check.
func TestMCPNodeConcurrentFinalAnswers(t *testing.T) {
	m, bob := mcpTestNode(t)
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	passed := make(chan bool, 16)
	for range 16 {
		go func() { passed <- m.n.inbox.checkAnswer(req.ID, bob.ID(), true) == nil }()
	}
	n := 0
	for range 16 {
		if <-passed {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent final answers passed, want 1", n)
	}
	m.n.inbox.unreserve(req.ID)
	if err := m.n.inbox.checkAnswer(req.ID, bob.ID(), true); err != nil {
		t.Fatalf("after a failed answer the request can be answered again: %v", err)
	}
}

// Large bodies are returned a few at a time (by size), never all at once,
// and paging with the cursor reaches every item exactly once.
func TestMCPNodeBatchByteBudget(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	big := strings.Repeat("x", 900<<10)
	for range 12 {
		arrive(t, m, bob, wire.Message(big))
	}
	seen, after, batches := 0, uint64(0), 0
	for seen < 12 {
		b, err := m.Receive(ctx, mcpserver.Query{After: after})
		if err != nil || len(b.Messages) == 0 {
			t.Fatalf("after %d items: %+v, %v", seen, b, err)
		}
		size := 0
		for _, msg := range b.Messages {
			size += len(msg.Body)
		}
		if len(b.Messages) > 1 && size > maxBatchBytes+len(big) {
			t.Fatalf("a batch of %d bytes", size)
		}
		seen += len(b.Messages)
		after = b.Cursor
		batches++
	}
	if seen != 12 || batches < 3 {
		t.Fatalf("saw %d items in %d batches", seen, batches)
	}
}

// mcpOutboxNode is mcpTestNode with a running outbox (in memory) as a
// daemon node has, retrying every 20 ms; tune adjusts the [outbox]
// settings first.
func mcpOutboxNode(t *testing.T, tune func(*config.Outbox)) (*mcpNode, *identity.Keypair) {
	t.Helper()
	m, bob := mcpTestNode(t)
	cfg := &m.n.h.cfg.Outbox
	cfg.Backoff = "20ms"
	if tune != nil {
		tune(cfg)
	}
	m.n.obStore = outbox.NewMemStore()
	ob, err := newOutbox(m.n.h, m.n.r, m.n.obStore, m.n.observeOutbox)
	if err != nil {
		t.Fatal(err)
	}
	m.n.ob = ob
	ob.Start()
	return m, bob
}

func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var reliable = mcpserver.SendOptions{Reliable: true}

// A reliable send to a peer that is down is queued, not an error; the
// outbox and list_peers show it; the breaker opens.
func TestMCPNodeReliableQueued(t *testing.T) {
	m, _ := mcpOutboxNode(t, func(o *config.Outbox) { o.BreakerFailures = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := m.SendMessage(ctx, "bob", "are you there?", reliable)
	if err != nil || sent.Delivery != mcpserver.DeliveryQueued || sent.Peer != "bob" || sent.LastError == "" {
		t.Fatalf("reliable send to a peer that is down: %+v, %v", sent, err)
	}
	req, err := m.SendRequest(ctx, "bob", "x", nil, reliable)
	if err != nil || req.Delivery != mcpserver.DeliveryQueued {
		t.Fatalf("reliable request behind it: %+v, %v", req, err)
	}
	o, err := m.Outbox(ctx)
	if err != nil || len(o.Entries) != 2 {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	e := o.Entries[0]
	if e.ID != sent.ID || e.Peer != "bob" || e.Kind != "message" || e.Attempts < 1 || e.LastError == "" || e.Expires != nil {
		t.Fatalf("outbox entry %+v", e)
	}
	if o.Entries[1].ID != req.ID || o.Entries[1].Kind != "request" {
		t.Fatalf("second entry %+v", o.Entries[1])
	}
	if len(o.Peers) != 1 || o.Peers[0].Peer != "bob" || o.Peers[0].Queued != 2 || o.Peers[0].Breaker == outbox.BreakerClosed {
		t.Fatalf("peer states %+v", o.Peers)
	}
	peers, _ := m.Peers(ctx)
	if len(peers) != 1 || peers[0].Queued != 2 || peers[0].Breaker == outbox.BreakerClosed || peers[0].LastError == "" {
		t.Fatalf("peers %+v", peers)
	}
	// Direct sends make one attempt and report the failure.
	if _, err := m.SendMessage(ctx, "bob", "x", mcpserver.SendOptions{}); codeOfErr(err) != mcpserver.CodePeerOffline {
		t.Fatalf("direct send: %v", err)
	}
	if _, err := m.SendMessage(ctx, "carol", "x", reliable); codeOfErr(err) != mcpserver.CodeUnknownPeer {
		t.Fatalf("reliable send to an unknown peer: %v", err)
	}
}

// A peer nothing was queued for shows a closed breaker and nothing queued.
func TestMCPNodePeersIdle(t *testing.T) {
	m, _ := mcpOutboxNode(t, nil)
	peers, err := m.Peers(context.Background())
	if err != nil || len(peers) != 1 || peers[0].Breaker != outbox.BreakerClosed || peers[0].Queued != 0 || peers[0].LastError != "" {
		t.Fatalf("peers %+v, %v", peers, err)
	}
}

// A reliable send with a short time-to-live becomes a dead letter, and
// RetryDeadLetters queues it again.
func TestMCPNodeExpiryAndRetry(t *testing.T) {
	m, _ := mcpOutboxNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := m.SendRequest(ctx, "bob", "x", json.RawMessage(`{"a":1}`), mcpserver.SendOptions{Reliable: true, TTL: 200 * time.Millisecond})
	if err != nil || sent.Delivery != mcpserver.DeliveryQueued {
		t.Fatalf("send: %+v, %v", sent, err)
	}
	o, _ := m.Outbox(ctx)
	if len(o.Entries) != 1 || o.Entries[0].Expires == nil {
		t.Fatalf("outbox entry without its expiry: %+v", o.Entries)
	}
	var dl []mcpserver.DeadLetter
	waitFor(t, 10*time.Second, "the dead letter", func() bool {
		dl, err = m.DeadLetters(ctx)
		return err == nil && len(dl) == 1
	})
	d := dl[0]
	if d.ID != sent.ID || d.Peer != "bob" || d.Kind != "request" || !strings.HasPrefix(d.Reason, "expired") || d.DiedAt.IsZero() || d.Attempts < 1 {
		t.Fatalf("dead letter %+v", d)
	}
	if o, _ := m.Outbox(ctx); len(o.Entries) != 0 {
		t.Fatalf("the expired send is still queued: %+v", o.Entries)
	}
	if _, err := m.RetryDeadLetters(ctx, []string{"not-an-id"}, false); codeOfErr(err) != mcpserver.CodeBadArgument {
		t.Fatalf("retry a bad id: %v", err)
	}
	if n, err := m.RetryDeadLetters(ctx, []string{identity.NewUUID().String()}, false); err != nil || n != 0 {
		t.Fatalf("retry an unknown id: %d, %v", n, err)
	}
	if n, err := m.RetryDeadLetters(ctx, []string{sent.ID}, false); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	if o, _ := m.Outbox(ctx); len(o.Entries) != 1 || o.Entries[0].ID != sent.ID {
		t.Fatalf("the retried send is not queued: %+v", o.Entries)
	}
	if dl, _ := m.DeadLetters(ctx); len(dl) != 0 {
		t.Fatalf("still a dead letter: %+v", dl)
	}
}

// A reliable final response counts as the answer once queued.
func TestMCPNodeReliableResponse(t *testing.T) {
	m, bob := mcpOutboxNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	sent, err := m.SendResponse(ctx, "bob", req.ID.String(), "accepted", nil, reliable)
	if err != nil || sent.Delivery != mcpserver.DeliveryQueued {
		t.Fatalf("accepted: %+v, %v", sent, err)
	}
	sent, err = m.SendResponse(ctx, "bob", req.ID.String(), "completed", json.RawMessage(`1`), reliable)
	if err != nil || sent.Delivery != mcpserver.DeliveryQueued {
		t.Fatalf("completed: %+v, %v", sent, err)
	}
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "failed", nil, reliable); codeOfErr(err) != mcpserver.CodeAlreadyAnswered {
		t.Fatalf("a second final answer: %v", err)
	}
}

func TestMCPNodeOutboxFull(t *testing.T) {
	m, _ := mcpOutboxNode(t, func(o *config.Outbox) { o.MaxEntries = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.SendMessage(ctx, "bob", "one", reliable); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SendMessage(ctx, "bob", "two", reliable); codeOfErr(err) != mcpserver.CodeOutboxFull {
		t.Fatalf("a send beyond outbox.max_entries: %v", err)
	}
}

// The node.* control operations carry the send options and the outbox
// tools to an attached meerkatd mcp.
func TestRemoteNodeOutbox(t *testing.T) {
	m, _ := mcpOutboxNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := listenControl(ctx, m.n.h)
	if err != nil {
		t.Fatalf("control socket: %v", err)
	}
	sctx, stop := context.WithCancel(ctx)
	srv := &controlServer{b: &localBackend{n: m.n, daemon: true}, log: slog.New(slog.DiscardHandler), ctx: sctx}
	srv.wg.Add(1)
	go srv.serve(ln)
	t.Cleanup(func() {
		stop()
		ln.Close()
		srv.wg.Wait()
	})
	rn := &remoteNode{h: m.n.h}
	if _, err := rn.SendMessage(ctx, "bob", "x", mcpserver.SendOptions{}); codeOfErr(err) != mcpserver.CodePeerOffline {
		t.Fatalf("direct: %v", err)
	}
	sent, err := rn.SendMessage(ctx, "bob", "x", mcpserver.SendOptions{Reliable: true, TTL: 300 * time.Millisecond})
	if err != nil || sent.Delivery != mcpserver.DeliveryQueued || sent.LastError == "" {
		t.Fatalf("reliable: %+v, %v", sent, err)
	}
	peers, err := rn.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Queued != 1 || peers[0].LastError == "" {
		t.Fatalf("peers: %+v, %v", peers, err)
	}
	o, err := rn.Outbox(ctx)
	if err != nil || len(o.Entries) != 1 || o.Entries[0].ID != sent.ID || o.Entries[0].Expires == nil || len(o.Peers) != 1 {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	var dl []mcpserver.DeadLetter
	waitFor(t, 10*time.Second, "the dead letter", func() bool {
		dl, err = rn.DeadLetters(ctx)
		return err == nil && len(dl) == 1
	})
	if dl[0].ID != sent.ID || !strings.HasPrefix(dl[0].Reason, "expired") {
		t.Fatalf("dead letter %+v", dl[0])
	}
	if _, err := rn.RetryDeadLetters(ctx, []string{"bad"}, false); codeOfErr(err) != mcpserver.CodeBadArgument {
		t.Fatalf("retry a bad id: %v", err)
	}
	if n, err := rn.RetryDeadLetters(ctx, nil, true); err != nil || n != 1 {
		t.Fatalf("retry all: %d, %v", n, err)
	}
	// A sub-millisecond ttl is not lost on the way (0 would mean "none").
	if got := withSendOptions(ctlRequest{}, mcpserver.SendOptions{Reliable: true, TTL: time.Microsecond}); got.TTLMS != 1 {
		t.Fatalf("ttl 1µs sent as %d ms", got.TTLMS)
	}
}

// fullTestNode runs a listening node (durable inbox, pairing) in this
// process, in a short temporary home.
func fullTestNode(t *testing.T, name string) *mcpNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := initHome(dir, name); err != nil {
		t.Fatal(err)
	}
	h, err := newEnv(io.Discard, io.Discard, mapEnv(nil)).openHome(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNode(h, slog.New(slog.DiscardHandler), nodeFull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return &mcpNode{n: n}
}

func TestMCPNodePairing(t *testing.T) {
	alice, bob := fullTestNode(t, "alice"), fullTestNode(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := alice.PairOffer(ctx)
	if err != nil || !strings.HasPrefix(o.Line, "meerkat-pair/1 ") || o.Expires.IsZero() {
		t.Fatalf("offer %+v, %v", o, err)
	}
	if _, err := bob.PairAccept(ctx, "meerkat-pair/1 nonsense", ""); codeOfErr(err) != mcpserver.CodeBadArgument {
		t.Fatalf("bad line: %v", err)
	}
	p, err := bob.PairAccept(ctx, o.Line, "")
	if err != nil || p.Name != "alice" || p.Key != alice.n.h.kp.ID().String() {
		t.Fatalf("accept: %+v, %v", p, err)
	}
	if _, err := bob.PairAccept(ctx, o.Line, ""); codeOfErr(err) != mcpserver.CodePairFailed {
		t.Fatalf("reused line: %v", err)
	}
	sent, err := bob.SendMessage(ctx, "alice", "paired through MCP", mcpserver.SendOptions{})
	if err != nil || sent.Delivery != "acked" {
		t.Fatalf("bob → alice: %+v, %v", sent, err)
	}
	if sent, err := alice.SendMessage(ctx, "bob", "and back", mcpserver.SendOptions{}); err != nil || sent.Delivery != "acked" {
		t.Fatalf("alice → bob: %+v, %v", sent, err)
	}
}
