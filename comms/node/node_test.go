package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// testHome creates a home named name in a short temporary directory (the
// Unix socket paths inside must fit) whose trust list holds peer "bob" at
// an address where nothing listens; tune adjusts its configuration.
func testHome(t testing.TB, name string, tune func(*config.Config)) (*Home, *identity.Keypair) {
	t.Helper()
	testutil.CheckGoroutines(t) // first: it runs after the cleanups that stop the node
	dir, err := os.MkdirTemp("", "mkm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h, _, err := OpenHome(dir, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Config.Name = name
	bob, _ := identity.GenerateKeypair()
	l, err := trust.New(trust.Peer{Name: "bob", ID: bob.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/bob.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(&h.Config)
	}
	return h, bob
}

// startTest starts a node of h in mode and stops it at the test's end.
func startTest(t testing.TB, h *Home, mode Mode) *Node {
	t.Helper()
	n, err := Start(h, Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// mcpTestNode is a serving node with a memory inbox whose trust list
// holds peer "bob", who is not reachable.
func mcpTestNode(t *testing.T) (*Node, *identity.Keypair) {
	t.Helper()
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	return startTest(t, h, ModeServe), bob
}

// arrive pushes an envelope from bob into the node's inbox, as the Router
// would after checking it.
func arrive(t *testing.T, m *Node, from *identity.Keypair, kind wire.Kind) wire.Envelope {
	t.Helper()
	e, err := wire.Seal(from, identity.NewUUID(), m.h.Key.ID(), kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.inbox.Push(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "bob"}); err != nil {
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

	b, err := m.Receive(ctx, Query{})
	if err != nil || len(b.Messages) != 3 || b.Pending != 3 || b.Cursor != 3 {
		t.Fatalf("all: %+v, %v (pending counts every stored kind)", b, err)
	}
	b, _ = m.Receive(ctx, Query{Kinds: []string{"request"}})
	if len(b.Messages) != 1 || b.Messages[0].ID != req.ID.String() || b.Messages[0].Intent != "add" {
		t.Fatalf("kinds filter: %+v", b.Messages)
	}
	rid, _ := resp.Kind.InReplyTo()
	b, _ = m.Receive(ctx, Query{RequestID: rid.String()})
	if len(b.Messages) != 1 || b.Messages[0].RequestID != rid.String() {
		t.Fatalf("request_id filter: %+v", b.Messages)
	}
	b, _ = m.Receive(ctx, Query{Limit: 1})
	if len(b.Messages) != 1 || b.Cursor != 1 {
		t.Fatalf("limit 1: cursor %d, %+v", b.Cursor, b.Messages)
	}
	b, _ = m.Receive(ctx, Query{After: 1})
	if len(b.Messages) != 2 {
		t.Fatalf("after 1: %+v", b.Messages)
	}
	if _, err := m.Receive(ctx, Query{From: "carol"}); codeOfErr(err) != CodeUnknownPeer {
		t.Fatalf("unknown from: %v", err)
	}
	b, _ = m.Receive(ctx, Query{After: 3, Wait: 20 * time.Millisecond})
	if !b.TimedOut || len(b.Messages) != 0 {
		t.Fatalf("empty wait: %+v", b)
	}
	r, err := m.Ack(ctx, AckRequest{IDs: []string{msg.ID.String()}})
	if err != nil || r.Acked != 1 || r.Pending != 2 {
		t.Fatalf("ack by id: %+v %v", r, err)
	}
	r, _ = m.Ack(ctx, AckRequest{UpTo: 3})
	if r.Acked != 2 || r.Pending != 0 {
		t.Fatalf("ack up to: %+v", r)
	}
}

func TestMCPNodeWaitWakes(t *testing.T) {
	m, bob := mcpTestNode(t)
	got := make(chan Batch, 1)
	go func() {
		b, _ := m.Receive(context.Background(), Query{Wait: 20 * time.Second})
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
	direct := SendOptions{}
	if _, err := m.SendResponse(ctx, "bob", identity.NewUUID().String(), "completed", nil, direct); codeOfErr(err) != CodeUnknownRequest {
		t.Fatalf("never received: %v", err)
	}
	if _, err := m.SendResponse(ctx, "bob", "not-a-uuid", "completed", nil, direct); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("not a uuid: %v", err)
	}
	if _, err := m.SendResponse(ctx, "bob", identity.NewUUID().String(), "done", nil, direct); codeOfErr(err) != CodeBadStatus {
		t.Fatalf("bad status: %v", err)
	}
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	// Bob's address is unreachable, so the direct send itself fails
	// offline — but only after the request passed the checks.
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "completed", nil, direct); codeOfErr(err) != CodePeerOffline {
		t.Fatalf("known request to an offline peer: %v", err)
	}
	if _, err := m.inbox.checkAnswer(req.ID, bob.ID(), true); err != nil { // as a final answer sent elsewhere
		t.Fatal(err)
	}
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "completed", nil, direct); codeOfErr(err) != CodeAlreadyAnswered {
		t.Fatalf("answered twice: %v", err)
	}
	if _, err := m.SendMessage(ctx, "carol", "x", direct); codeOfErr(err) != CodeUnknownPeer {
		t.Fatalf("unknown peer: %v", err)
	}
}

func codeOfErr(err error) string {
	var me *Error
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
	b, _ := m.Receive(ctx, Query{Kinds: []string{"request"}})
	if len(b.Messages) != 1 {
		t.Fatalf("filtered read: %+v", b.Messages)
	}
	r, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor, Kinds: []string{"request"}})
	if err != nil || r.Acked != 1 || r.Pending != 1 {
		t.Fatalf("filtered ack: %+v, %v", r, err)
	}
	if left := m.mail.List(0, 0).items; len(left) != 1 || left[0].Item.Envelope.ID != msg.ID {
		t.Fatalf("the unseen message was acknowledged: %v", left)
	}
}

// Concurrent final answers to one request: exactly one passes the check.
func TestMCPNodeConcurrentFinalAnswers(t *testing.T) {
	m, bob := mcpTestNode(t)
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	passed := make(chan bool, 16)
	for range 16 {
		go func() { _, err := m.inbox.checkAnswer(req.ID, bob.ID(), true); passed <- err == nil }()
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
	m.inbox.unreserve(req.ID)
	if _, err := m.inbox.checkAnswer(req.ID, bob.ID(), true); err != nil {
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
		b, err := m.Receive(ctx, Query{After: after})
		if err != nil || len(b.Messages) == 0 {
			t.Fatalf("after %d items: %+v, %v", seen, b, err)
		}
		size := 0
		for _, msg := range b.Messages {
			size += len(msg.Body)
		}
		if len(b.Messages) > 1 && size > MaxBatchBytes+len(big) {
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

// mcpOutboxNode is mcpTestNode whose outbox (in memory) retries every
// 20 ms; tune adjusts the [outbox] settings first.
func mcpOutboxNode(t *testing.T, tune func(*config.Outbox)) (*Node, *identity.Keypair) {
	t.Helper()
	h, bob := testHome(t, "alice", func(c *config.Config) {
		c.Store.Mode = config.StoreMemory
		c.Outbox.Backoff = "20ms"
		if tune != nil {
			tune(&c.Outbox)
		}
	})
	return startTest(t, h, ModeServe), bob
}

// waitFor polls f until it holds, failing t after d.
func waitFor(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	testutil.WaitFor(t, d, what, f)
}

var reliable = SendOptions{Reliable: true}

// A reliable send to a peer that is down is queued, not an error; the
// outbox and list_peers show it; the breaker opens.
func TestMCPNodeReliableQueued(t *testing.T) {
	m, _ := mcpOutboxNode(t, func(o *config.Outbox) { o.BreakerFailures = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := m.SendMessage(ctx, "bob", "are you there?", reliable)
	if err != nil || sent.Delivery != DeliveryQueued || sent.Peer != "bob" || sent.LastError == "" {
		t.Fatalf("reliable send to a peer that is down: %+v, %v", sent, err)
	}
	req, err := m.SendRequest(ctx, "bob", "x", nil, reliable)
	if err != nil || req.Delivery != DeliveryQueued {
		t.Fatalf("reliable request behind it: %+v, %v", req, err)
	}
	o, err := m.Outbox(ctx)
	if err != nil || len(o.Entries) != 2 {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	e := o.Entries[0]
	if e.ID != sent.ID || e.Peer != "bob" || e.Kind != "message" || e.Attempts < 1 || e.LastError == "" || e.Expires != nil || e.Size < len("are you there?") {
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
	// The peer's last error reads as the outbox's does: no package names.
	if peers[0].LastError != o.Peers[0].LastError || peers[0].LastError != userText(peers[0].LastError) {
		t.Fatalf("peers say %q, the outbox %q", peers[0].LastError, o.Peers[0].LastError)
	}
	// Direct sends make one attempt and report the failure.
	if _, err := m.SendMessage(ctx, "bob", "x", SendOptions{}); codeOfErr(err) != CodePeerOffline {
		t.Fatalf("direct send: %v", err)
	}
	if _, err := m.SendMessage(ctx, "carol", "x", reliable); codeOfErr(err) != CodeUnknownPeer {
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
	sent, err := m.SendRequest(ctx, "bob", "x", json.RawMessage(`{"a":1}`), SendOptions{Reliable: true, TTL: 2 * time.Second})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("send: %+v, %v", sent, err)
	}
	o, _ := m.Outbox(ctx)
	if len(o.Entries) != 1 || o.Entries[0].Expires == nil {
		t.Fatalf("outbox entry without its expiry: %+v", o.Entries)
	}
	var dl []DeadLetter
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
	if _, err := m.RetryDeadLetters(ctx, []string{"not-an-id"}, false); codeOfErr(err) != CodeBadArgument {
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
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("accepted: %+v, %v", sent, err)
	}
	sent, err = m.SendResponse(ctx, "bob", req.ID.String(), "completed", json.RawMessage(`1`), reliable)
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("completed: %+v, %v", sent, err)
	}
	if _, err := m.SendResponse(ctx, "bob", req.ID.String(), "failed", nil, reliable); codeOfErr(err) != CodeAlreadyAnswered {
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
	if _, err := m.SendMessage(ctx, "bob", "two", reliable); codeOfErr(err) != CodeOutboxFull {
		t.Fatalf("a send beyond outbox.max_entries: %v", err)
	}
}

// fullTestNode runs a serving node (durable inbox, pairing) in this
// process, in a short temporary home.
func fullTestNode(t *testing.T, name string) *Node {
	t.Helper()
	h, _ := testHome(t, name, nil)
	var empty *trust.List
	if err := empty.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	return startTest(t, h, ModeServe)
}

func TestMCPNodePairing(t *testing.T) {
	alice, bob := fullTestNode(t, "alice"), fullTestNode(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := alice.PairOffer(ctx, PairOptions{})
	if err != nil || !strings.HasPrefix(o.Line, "meerkat-pair/1 ") || o.Expires.IsZero() {
		t.Fatalf("offer %+v, %v", o, err)
	}
	if _, err := bob.PairAccept(ctx, "meerkat-pair/1 nonsense", ""); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("bad line: %v", err)
	}
	p, err := bob.PairAccept(ctx, o.Line, "")
	if err != nil || p.Name != "alice" || p.PubKey != alice.h.Key.ID().String() {
		t.Fatalf("accept: %+v, %v", p, err)
	}
	if _, err := bob.PairAccept(ctx, o.Line, ""); codeOfErr(err) != CodePairFailed {
		t.Fatalf("reused line: %v", err)
	}
	sent, err := bob.SendMessage(ctx, "alice", "paired through MCP", SendOptions{})
	if err != nil || sent.Delivery != "acked" {
		t.Fatalf("bob → alice: %+v, %v", sent, err)
	}
	if sent, err := alice.SendMessage(ctx, "bob", "and back", SendOptions{}); err != nil || sent.Delivery != "acked" {
		t.Fatalf("alice → bob: %+v, %v", sent, err)
	}
}

// A read that names the epoch of its cursor (Query.Epoch) reads a memory
// inbox that started over from its start: an item that arrived after the
// restart has a seq below the old cursor and is not missed.
func TestReceiveAcrossNewEpoch(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	ctx := context.Background()
	first, err := Start(h, Options{Mode: ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		arrive(t, first, bob, wire.Message("before"))
	}
	old, err := first.Receive(ctx, Query{})
	first.Close()
	if err != nil || old.Cursor != 3 {
		t.Fatalf("before the restart: %+v, %v", old, err)
	}
	m := startTest(t, h, ModeServe)
	arrive(t, m, bob, wire.Message("after"))
	// Without the epoch, the cursor is beyond what the new inbox handed
	// out: refused, not read as "nothing new" (nor waited on).
	if b, err := m.Receive(ctx, Query{After: old.Cursor, Wait: 2 * time.Second}); codeOfErr(err) != CodeBadArgument || !strings.Contains(fmt.Sprint(err), "up to 1 only") {
		t.Fatalf("after the restart, without the epoch: %+v, %v; want bad_argument", b, err)
	}
	b, err := m.Receive(ctx, Query{After: old.Cursor, Epoch: old.Epoch, Wait: 5 * time.Second})
	if err != nil || len(b.Messages) != 1 || b.Messages[0].Body != "after" || b.Messages[0].Seq != 1 || b.Cursor != 1 || b.Epoch == old.Epoch {
		t.Fatalf("after the restart, with the old epoch: %+v, %v", b, err)
	}
	if b, _ := m.Receive(ctx, Query{After: b.Cursor, Epoch: b.Epoch}); len(b.Messages) != 0 {
		t.Fatalf("with the new epoch, after its cursor: %+v", b)
	}
}

// A cursor is refused only when it is beyond every seq the inbox handed
// out: the newest item's seq reads as "nothing new" even once that item
// is acknowledged, in either inbox. The same holds for an ack's up_to.
func TestReceiveCursorBeyondTheInbox(t *testing.T) {
	for _, mode := range []string{config.StoreMemory, config.StoreSQLite} {
		t.Run(mode, func(t *testing.T) {
			h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = mode })
			m := startTest(t, h, ModeServe)
			ctx := context.Background()
			for range 2 {
				arrive(t, m, bob, wire.Message("mail"))
			}
			b, err := m.Receive(ctx, Query{})
			if err != nil || b.Cursor != 2 {
				t.Fatalf("read: %+v, %v", b, err)
			}
			if _, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor, Epoch: b.Epoch}); err != nil {
				t.Fatal(err)
			}
			if b, err := m.Receive(ctx, Query{After: 2}); err != nil || len(b.Messages) != 0 || b.Cursor != 2 {
				t.Fatalf("after the newest seq, acknowledged: %+v, %v", b, err)
			}
			for _, after := range []uint64{3, 1 << 40} {
				_, err := m.Receive(ctx, Query{After: after, Wait: 2 * time.Second})
				if codeOfErr(err) != CodeBadArgument || !strings.Contains(fmt.Sprint(err), "up to 2 only") {
					t.Fatalf("after %d: %v; want bad_argument", after, err)
				}
			}
			// An acknowledgement up to such a cursor acknowledges
			// nothing and says why.
			if r, err := m.Ack(ctx, AckRequest{UpTo: 3}); codeOfErr(err) != CodeBadArgument || r.Acked != 0 || !strings.Contains(fmt.Sprint(err), "up_to 3: ") {
				t.Fatalf("ack up to 3: %+v, %v; want bad_argument", r, err)
			}
			if r, err := m.Ack(ctx, AckRequest{UpTo: 2}); err != nil || r.Acked != 0 {
				t.Fatalf("ack up to the newest, acknowledged already: %+v, %v", r, err)
			}
			arrive(t, m, bob, wire.Message("third"))
			if b, err := m.Receive(ctx, Query{After: 2}); err != nil || len(b.Messages) != 1 || b.Cursor != 3 {
				t.Fatalf("after 2 with a third item: %+v, %v", b, err)
			}
		})
	}
}

// listCounter counts the stored items a node's reads load.
type listCounter struct {
	mailStore
	loaded int
}

func (l *listCounter) List(after uint64, limit int) mailPage {
	page := l.mailStore.List(after, limit)
	l.loaded += len(page.items)
	return page
}

// ListClass counts what a priority read (the default) loads.
func (l *listCounter) ListClass(class string, after uint64, limit int) mailPage {
	page := l.mailStore.ListClass(class, after, limit)
	l.loaded += len(page.items)
	return page
}

// A read of a few items loads about that many from the inbox, not a page
// of listPage: MCP asks for one (the pending count) after every tool
// call, and a durable inbox's items are up to a frame each. Filtered
// reads still page through everything they skip.
func TestReceiveLoadsWhatItNeeds(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	for i := range 600 {
		kind := wire.Message("m")
		if i == 599 {
			kind = wire.Request("last", wire.Null())
		}
		arrive(t, m, bob, kind)
	}
	lc := &listCounter{mailStore: m.mail}
	m.mail = lc
	b, err := m.Receive(ctx, Query{Limit: 1})
	if err != nil || len(b.Messages) != 1 || !b.More || b.Pending != 600 {
		t.Fatalf("a read of one item: %+v, %v", b, err)
	}
	if lc.loaded > 2 {
		t.Errorf("a read of one item loaded %d stored items", lc.loaded)
	}
	lc.loaded = 0
	b, err = m.Receive(ctx, Query{Limit: 1, Kinds: []string{wire.TypeRequest}})
	if err != nil || len(b.Messages) != 1 || b.Messages[0].Intent != "last" || b.More || b.Cursor != b.Messages[0].Seq {
		t.Fatalf("a filtered read: %+v, %v", b, err)
	}
	if lc.loaded != 600 {
		t.Errorf("a filtered read of the whole inbox loaded %d items, want 600", lc.loaded)
	}
}

// slowAdmitMail is a memory inbox whose admissions show their item at
// once (the store has committed and woken its readers) but report their
// outcome only when release is closed.
type slowAdmitMail struct {
	memMail
	release chan struct{}
}

type slowAdmission struct{ release chan struct{} }

func (a slowAdmission) Ready() bool { return false }
func (a slowAdmission) Wait() error { <-a.release; return nil }

func (m slowAdmitMail) PushAsync(it comms.Item) comms.Admission {
	if err := m.memMail.Push(it); err != nil {
		return doneAdmission{err}
	}
	return slowAdmission{m.release}
}

// A request can be answered as soon as a read shows it: a fast client
// that answers at once must not be told the request is unknown because
// the admission had not reported back yet.
func TestRequestAnswerableOnceReadable(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	mail := slowAdmitMail{memMail: newMemMail(inbox.NewMailbox[comms.Item](0)), release: make(chan struct{})}
	m.mail, m.inbox = mail, newRecordingInbox(mail)
	e, err := wire.Seal(bob, identity.NewUUID(), m.h.Key.ID(), wire.Request("now", wire.Null()))
	if err != nil {
		t.Fatal(err)
	}
	adm := m.inbox.PushAsync(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "bob"})
	defer func() { close(mail.release); adm.Wait() }()
	b, err := m.Receive(ctx, Query{})
	if err != nil || len(b.Messages) != 1 || b.Messages[0].ID != e.ID.String() {
		t.Fatalf("the request is not readable: %+v, %v", b, err)
	}
	// bob is unreachable: past the request check the send fails offline.
	if _, err := m.SendResponse(ctx, "bob", b.Messages[0].ID, "accepted", nil, SendOptions{}); CodeOf(err) != CodePeerOffline {
		t.Fatalf("answering a request just read: %v (code %s)", err, CodeOf(err))
	}
}

// A reliable send queued behind earlier envelopes to the same peer
// returns at once as queued: its first attempt comes only after theirs,
// which keep failing (the outbox halts a peer's round at its first
// failure), so waiting for it would last until the caller gave up (an
// MCP tool call never gives up; the CLI through the daemon reported a
// queued send as a failure).
func TestReliableSendBehindBacklog(t *testing.T) {
	m, _ := mcpOutboxNode(t, func(o *config.Outbox) { o.Backoff = "0s"; o.BreakerFailures = 1 << 20; o.MaxAttempts = 1 << 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := m.SendMessage(ctx, "bob", "first", reliable)
	if err != nil || first.Delivery != DeliveryQueued {
		t.Fatalf("first reliable send to a peer that is down: %+v, %v", first, err)
	}
	start := time.Now()
	done := make(chan struct{})
	var second Sent
	go func() {
		defer close(done)
		second, err = m.SendMessage(context.Background(), "bob", "second", reliable)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatal("a reliable send behind a failing backlog waits for an attempt that does not come")
	}
	if err != nil || second.Delivery != DeliveryQueued {
		t.Fatalf("second reliable send: %+v, %v (after %v)", second, err, time.Since(start))
	}
}

// The checks MCP's schema makes are the node's own, so the CLI gets them
// too: a message needs a body, and a kinds filter names known kinds.
func TestNodeChecksArguments(t *testing.T) {
	m, _ := mcpTestNode(t)
	ctx := context.Background()
	if _, err := m.SendMessage(ctx, "bob", "", SendOptions{}); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("an empty body: %v", err)
	}
	if _, err := m.Receive(ctx, Query{Kinds: []string{"telegram"}}); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("an unknown kind: %v", err)
	}
	if _, err := m.Ack(ctx, AckRequest{UpTo: 1, Kinds: []string{""}}); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("an empty kind: %v", err)
	}
}

// A wait for items that the node's stopping ends is no empty inbox: it
// fails with unavailable (ErrClosed), not a timed-out empty batch.
func TestReceiveWaitEndsWithTheNode(t *testing.T) {
	m, _ := mcpTestNode(t)
	got := make(chan error, 1)
	go func() {
		b, err := m.Receive(context.Background(), Query{Wait: MaxWait})
		if err == nil {
			err = fmt.Errorf("no error, batch %+v", b)
		}
		got <- err
	}()
	for m.waits.Load() == 0 { // the wait has begun
		runtime.Gosched()
	}
	m.Close()
	err := <-got
	var e *Error
	if !errors.Is(err, ErrClosed) || !errors.As(err, &e) || e.Code != CodeUnavailable {
		t.Fatalf("Receive after the node stopped: %v, want unavailable (ErrClosed)", err)
	}
}

// A peer reference written as a key that is no key is a bad argument; a
// valid key of no trusted peer is an unknown peer.
func TestMalformedPeerKey(t *testing.T) {
	m, _ := mcpTestNode(t)
	ctx := context.Background()
	if _, err := m.SendMessage(ctx, "ed25519:AAAA", "hi", SendOptions{}); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "not a valid key") {
		t.Fatalf("send to a malformed key: %v, want %s", err, CodeBadArgument)
	}
	stranger, _ := identity.GenerateKeypair()
	if _, err := m.SendMessage(ctx, stranger.ID().String(), "hi", SendOptions{}); CodeOf(err) != CodeUnknownPeer {
		t.Fatalf("send to an unknown key: %v, want %s", err, CodeUnknownPeer)
	}
	if _, err := m.Receive(ctx, Query{From: "ed25519:not-base64"}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("inbox from a malformed key: %v, want %s", err, CodeBadArgument)
	}
}

// A request is answered finally once, also across restarts and commands
// run without a daemon: the send record keeps the final answers given,
// and a node that starts knows them.
func TestFinalAnswerOnceAcrossRestarts(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) {
		c.Store.Mode = config.StoreSQLite
		c.Outbox.Backoff = "1h" // bob never answers: the responses wait, queued
	})
	ctx := context.Background()
	d := startTest(t, h, ModeServe)
	req := arrive(t, d, bob, wire.Request("x", wire.Null()))
	req2 := arrive(t, d, bob, wire.Request("y", wire.Null()))
	if _, err := d.SendResponse(ctx, "bob", req.ID.String(), "accepted", nil, reliable); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SendResponse(ctx, "bob", req.ID.String(), "completed", json.RawMessage(`1`), reliable); err != nil {
		t.Fatal(err)
	}
	d.Close()

	// Without a daemon: the answer given before stands.
	o := startTest(t, h, ModeSend)
	if _, err := o.SendResponse(ctx, "bob", req.ID.String(), "completed", json.RawMessage(`2`), reliable); codeOfErr(err) != CodeAlreadyAnswered {
		t.Fatalf("a second final answer without a daemon: %v, want %s", err, CodeAlreadyAnswered)
	}
	// Nor progress after it, as with a daemon that gave it; another
	// request is still open.
	if _, err := o.SendResponse(ctx, "bob", req.ID.String(), "accepted", nil, reliable); codeOfErr(err) != CodeAlreadyAnswered {
		t.Fatalf("progress after the final answer, without a daemon: %v, want %s", err, CodeAlreadyAnswered)
	}
	if _, err := o.SendResponse(ctx, "bob", req2.ID.String(), "failed", nil, reliable); err != nil {
		t.Fatalf("the first final answer to another request, without a daemon: %v", err)
	}
	o.Close()

	// A daemon started again knows both.
	d = startTest(t, h, ModeServe)
	for _, id := range []identity.UUID{req.ID, req2.ID} {
		if _, err := d.SendResponse(ctx, "bob", id.String(), "failed", nil, reliable); codeOfErr(err) != CodeAlreadyAnswered {
			t.Fatalf("request %s answered again after a restart: %v, want %s", id, err, CodeAlreadyAnswered)
		}
	}
}

// A command that listens while no daemon serves the home takes only
// responses; anything else is refused as not served, not as a store
// failure (which would send the operator looking at the disk).
func TestRepliesOnlyRefusesAsNotServing(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	n := startTest(t, h, ModeReplies)
	e, err := wire.Seal(bob, identity.NewUUID(), n.h.Key.ID(), wire.Message("while alice waits"))
	if err != nil {
		t.Fatal(err)
	}
	if err := (responsesOnly{n.inbox}).Push(comms.Item{Type: comms.ItemExternal, Envelope: e}); !errors.Is(err, comms.ErrNotServing) {
		t.Fatalf("a message while only responses are taken: %v, want %v", err, comms.ErrNotServing)
	}
}

// A direct send whose process ended before its ack (a Ctrl-C, a kill)
// stays in flight in the record: once no attempt could still be running,
// it shows as failed, saying the peer may have it. One still within its
// time shows as it is.
func TestAbandonedDirectSendShowsFailed(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreSQLite })
	n := startTest(t, h, ModeSend)
	st, err := n.sentStore()
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-(h.Config.Comms.AckTimeout() + abandonedAfter + time.Second))
	recent := time.Now()
	mk := func(updated time.Time, reliable bool) identity.UUID {
		r := store.SentRecord{ID: identity.NewUUID(), To: bob.ID(), Peer: "bob", Kind: wire.TypeMessage,
			Reliable: reliable, State: store.SentInFlight, Created: updated, Updated: updated}
		if err := st.Put(r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	abandoned, live, queued := mk(old, false), mk(recent, false), mk(old, true)
	got, err := n.MessageStatus(context.Background(), []string{abandoned.String(), live.String(), queued.String()})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != StateFailed || !strings.Contains(got[0].Reason, "may or may not have it") {
		t.Errorf("abandoned direct send: %s (%q), want failed saying the peer may have it", got[0].State, got[0].Reason)
	}
	if got[1].State != StateInFlight {
		t.Errorf("a direct send within its time: %s, want %s", got[1].State, StateInFlight)
	}
	if got[2].State != StateInFlight {
		t.Errorf("a reliable attempt's record: %s, want %s (the outbox settles it)", got[2].State, StateInFlight)
	}
	list, err := n.SentList(context.Background(), SentQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == abandoned.String() && s.State != StateFailed {
			t.Errorf("sent list shows the abandoned send %s", s.State)
		}
	}
}

// A request id filter that is no request id is refused, not a filter that
// matches nothing (a wait on it would only time out).
func TestReceiveRequestIDFilterChecked(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	req := arrive(t, m, bob, wire.Request("x", wire.Null()))
	for _, id := range []string{"abc", "r-1", req.ID.String() + "0"} {
		if _, err := m.Receive(ctx, Query{RequestID: id, Limit: 10}); codeOfErr(err) != CodeBadArgument || !strings.Contains(err.Error(), "not a request id") {
			t.Errorf("request_id %q: %v, want %s", id, err, CodeBadArgument)
		}
	}
	if _, err := m.Receive(ctx, Query{RequestID: strings.ToUpper(req.ID.String()), Limit: 10}); err != nil {
		t.Errorf("a request id in capitals: %v", err)
	}
}

// countingSent counts the send record's Answered calls.
type countingSent struct {
	sentBackend
	answered atomic.Int32
}

func (c *countingSent) Answered(to identity.PeerID, request identity.UUID) (bool, error) {
	c.answered.Add(1)
	return c.sentBackend.Answered(to, request)
}

// The send record is asked once, for a request from before this
// process's start; a request received now is known from memory. A final
// answer that became a dead letter (which retry_dead_letters can revive)
// still counts after a restart.
func TestFinalAnswerAskedOfTheRecordOnce(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) {
		c.Store.Mode = config.StoreSQLite
		c.Outbox.Backoff = "20ms"
	})
	ctx := context.Background()
	d := startTest(t, h, ModeServe)
	old := arrive(t, d, bob, wire.Request("old", wire.Null()))
	dead := arrive(t, d, bob, wire.Request("dead", wire.Null()))
	// bob never answers: a reliable answer with a short life dies.
	// On a slow machine the first attempt may come after the life is over:
	// the send then says so itself.
	if _, err := d.SendResponse(ctx, "bob", dead.ID.String(), "completed", nil, SendOptions{Reliable: true, TTL: 50 * time.Millisecond}); err != nil &&
		!(CodeOf(err) == CodePeerOffline && strings.Contains(err.Error(), "dead letters")) {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the answer is a dead letter", func() bool {
		dl, _ := d.DeadLetters(ctx)
		return len(dl) == 1
	})
	d.Close()

	d = startTest(t, h, ModeServe)
	d.sent.mu.Lock() // the node's goroutines (its pruning) read it under the lock
	c := &countingSent{sentBackend: d.sent.st}
	d.sent.st = c
	d.sent.mu.Unlock()
	if _, err := d.SendResponse(ctx, "bob", dead.ID.String(), "failed", nil, reliable); codeOfErr(err) != CodeAlreadyAnswered {
		t.Fatalf("a request whose final answer is a dead letter, answered again after a restart: %v, want %s", err, CodeAlreadyAnswered)
	}
	for range 3 {
		if _, err := d.SendResponse(ctx, "bob", old.ID.String(), "accepted", nil, reliable); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.SendResponse(ctx, "bob", old.ID.String(), "completed", nil, reliable); err != nil {
		t.Fatal(err)
	}
	if got := c.answered.Load(); got != 2 {
		t.Fatalf("the send record was asked %d times for two requests from before the restart, want 2", got)
	}
	fresh := arrive(t, d, bob, wire.Request("fresh", wire.Null()))
	if _, err := d.SendResponse(ctx, "bob", fresh.ID.String(), "accepted", nil, reliable); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SendResponse(ctx, "bob", fresh.ID.String(), "completed", nil, reliable); err != nil {
		t.Fatal(err)
	}
	if got := c.answered.Load(); got != 2 {
		t.Fatalf("the send record was asked about a request received now (%d calls in all, want 2)", got)
	}
}

// The last error of a queued send is shown as the command line shows
// errors: without the packages' prefixes ("comms: ", "transport: ").
func TestLastErrorWithoutPackagePrefixes(t *testing.T) {
	m, _ := mcpOutboxNode(t, nil)
	ctx := context.Background()
	sent, err := m.SendMessage(ctx, "bob", "x", reliable)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	waitFor(t, 10*time.Second, "an attempt failed", func() bool {
		o, _ := m.Outbox(ctx)
		if len(o.Entries) == 1 && o.Entries[0].LastError != "" {
			last = o.Entries[0].LastError
			return true
		}
		return false
	})
	st, err := m.MessageStatus(ctx, []string{sent.ID})
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"outbox": last, "message_status": st[0].LastError} {
		if s == "" || strings.Contains(s, "comms: ") || strings.Contains(s, "transport: ") {
			t.Errorf("%s last error %q: want it without package prefixes", what, s)
		}
	}
}
