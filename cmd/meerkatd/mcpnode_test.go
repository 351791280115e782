package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/mcpserver"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// mcpTestNode is a node (not listening) whose trust list holds peer "bob".
func mcpTestNode(t *testing.T) (*mcpNode, *identity.Keypair) {
	t.Helper()
	dir := t.TempDir()
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
	if _, err := m.SendResponse(ctx, "bob", identity.NewUUID().String(), "completed", nil); codeOfErr(err) != mcpserver.CodeUnknownRequest {
		t.Fatalf("never received: %v", err)
	}
	if _, err := m.SendResponse(ctx, "bob", "not-a-uuid", "completed", nil); codeOfErr(err) != mcpserver.CodeUnknownRequest {
		t.Fatalf("not a uuid: %v", err)
	}
	if _, err := m.SendResponse(ctx, "bob", identity.NewUUID().String(), "done", nil); codeOfErr(err) != mcpserver.CodeBadStatus {
		t.Fatalf("bad status: %v", err)
	}
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	// Bob's address is unreachable, so the send itself fails offline — but
	// only after the request passed the checks.
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "completed", nil); codeOfErr(err) != mcpserver.CodePeerOffline {
		t.Fatalf("known request to an offline peer: %v", err)
	}
	m.n.inbox.markAnswered(req.ID)
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "completed", nil); codeOfErr(err) != mcpserver.CodeAlreadyAnswered {
		t.Fatalf("answered twice: %v", err)
	}
	if _, err := m.SendMessage(ctx, "carol", "x"); codeOfErr(err) != mcpserver.CodeUnknownPeer {
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
