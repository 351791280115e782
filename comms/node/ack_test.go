package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
)

// pendingIDs are the ids of the unacknowledged items, in arrival order.
func pendingIDs(m *Node) []string {
	var out []string
	for after := uint64(0); ; {
		page := m.mail.List(after, 0)
		for _, en := range page.items {
			out = append(out, en.Item.Envelope.ID.String())
		}
		if after = page.next; !page.more {
			return out
		}
	}
}

// arriveMEUP stores an envelope of space from bob (the node runs no
// spaces, so it goes to the inbox directly).
func arriveMEUP(t *testing.T, m *Node, from *identity.Keypair, space, env string) wire.Envelope {
	t.Helper()
	v, err := wire.ParseJSON([]byte(env))
	if err != nil {
		t.Fatal(err)
	}
	k, err := wire.NewKind(mustMap(t, wire.Member{Key: "type", Value: wire.Text(wire.TypeMEUP)}, wire.Member{Key: "space", Value: wire.Text(space)}, wire.Member{Key: "envelope", Value: v}))
	if err != nil {
		t.Fatal(err)
	}
	e, err := wire.Seal(from, identity.NewUUID(), m.h.Key.ID(), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.mail.Push(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "bob"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// The audit's case: a read filtered to requests moves its cursor past the
// message before it; acknowledging up to that cursor without the filter
// must not take the message, which nobody has seen.
func TestAckUpToAfterFilteredReadKeepsUnseen(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	msg := arrive(t, m, bob, wire.Message("never shown"))
	req := arrive(t, m, bob, wire.Request("r", wire.Null()))
	b, err := m.Receive(ctx, Query{Kinds: []string{"request"}})
	if err != nil || len(b.Messages) != 1 || b.Cursor != 2 {
		t.Fatalf("filtered read: %+v, %v", b, err)
	}
	r, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor})
	if err != nil || r.Acked != 1 || r.Unread != 1 || r.Pending != 1 {
		t.Fatalf("ack up_to %d without the filter: %+v, %v; want the request only, the message unread", b.Cursor, r, err)
	}
	if got := pendingIDs(m); !slices.Equal(got, []string{msg.ID.String()}) {
		t.Fatalf("pending %v, want the unseen message %s (the request %s was shown)", got, msg.ID, req.ID)
	}
	// Once a read returned it, up_to takes it.
	b, _ = m.Receive(ctx, Query{})
	if r, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor}); err != nil || r.Acked != 1 || r.Unread != 0 || r.Pending != 0 {
		t.Fatalf("after reading it: %+v, %v", r, err)
	}
}

// Reads that show nothing to an agent (Peek: the MCP server's pending
// count and arrival watch) do not make items acknowledgeable by up_to;
// ids always are.
func TestAckUpToIgnoresPeekedItems(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	one := arrive(t, m, bob, wire.Message("one"))
	arrive(t, m, bob, wire.Message("two"))
	b, _ := m.Receive(ctx, Query{Peek: true, Order: OrderArrival})
	if len(b.Messages) != 2 {
		t.Fatalf("peek: %+v", b)
	}
	if r, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor}); err != nil || r.Acked != 0 || r.Unread != 2 {
		t.Fatalf("up_to after a peek: %+v, %v", r, err)
	}
	if r, err := m.Ack(ctx, AckRequest{IDs: []string{one.ID.String()}, UpTo: b.Cursor}); err != nil || r.Acked != 1 || r.Unread != 1 || r.Pending != 1 {
		t.Fatalf("by id: %+v, %v", r, err)
	}
}

// up_to applies every filter a read applies, the same way: after a read
// that showed everything, acknowledging up to its cursor with a filter
// takes exactly what a read with that filter returns.
func TestAckUpToAppliesEveryFilter(t *testing.T) {
	rid := identity.NewUUID()
	for _, tc := range []struct {
		name string
		q    Query
	}{
		{"none", Query{}},
		{"kinds", Query{Kinds: []string{"message", "response"}}},
		{"from", Query{From: "bob"}},
		{"request_id", Query{RequestID: rid.String()}},
		{"space", Query{MEUPFilter: MEUPFilter{Space: "build"}}},
		{"meup_kinds", Query{MEUPFilter: MEUPFilter{MEUPKinds: []string{"mcp/proposal"}}}},
		{"context", Query{MEUPFilter: MEUPFilter{Context: "c1"}}},
		{"kinds and from", Query{Kinds: []string{"request"}, From: "bob"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, bob := mcpTestNode(t)
			carol, _ := identity.GenerateKeypair() // not trusted: not "bob"
			ctx := context.Background()
			if _, err := m.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: "build", As: "alice"}); err != nil {
				t.Fatal(err) // a space filter names a space the node has
			}
			arrive(t, m, bob, wire.Message("m"))
			arrive(t, m, carol, wire.Message("from carol"))
			arrive(t, m, bob, wire.Request("r", wire.Null()))
			arrive(t, m, bob, wire.Response(rid, wire.StatusCompleted, wire.Null()))
			arrive(t, m, bob, wire.Response(identity.NewUUID(), wire.StatusCompleted, wire.Null()))
			arriveMEUP(t, m, bob, "build", `{"protocol":"meup/v0.1","id":"a","from":"bob","kind":"chat","context":"c1","payload":{"text":"x"}}`)
			arriveMEUP(t, m, bob, "ops", `{"protocol":"meup/v0.1","id":"b","from":"bob","kind":"mcp/proposal","context":"c2","payload":{"method":"tools/call"}}`)
			all, err := m.Receive(ctx, Query{})
			if err != nil || len(all.Messages) != 7 {
				t.Fatalf("read all: %+v, %v", all, err)
			}
			want, err := m.Receive(ctx, tc.q)
			if err != nil || len(want.Messages) == 0 {
				t.Fatalf("filtered read: %+v, %v", want, err)
			}
			var shown []string
			for _, msg := range want.Messages {
				shown = append(shown, msg.ID)
			}
			r, err := m.Ack(ctx, AckRequest{UpTo: all.Cursor, Kinds: tc.q.Kinds, From: tc.q.From, RequestID: tc.q.RequestID, MEUPFilter: tc.q.MEUPFilter})
			if err != nil || r.Acked != len(shown) || r.Unread != 0 {
				t.Fatalf("ack: %+v, %v; want the %d items the read returned", r, err, len(shown))
			}
			for _, id := range pendingIDs(m) {
				if slices.Contains(shown, id) {
					t.Errorf("%s was returned by the read but is still pending", id)
				}
			}
			if len(pendingIDs(m)) != 7-len(shown) {
				t.Errorf("pending %v: the ack took items the read did not return", pendingIDs(m))
			}
		})
	}
}

// An up_to from another epoch (the memory inbox started over) is
// refused; ids are acknowledged in any epoch.
func TestAckRefusesCursorOfAnotherEpoch(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	msg := arrive(t, m, bob, wire.Message("new mail"))
	b, _ := m.Receive(ctx, Query{})
	for _, a := range []AckRequest{
		{UpTo: 5, Epoch: "old-epoch"},
		{Seqs: []uint64{1}, Epoch: "old-epoch"},
		{UpTo: 1, IDs: []string{msg.ID.String()}, Epoch: "old-epoch"},
	} {
		r, err := m.Ack(ctx, a)
		if codeOfErr(err) != CodeBadArgument || r.Acked != 0 {
			t.Fatalf("ack %+v: %+v, %v; want bad_argument", a, r, err)
		}
	}
	if m.mail.Pending() != 1 {
		t.Fatal("a refused ack acknowledged something")
	}
	if r, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor, Epoch: b.Epoch}); err != nil || r.Acked != 1 {
		t.Fatalf("same epoch: %+v, %v", r, err)
	}
	more := arrive(t, m, bob, wire.Message("more"))
	if r, err := m.Ack(ctx, AckRequest{IDs: []string{more.ID.String()}, Epoch: "old-epoch"}); err != nil || r.Acked != 1 {
		t.Fatalf("ids in another epoch: %+v, %v", r, err)
	}
}

// A space filter names a space of this node's, as a peer filter names a
// trusted peer: another name is refused with unknown_space listing the
// spaces, on reads and acknowledgements alike, not read as "no items".
func TestSpaceFilterUnknownSpace(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	arriveMEUP(t, m, bob, "build", `{"protocol":"meup/v0.1","id":"a","from":"bob","kind":"chat","payload":{"text":"x"}}`)
	nosuch := MEUPFilter{Space: "nosuch"}
	if _, err := m.Receive(ctx, Query{MEUPFilter: nosuch}); CodeOf(err) != CodeUnknownSpace || !strings.Contains(err.Error(), "in no space") {
		t.Fatalf("read of a space in a node with none: %v", err)
	}
	for _, sp := range []string{"build", "ops"} {
		if _, err := m.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: sp, As: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Receive(ctx, Query{MEUPFilter: nosuch})
	if CodeOf(err) != CodeUnknownSpace || !strings.Contains(err.Error(), `"nosuch"`) || !strings.Contains(err.Error(), "the spaces are build, ops") {
		t.Fatalf("read of an unknown space: %v", err)
	}
	if _, err := m.Ack(ctx, AckRequest{UpTo: 1, MEUPFilter: nosuch}); CodeOf(err) != CodeUnknownSpace {
		t.Fatalf("ack with an unknown space: %v", err)
	}
	if b, err := m.Receive(ctx, Query{MEUPFilter: MEUPFilter{Space: "ops"}}); err != nil || len(b.Messages) != 0 {
		t.Fatalf("read of a known space without items: %+v, %v", b, err)
	}
	if b, err := m.Receive(ctx, Query{MEUPFilter: MEUPFilter{Space: "build"}}); err != nil || len(b.Messages) != 1 {
		t.Fatalf("read of a known space: %+v, %v", b, err)
	}
}

// The items of a space this node has no more (left or deleted here) stay
// in the inbox: a filter by its name reads and acknowledges them, and
// only once none match is the name unknown_space.
func TestSpaceFilterRemovedSpace(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	for _, sp := range []string{"build", "ops"} {
		if _, err := m.SpaceEdit(ctx, SpaceEdit{Op: SpaceCreate, Space: sp, As: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	arriveMEUP(t, m, bob, "build", `{"protocol":"meup/v0.1","id":"a","from":"bob","kind":"chat","payload":{"text":"x"}}`)
	arriveMEUP(t, m, bob, "ops", `{"protocol":"meup/v0.1","id":"b","from":"bob","kind":"chat","payload":{"text":"y"}}`)
	if _, err := m.SpaceEdit(ctx, SpaceEdit{Op: SpaceDelete, Space: "build"}); err != nil {
		t.Fatal(err)
	}
	build := MEUPFilter{Space: "build"}
	b, err := m.Receive(ctx, Query{MEUPFilter: build})
	if err != nil || len(b.Messages) != 1 || b.Messages[0].MEUP == nil || b.Messages[0].MEUP.Space != "build" {
		t.Fatalf("read of a deleted space's items: %+v, %v", b, err)
	}
	if r, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor, MEUPFilter: build}); err != nil || r.Acked != 1 || r.Pending != 1 {
		t.Fatalf("ack of a deleted space's items: %+v, %v", r, err)
	}
	// Ids are acknowledged whatever the filters say, as with a known space.
	ops, err := m.Receive(ctx, Query{MEUPFilter: MEUPFilter{Space: "ops"}})
	if err != nil || len(ops.Messages) != 1 {
		t.Fatalf("read of ops: %+v, %v", ops, err)
	}
	if r, err := m.Ack(ctx, AckRequest{IDs: []string{ops.Messages[0].ID}, MEUPFilter: build}); err != nil || r.Acked != 1 || r.Pending != 0 {
		t.Fatalf("ack by id with the deleted space's filter: %+v, %v", r, err)
	}
	// None left: the name is unknown again, on reads, waiting reads and acks.
	for _, q := range []Query{{MEUPFilter: build}, {MEUPFilter: build, Wait: MaxWait}} {
		if _, err := m.Receive(ctx, q); CodeOf(err) != CodeUnknownSpace || !strings.Contains(err.Error(), "the spaces are ops") {
			t.Fatalf("read (wait %v) once its items are gone: %v", q.Wait, err)
		}
	}
	if _, err := m.Ack(ctx, AckRequest{UpTo: b.Cursor + 10, MEUPFilter: build}); CodeOf(err) != CodeUnknownSpace {
		t.Fatalf("ack once its items are gone: %v", err)
	}
}

// An id that is no id is refused, not counted as nothing to acknowledge;
// ids are matched however their letters are cased.
func TestAckRefusesNonIDs(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	e := arrive(t, m, bob, wire.Message("hi"))
	if _, err := m.Receive(ctx, Query{}); err != nil {
		t.Fatal(err)
	}
	if r, err := m.Ack(ctx, AckRequest{IDs: []string{"nope", e.ID.String()}}); CodeOf(err) != CodeBadArgument || r.Acked != 0 {
		t.Fatalf("ack of a non-id: %+v, %v; want %s and nothing acknowledged", r, err, CodeBadArgument)
	}
	if r, err := m.Ack(ctx, AckRequest{IDs: []string{strings.ToUpper(e.ID.String())}}); err != nil || r.Acked != 1 {
		t.Fatalf("ack of the id in capitals: %+v, %v", r, err)
	}
}

// Ids that name no pending item are listed back, in the order given and
// once each: one acknowledged before, and a request's id (the request,
// not a response to it), beside the item acknowledged.
func TestAckListsIDsNotFound(t *testing.T) {
	m, bob := mcpTestNode(t)
	ctx := context.Background()
	first := arrive(t, m, bob, wire.Message("one"))
	second := arrive(t, m, bob, wire.Message("two"))
	if _, err := m.Receive(ctx, Query{}); err != nil {
		t.Fatal(err)
	}
	if r, err := m.Ack(ctx, AckRequest{IDs: []string{first.ID.String()}}); err != nil || r.Acked != 1 || len(r.NotFound) != 0 {
		t.Fatalf("ack of a pending item: %+v, %v", r, err)
	}
	request := identity.NewUUID().String()
	r, err := m.Ack(ctx, AckRequest{IDs: []string{first.ID.String(), second.ID.String(), request, first.ID.String()}})
	if err != nil || r.Acked != 1 || !slices.Equal(r.NotFound, []string{first.ID.String(), request}) {
		t.Fatalf("ack of one pending item, one acknowledged before and a request id: %+v, %v; want not_found [%s %s]", r, err, first.ID, request)
	}
}

// In priority order a read returns an interrupt above its cursor: up_to
// that cursor acknowledges nothing and says how many items reads returned
// above it (acknowledge those by id); by id it goes.
func TestAckUpToBelowPriorityRead(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	n := startTest(t, h, ModeServe)
	ctx := context.Background()
	q0 := arrive(t, n, bob, wire.Message("q0")) // handled: the cursor starts past it
	if _, err := n.Receive(ctx, Query{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Ack(ctx, AckRequest{IDs: []string{q0.ID.String()}}); err != nil {
		t.Fatal(err)
	}
	arrive(t, n, bob, wire.Message("q1"))
	arrive(t, n, bob, wire.Message("q2"))
	arrive(t, n, bob, with(t, wire.Message("q3 now"), "handling_mode", "steer"))
	b, err := n.Receive(ctx, Query{Limit: 1})
	if err != nil || len(b.Messages) != 1 || b.Messages[0].Class != ClassInterrupt || b.Cursor == 0 || b.Cursor >= b.Messages[0].Seq {
		t.Fatalf("priority read: %+v, %v", b, err)
	}
	a, err := n.Ack(ctx, AckRequest{UpTo: b.Cursor, Epoch: b.Epoch})
	if err != nil || a.Acked != 0 || a.Above != 1 || a.Pending != 3 {
		t.Fatalf("up_to the cursor: %+v, %v; want nothing acknowledged, 1 above", a, err)
	}
	a, err = n.Ack(ctx, AckRequest{IDs: []string{b.Messages[0].ID}})
	if err != nil || a.Acked != 1 || a.Above != 0 || a.Pending != 2 {
		t.Fatalf("by id: %+v, %v", a, err)
	}
}
