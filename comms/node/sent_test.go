package node

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
)

// statusOf returns the one status of id.
func statusOf(t *testing.T, n *Node, id string) SendStatus {
	t.Helper()
	st, err := n.MessageStatus(context.Background(), []string{id})
	if err != nil || len(st) != 1 {
		t.Fatalf("MessageStatus(%s): %+v, %v", id, st, err)
	}
	return st[0]
}

// waitState waits for id's state to become want.
func waitState(t *testing.T, n *Node, id, want string) SendStatus {
	t.Helper()
	var st SendStatus
	waitFor(t, 10*time.Second, id+" to be "+want, func() bool {
		st = statusOf(t, n, id)
		return st.State == want
	})
	return st
}

// countFrom counts the items from peer in n's inbox.
func countItems(t *testing.T, n *Node, kind string) int {
	t.Helper()
	b, err := n.Receive(context.Background(), Query{Kinds: []string{kind}})
	if err != nil {
		t.Fatal(err)
	}
	return len(b.Messages)
}

// A request is followed from acked through an accepted response
// (progress, still acked) to its final answer, on durable nodes; a
// response sent shows as written.
func TestSendRecordRequestAnswered(t *testing.T) {
	ha, hb := twoHomes(t, nil)
	alice := startTest(t, ha, ModeServe)
	bob := startTest(t, hb, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	req, err := alice.SendRequest(ctx, "bob", "review", json.RawMessage(`{"pr":7}`), reliable)
	if err != nil || req.Delivery != DeliveryAcked {
		t.Fatalf("request: %+v, %v", req, err)
	}
	st := waitState(t, alice, req.ID, StateAcked)
	if st.Peer != "bob" || st.Kind != "request" || st.Intent != "review" || !st.Reliable || st.AckedAt == nil || st.Answer != nil || st.Progress != nil {
		t.Fatalf("acked status %+v", st)
	}
	acc, err := bob.SendResponse(ctx, "alice", req.ID, "accepted", nil, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the progress", func() bool {
		st = statusOf(t, alice, req.ID)
		return st.Progress != nil
	})
	if st.State != StateAcked || st.Progress.Accepted != 1 || st.Progress.ResponseID != acc.ID || st.Answer != nil {
		t.Fatalf("after accepted: %+v (progress, never the answer)", st)
	}
	if s := waitState(t, bob, acc.ID, StateWritten); s.RequestID != req.ID || s.Kind != "response" || s.Reliable {
		t.Fatalf("bob's record of his response: %+v", s)
	}
	done, err := bob.SendResponse(ctx, "alice", req.ID, "completed", json.RawMessage(`"ok"`), reliable)
	if err != nil {
		t.Fatal(err)
	}
	st = waitState(t, alice, req.ID, StateAnswered)
	if st.Answer == nil || st.Answer.ResponseID != done.ID || st.Answer.Status != "completed" || st.Progress == nil {
		t.Fatalf("answered status %+v", st)
	}

	// A message sent directly is acked; SentList shows both, newest first.
	msg, err := alice.SendMessage(ctx, "bob", "thanks", SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := statusOf(t, alice, msg.ID); s.State != StateAcked || s.Reliable {
		t.Fatalf("direct message: %+v", s)
	}
	list, err := alice.SentList(ctx, SentQuery{Peer: "bob"})
	if err != nil || len(list) != 2 || list[0].ID != msg.ID || list[1].ID != req.ID {
		t.Fatalf("SentList: %+v, %v", list, err)
	}
	if list, err := alice.SentList(ctx, SentQuery{Limit: 1}); err != nil || len(list) != 1 {
		t.Fatalf("SentList limit 1: %+v, %v", list, err)
	}
	// A response from someone else, to a request bob never got, changes nothing.
	if s := statusOf(t, bob, req.ID); s.State != StateUnknown || s.Created != nil {
		t.Fatalf("bob has no record of alice's request: %+v", s)
	}

	// The record survives a restart.
	alice.Close()
	alice = startTest(t, ha, ModeServe)
	if s := statusOf(t, alice, req.ID); s.State != StateAnswered || s.Answer.ResponseID != done.ID {
		t.Fatalf("after restart: %+v", s)
	}
}

// A reliable send to a peer that is down is queued, then dead when its
// time-to-live passes; a direct send that fails is failed.
func TestSendRecordDeadAndFailed(t *testing.T) {
	m, _ := mcpOutboxNode(t, nil) // memory mode: the record lives in the node
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := m.SendRequest(ctx, "bob", "x", nil, SendOptions{Reliable: true, TTL: 2 * time.Second})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("send: %+v, %v", sent, err)
	}
	if s := statusOf(t, m, sent.ID); s.State != StateQueued && s.State != StateInFlight {
		t.Fatalf("before it dies: %+v", s)
	}
	st := waitState(t, m, sent.ID, StateDead)
	if !strings.HasPrefix(st.Reason, "expired") || st.DiedAt == nil || st.Attempts < 1 || st.LastError == "" || st.AckedAt != nil {
		t.Fatalf("dead status %+v", st)
	}
	direct, err := m.SendMessage(ctx, "bob", "x", SendOptions{})
	if codeOfErr(err) != CodePeerOffline || direct.ID == "" {
		t.Fatalf("direct send: %+v, %v", direct, err)
	}
	if s := statusOf(t, m, direct.ID); s.State != StateFailed || s.Reason == "" {
		t.Fatalf("failed direct send: %+v", s)
	}
}

func TestMessageStatusArguments(t *testing.T) {
	m, _ := mcpTestNode(t)
	ctx := context.Background()
	many := make([]string, MaxStatusIDs+1)
	for i := range many {
		many[i] = identity.NewUUID().String()
	}
	for _, ids := range [][]string{nil, {}, many, {"not-an-id"}} {
		if _, err := m.MessageStatus(ctx, ids); codeOfErr(err) != CodeBadArgument {
			t.Errorf("MessageStatus(%d ids): %v, want bad_argument", len(ids), err)
		}
	}
	st, err := m.MessageStatus(ctx, many[:MaxStatusIDs])
	if err != nil || len(st) != MaxStatusIDs || st[0].State != StateUnknown || st[0].ID != many[0] {
		t.Fatalf("unknown ids: %d, %v", len(st), err)
	}
	for _, q := range []SentQuery{{Limit: -1}, {Limit: MaxSentList + 1}, {Peer: "carol"}} {
		if _, err := m.SentList(ctx, q); err == nil {
			t.Errorf("SentList(%+v) passed", q)
		}
	}
	if l, err := m.SentList(ctx, SentQuery{}); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("empty SentList: %#v, %v", l, err)
	}
}

func TestCheckIdempotencyKey(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"k", true},
		{"job-42 attempt:1", true},
		{"ünïcode ✓", true},
		{strings.Repeat("a", MaxIdempotencyKey), true},
		{strings.Repeat("a", MaxIdempotencyKey+1), false},
		{strings.Repeat("é", MaxIdempotencyKey/2+1), false}, // bytes, not characters
		{"", false},
		{"tab\there", false},
		{"new\nline", false},
		{"nul\x00", false},
		{"bad \xff utf8", false},
		{"\u200b", false}, // zero-width space: not printable
	} {
		if err := CheckIdempotencyKey(c.key); (err == nil) != c.ok {
			t.Errorf("CheckIdempotencyKey(%q) = %v, want ok %v", c.key, err, c.ok)
		} else if err != nil && codeOfErr(err) != CodeBadArgument {
			t.Errorf("CheckIdempotencyKey(%q): code %s", c.key, codeOfErr(err))
		}
	}
}

func FuzzCheckIdempotencyKey(f *testing.F) {
	f.Add("job-1")
	f.Add("tab\t")
	f.Add(strings.Repeat("x", 200))
	f.Fuzz(func(t *testing.T, key string) {
		if CheckIdempotencyKey(key) != nil {
			return
		}
		if key == "" || len(key) > MaxIdempotencyKey || !utf8.ValidString(key) || strings.ContainsAny(key, "\x00\n\r\t") {
			t.Fatalf("accepted %q", key)
		}
	})
}

// Sends with one idempotency key: the first sends, a retry replays its
// result without sending, other arguments conflict; across a restart too.
func TestIdempotentSends(t *testing.T) {
	ha, hb := twoHomes(t, nil)
	alice := startTest(t, ha, ModeServe)
	bob := startTest(t, hb, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := SendOptions{IdempotencyKey: "note-1"}
	first, err := alice.SendMessage(ctx, "bob", "hello once", key)
	if err != nil || first.Delivery != DeliveryAcked || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := alice.SendMessage(ctx, "bob", "hello once", key)
	if err != nil || !again.Replayed || again.ID != first.ID || again.Delivery != DeliveryAcked {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	for _, c := range []struct {
		name string
		send func() (Sent, error)
	}{
		{"another body", func() (Sent, error) { return alice.SendMessage(ctx, "bob", "hello twice", key) }},
		{"reliable", func() (Sent, error) {
			return alice.SendMessage(ctx, "bob", "hello once", SendOptions{Reliable: true, IdempotencyKey: "note-1"})
		}},
		{"another op", func() (Sent, error) { return alice.SendRequest(ctx, "bob", "hello once", nil, key) }},
	} {
		if s, err := c.send(); codeOfErr(err) != CodeIdempotencyConflict {
			t.Errorf("%s: %+v, %v; want idempotency_conflict", c.name, s, err)
		}
	}
	if _, err := alice.SendMessage(ctx, "bob", "x", SendOptions{IdempotencyKey: "bad\tkey"}); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("a bad key: %v", err)
	}
	// Params compare as JSON, however spaced.
	r1, err := alice.SendRequest(ctx, "bob", "sum", json.RawMessage(`{"a": 1}`), SendOptions{IdempotencyKey: "sum-1"})
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := alice.SendRequest(ctx, "bob", "sum", json.RawMessage(`{"a":1}`), SendOptions{IdempotencyKey: "sum-1"}); err != nil || !r2.Replayed || r2.ID != r1.ID {
		t.Fatalf("request retry: %+v, %v", r2, err)
	}

	// Durable: after a restart the key still replays.
	alice.Close()
	alice = startTest(t, ha, ModeServe)
	after, err := alice.SendMessage(ctx, "bob", "hello once", key)
	if err != nil || !after.Replayed || after.ID != first.ID {
		t.Fatalf("after restart: %+v, %v", after, err)
	}
	if n := countItems(t, bob, "message"); n != 1 {
		t.Fatalf("bob has %d messages, want exactly 1", n)
	}
	if n := countItems(t, bob, "request"); n != 1 {
		t.Fatalf("bob has %d requests, want exactly 1", n)
	}
}

// Concurrent calls with one key: exactly one sends; all get its result.
func TestIdempotentConcurrentSends(t *testing.T) {
	ha, hb := twoHomes(t, func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	alice := startTest(t, ha, ModeServe)
	bob := startTest(t, hb, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const callers = 8
	var wg sync.WaitGroup
	results := make(chan Sent, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := alice.SendMessage(ctx, "bob", "only once", SendOptions{Reliable: true, IdempotencyKey: "race"})
			if err != nil {
				t.Error(err)
				return
			}
			results <- s
		}()
	}
	wg.Wait()
	close(results)
	id, fresh := "", 0
	for s := range results {
		if id == "" {
			id = s.ID
		}
		if s.ID != id {
			t.Fatalf("two envelopes: %s and %s", id, s.ID)
		}
		if !s.Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d calls sent, want 1", fresh)
	}
	waitArrival(t, bob, id, 10*time.Second)
	if n := countItems(t, bob, "message"); n != 1 {
		t.Fatalf("bob has %d messages, want 1", n)
	}
}

// A send that fails outright releases its key: a retry sends again,
// under the same envelope id.
func TestIdempotentFailureReleasesKey(t *testing.T) {
	m, _ := mcpOutboxNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := SendOptions{IdempotencyKey: "try"}
	a, err := m.SendMessage(ctx, "bob", "x", k)
	if codeOfErr(err) != CodePeerOffline {
		t.Fatalf("first: %v", err)
	}
	b, err := m.SendMessage(ctx, "bob", "x", k)
	if codeOfErr(err) != CodePeerOffline || b.Replayed || b.ID != a.ID {
		t.Fatalf("retry after a failure: %+v, %v (want a new attempt under the first one's id %s)", b, err, a.ID)
	}
	// A reliable send that is queued counts as sent.
	k.Reliable = true
	q, err := m.SendMessage(ctx, "bob", "x", k2(k, "queued"))
	if err != nil || q.Delivery != DeliveryQueued {
		t.Fatalf("queued: %+v, %v", q, err)
	}
	if r, err := m.SendMessage(ctx, "bob", "x", k2(k, "queued")); err != nil || !r.Replayed || r.ID != q.ID {
		t.Fatalf("retry of a queued send: %+v, %v", r, err)
	}
}

func k2(o SendOptions, key string) SendOptions { o.IdempotencyKey = key; return o }

// A command without a daemon records its sends in the home's database;
// the daemon then sees them.
func TestSendRecordWithoutDaemon(t *testing.T) {
	ha, hb := twoHomes(t, nil)
	bob := startTest(t, hb, ModeServe)
	_ = bob
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := startTest(t, ha, ModeSend)
	sent, err := cmd.SendMessage(ctx, "bob", "from a command", SendOptions{Reliable: true, IdempotencyKey: "cmd-1"})
	if err != nil || sent.Delivery != DeliveryAcked {
		t.Fatalf("send: %+v, %v", sent, err)
	}
	if s := statusOf(t, cmd, sent.ID); s.State != StateAcked {
		t.Fatalf("the command's view: %+v", s)
	}
	cmd.Close()
	alice := startTest(t, ha, ModeServe)
	if s := statusOf(t, alice, sent.ID); s.State != StateAcked || !s.Reliable {
		t.Fatalf("the daemon's view: %+v", s)
	}
	if r, err := alice.SendMessage(ctx, "bob", "from a command", SendOptions{Reliable: true, IdempotencyKey: "cmd-1"}); err != nil || !r.Replayed || r.ID != sent.ID {
		t.Fatalf("the daemon replays the command's key: %+v, %v", r, err)
	}
}

// A space send with an idempotency key sends its copies once; a retry
// returns the first result; another text under the key conflicts.
func TestIdempotentSpaceSend(t *testing.T) {
	nodes := spaceNodes(t, map[string]string{"orch": `[{"kind": "*"}]`, "prop": `[{"kind": "*"}]`}, "orch", "prop")
	orch, prop := nodes["orch"], nodes["prop"]
	ctx := context.Background()
	m := SpaceMessage{Space: "build", Action: ActChat, Text: "once", SendOptions: SendOptions{Reliable: true, IdempotencyKey: "chat-1"}}
	first, err := prop.SpaceSend(ctx, m)
	if err != nil || first.Replayed || len(first.Copies) != 1 || first.Copies[0].Delivery != DeliveryAcked {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := prop.SpaceSend(ctx, m)
	if err != nil || !again.Replayed || again.ID != first.ID || again.Copies[0].ID != first.Copies[0].ID {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	m.Text = "twice"
	if _, err := prop.SpaceSend(ctx, m); codeOfErr(err) != CodeIdempotencyConflict {
		t.Fatalf("another text under the key: %v", err)
	}
	// The conflict names the call the key was used for, as the tool is
	// named.
	send := SpaceMessage{Space: "build", Kind: "chat", Payload: json.RawMessage(`{"text":"once"}`), SendOptions: SendOptions{Reliable: true, IdempotencyKey: "chat-1"}}
	if _, err := prop.SpaceSend(ctx, send); codeOfErr(err) != CodeIdempotencyConflict || !strings.Contains(err.Error(), "(space_chat with other arguments)") {
		t.Fatalf("the key used with a plain send: %v, want a conflict naming space_chat", err)
	}
	waitFor(t, 5*time.Second, "the chat arrives", func() bool { return len(meupItems(t, orch, "chat")) >= 1 })
	if n := len(meupItems(t, orch, "chat")); n != 1 {
		t.Fatalf("orch got %d chats, want 1", n)
	}
}

// An idempotency key is bound to the peer itself (its name, key and UUID
// are one peer), to the task and to the interrupt mark; not to a
// request's deadline, which a retry given as a duration moves.
func TestIdempotencyKeyArguments(t *testing.T) {
	m, bob := mcpTestNode(t) // bob is unreachable: reliable sends are queued, and kept
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := func(change func(*SendOptions)) SendOptions {
		o := SendOptions{Reliable: true, IdempotencyKey: "k1"}
		if change != nil {
			change(&o)
		}
		return o
	}
	first, err := m.SendMessage(ctx, "bob", "hi", opts(nil))
	if err != nil || first.Delivery != DeliveryQueued || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	for _, c := range []struct {
		name     string
		peer     string
		opts     SendOptions
		conflict bool
	}{
		{"the same call", "bob", opts(nil), false},
		{"bob by key", bob.ID().String(), opts(nil), false},
		{"bob by UUID", bob.ID().UUID().String(), opts(nil), false},
		{"under a task", "bob", opts(func(o *SendOptions) { o.TaskID = "t1" }), true},
		{"marked interrupt", "bob", opts(func(o *SendOptions) { o.Interrupt = true }), true},
	} {
		s, err := m.SendMessage(ctx, c.peer, "hi", c.opts)
		switch {
		case c.conflict && codeOfErr(err) != CodeIdempotencyConflict:
			t.Errorf("%s: %+v, %v; want idempotency_conflict", c.name, s, err)
		case !c.conflict && (err != nil || !s.Replayed || s.ID != first.ID):
			t.Errorf("%s: %+v, %v; want the first send replayed", c.name, s, err)
		}
	}
	dl := func(d time.Duration) SendOptions {
		return SendOptions{Reliable: true, IdempotencyKey: "k2", Deadline: time.Now().Add(d)}
	}
	r1, err := m.SendRequest(ctx, "bob", "review", nil, dl(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := m.SendRequest(ctx, "bob", "review", nil, dl(6*time.Minute)); err != nil || !r2.Replayed || r2.ID != r1.ID {
		t.Fatalf("the retry of a request with a later deadline: %+v, %v; want replayed", r2, err)
	}
}

// A reliable send from a command on a memory-mode home has nowhere to be
// kept: it fails with no_daemon before an envelope exists, so no id is
// printed for a send that never happened.
func TestReliableSendWithoutAStoreHasNoID(t *testing.T) {
	ha, _ := twoHomes(t, func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	alice := startTest(t, ha, ModeSend)
	s, err := alice.SendMessage(context.Background(), "bob", "keep me", SendOptions{Reliable: true})
	if CodeOf(err) != CodeNoDaemon || s.ID != "" {
		t.Fatalf("reliable send without a daemon on a memory home: %+v, %v; want no id, %s", s, err, CodeNoDaemon)
	}
}

// A --no-wait reliable send is not attempted before it returns: it
// carries no error of the peer's other sends.
func TestNoWaitSendCarriesNoOtherError(t *testing.T) {
	ha, _ := twoHomes(t, nil) // bob does not run
	alice := startTest(t, ha, ModeServe)
	ctx := context.Background()
	first, err := alice.SendMessage(ctx, "bob", "one", SendOptions{Reliable: true})
	if err != nil || first.Delivery != DeliveryQueued || first.LastError == "" {
		t.Fatalf("a reliable send to bob, who is down: %+v, %v", first, err)
	}
	second, err := alice.SendMessage(ctx, "bob", "two", SendOptions{Reliable: true, NoWait: true})
	if err != nil || second.Delivery != DeliveryQueued || second.LastError != "" {
		t.Fatalf("a --no-wait send behind it: %+v, %v; want queued, no error", second, err)
	}
}

// A reliable send that became a dead letter at its first attempt failed:
// its result says so, and its idempotency key is released, so a retry
// with the key is attempted again rather than replayed as queued.
func TestReliableSendDeadAtOnceFails(t *testing.T) {
	ha, _ := twoHomes(t, nil) // bob does not run
	alice := startTest(t, ha, ModeServe)
	ctx := context.Background()
	opts := SendOptions{Reliable: true, TTL: time.Nanosecond, IdempotencyKey: "k1"}
	first, err := alice.SendMessage(ctx, "bob", "x", opts)
	if err == nil || first.Delivery != DeliveryFailed {
		t.Fatalf("a reliable send that expires at once: %+v, %v; want it failed", first, err)
	}
	again, err := alice.SendMessage(ctx, "bob", "x", opts)
	if again.Replayed || err == nil || again.Delivery != DeliveryFailed {
		t.Fatalf("the same call again: %+v, %v; want it attempted again, and failed", again, err)
	}
}
