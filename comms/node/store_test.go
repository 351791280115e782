package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// deliverRaw sends one envelope to addr on its own connection, the Rust
// way, and checks the ack.
func deliverRaw(t *testing.T, addr transport.Addr, payload []byte, to identity.PeerID, id identity.UUID) {
	t.Helper()
	c, err := transport.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := transport.WriteFrame(c, payload); err != nil {
		t.Fatal(err)
	}
	ackBytes, err := transport.ReadFrame(c, 0)
	if err != nil {
		t.Fatalf("no ack: %v", err)
	}
	ack, err := wire.Open(ackBytes)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ack.Kind.InReplyTo(); got != id || ack.From != to {
		t.Fatalf("bad ack %+v", ack)
	}
}

// With the default [store] mode (sqlite) an acknowledged message survives
// a restart of the node, requests stay answerable, and a repeat of the same envelope
// after the restart is acknowledged but not delivered again.
func TestDurableInboxAcrossRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "mkst")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bobHome := filepath.Join(dir, "bob")
	if _, err := InitHome(bobHome, "bob"); err != nil {
		t.Fatal(err)
	}
	alice, _ := identity.GenerateKeypair()
	l, err := trust.New(trust.Peer{Name: "alice", ID: alice.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(dir, "alice.sock")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(filepath.Join(bobHome, trust.FileName)); err != nil {
		t.Fatal(err)
	}
	h, _, err := OpenHome(bobHome, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Config.Store.Mode != "sqlite" {
		t.Fatalf("store mode %q", h.Config.Store.Mode)
	}
	start := func() *Node {
		n, err := Start(h, Options{Mode: ModeServe})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	env, err := wire.Seal(alice, identity.NewUUID(), h.Key.ID(), wire.Request("keep", wire.Int(1)))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := env.MarshalBinary()

	n := start()
	addr := n.addrs[0]
	deliverRaw(t, addr, payload, h.Key.ID(), env.ID)
	n.Close()

	n = start()
	defer n.Close()
	items := n.mail.List(0, 0).items
	if len(items) != 1 || items[0].Item.Envelope.ID != env.ID || items[0].Item.PeerName != "alice" {
		t.Fatalf("after restart the inbox holds %+v", items)
	}
	if _, err := n.inbox.checkAnswer(env.ID, alice.ID(), false); err != nil {
		t.Fatalf("a request received before the restart is not answerable: %v", err)
	}
	deliverRaw(t, addr, payload, h.Key.ID(), env.ID) // the sender's retry
	if got := n.mail.Len(); got != 1 {
		t.Fatalf("a repeat after the restart was delivered again: %d items", got)
	}
}

// The inbox epoch (Batch.Epoch) is the same across restarts of a node
// with the SQLite inbox, whose seqs go on, and is what a command reading
// the home's database without a daemon sees too; with a memory inbox,
// whose seqs start over, each start has a new one.
func TestInboxEpoch(t *testing.T) {
	ctx := context.Background()
	epochOf := func(h *Home, mode Mode) string {
		t.Helper()
		n, err := Start(h, Options{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		b, err := n.Receive(ctx, Query{})
		if err != nil || b.Epoch == "" {
			t.Fatalf("receive: %+v, %v", b, err)
		}
		return b.Epoch
	}
	durable, _ := testHome(t, "durable", nil)
	first := epochOf(durable, ModeServe)
	if again := epochOf(durable, ModeServe); again != first {
		t.Fatalf("SQLite inbox: epoch %q after a restart, was %q", again, first)
	}
	if cmd := epochOf(durable, ModeSend); cmd != first {
		t.Fatalf("SQLite inbox read without a daemon: epoch %q, the daemon's is %q", cmd, first)
	}
	if other, _ := testHome(t, "other", nil); epochOf(other, ModeServe) == first {
		t.Fatal("two homes' inboxes have one epoch")
	}
	memory, _ := testHome(t, "memory", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	if a, b := epochOf(memory, ModeServe), epochOf(memory, ModeServe); a == b {
		t.Fatalf("memory inbox: the same epoch %q after a restart", a)
	}
}

// A command node that listens for the response it waits for (send
// request --wait, pair offer with no daemon) keeps the responses it
// admits in the home's inbox: responses are not acknowledged, so a
// response that arrives meanwhile (to an earlier request, say) is never
// sent again, and the daemon and inbox must find it.
func TestRepliesNodeKeepsResponses(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	ctx := context.Background()
	n := startTest(t, h, ModeReplies)
	earlier := identity.NewUUID()
	e, err := wire.Seal(bob, identity.NewUUID(), h.Key.ID(), wire.Response(earlier, wire.StatusCompleted, wire.Null()))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.inbox.Push(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "bob"}); err != nil {
		t.Fatal(err)
	}
	n.Close()
	later := startTest(t, h, ModeSend)
	b, err := later.Receive(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Messages) != 1 || b.Messages[0].ID != e.ID.String() || b.Messages[0].RequestID != earlier.String() {
		t.Fatalf("the home's inbox after the command node: %+v", b)
	}
}

// Without a daemon, Peers shows each peer's send state from the home's
// stored outbox, as Outbox does: not "closed, nothing queued" for a peer
// with envelopes waiting.
func TestPeersWithoutDaemonShowStoredOutbox(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	ctx := context.Background()
	n := startTest(t, h, ModeSend)
	sent, err := n.SendMessage(ctx, "bob", "later", SendOptions{Reliable: true})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("a reliable send to a peer that is down: %+v, %v", sent, err)
	}
	o, err := n.Outbox(ctx)
	if err != nil || len(o.Peers) != 1 || o.Peers[0].Queued != 1 {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	peers, err := n.Peers(ctx)
	if err != nil || len(peers) != 1 {
		t.Fatalf("peers: %+v, %v", peers, err)
	}
	if p := peers[0]; p.Queued != 1 || p.LastError == "" || p.Breaker != o.Peers[0].Breaker {
		t.Fatalf("peers shows %+v; the stored outbox %+v", p, o.Peers[0])
	}
}

// Without a daemon, the rosters are edited and shown from the spaces file
// (meerkatd space create|add|list with no node running), and what needs a
// running node says so.
func TestSpacesWithoutDaemon(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	ctx := context.Background()
	n := startTest(t, h, ModeSend)
	info, err := n.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: "build", As: "A"})
	if err != nil || info.Name != "build" || info.Self != "A" || len(info.Members) != 1 {
		t.Fatalf("create without a daemon: %+v, %v", info, err)
	}
	sp, err := n.Spaces(ctx)
	if err != nil || len(sp) != 1 || sp[0].Name != "build" {
		t.Fatalf("spaces without a daemon: %+v, %v", sp, err)
	}
	if _, err := n.Proposals(ctx, ProposalQuery{}); CodeOf(err) != CodeNoDaemon {
		t.Fatalf("proposals without a daemon: %v, want %s", err, CodeNoDaemon)
	}
}

// A send to a space this node has no part in is unknown_space (not
// internal); a proposal state that does not exist is bad_argument.
func TestSpaceErrorCodes(t *testing.T) {
	n, _ := mcpTestNode(t)
	ctx := context.Background()
	if _, err := n.SpaceSend(ctx, SpaceMessage{Space: "nowhere", Action: ActChat, Text: "hi"}); CodeOf(err) != CodeUnknownSpace {
		t.Errorf("chat to an unknown space: %v, want %s", err, CodeUnknownSpace)
	}
	if _, err := n.Proposals(ctx, ProposalQuery{State: "sleeping"}); CodeOf(err) != CodeBadArgument {
		t.Errorf("proposals in state sleeping: %v, want %s", err, CodeBadArgument)
	}
	if _, err := n.Proposals(ctx, ProposalQuery{State: "pending"}); err != nil {
		t.Errorf("pending proposals: %v", err)
	}
}
