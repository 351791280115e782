package node

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/trust"
)

// pairedNodes starts two serving nodes, alice and bob, that trust each
// other (paired), with the SQLite store or in memory.
func pairedNodes(t *testing.T, memory bool) (alice, bob *Node) {
	t.Helper()
	home := func(name string) *Home {
		h, _ := testHome(t, name, func(c *config.Config) {
			if memory {
				c.Store.Mode = config.StoreMemory
			}
		})
		var empty *trust.List
		if err := empty.Save(h.TrustPath()); err != nil {
			t.Fatal(err)
		}
		return h
	}
	// Both homes first: their goroutine checks then run after both
	// nodes stopped.
	ha, hb := home("alice"), home("bob")
	alice, bob = startTest(t, ha, ModeServe), startTest(t, hb, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := alice.PairOffer(ctx, PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.PairAccept(ctx, o.Line, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "alice trusts bob", func() bool { _, err := alice.r.ResolvePeer("bob"); return err == nil })
	return alice, bob
}

// heldRequest is bob's inbox item for request id (nil if none).
func heldRequest(t *testing.T, n *Node, id string) *Message {
	t.Helper()
	b, err := n.Receive(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Messages {
		if b.Messages[i].ID == id {
			return &b.Messages[i]
		}
	}
	return nil
}

func requestState(t *testing.T, n *Node, id string) SentRequest {
	t.Helper()
	rs, err := n.Requests(context.Background(), RequestQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("request %s not listed in %+v", id, rs)
	return SentRequest{}
}

// noLifecycleItems fails unless every item of n's inbox is a user request or a
// response to one: no meerkat.cancel, no answer to one.
func noLifecycleItems(t *testing.T, n *Node, cancelIDs map[string]bool) {
	t.Helper()
	b, err := n.Receive(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range b.Messages {
		if strings.HasPrefix(m.Intent, ReservedIntentPrefix) || cancelIDs[m.RequestID] {
			t.Errorf("%s's inbox holds the node's own lifecycle item %+v", n.h.Config.Name, m)
		}
	}
}

// A deadline passes: the requester marks the request timed out and tells
// the peer, whose held item shows the cancellation (reason deadline) and
// the deadline; answering it stays allowed, and the late answer is
// stored at the requester without changing the state.
func TestRequestDeadline(t *testing.T) {
	for _, memory := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "memory"}[memory], func(t *testing.T) {
			alice, bob := pairedNodes(t, memory)
			alice.lc.speaks = func(identity.PeerID) bool { return true }
			ctx := context.Background()
			deadline := time.Now().Add(time.Second)
			sent, err := alice.SendRequest(ctx, "bob", "review", json.RawMessage(`{"pr":1}`), SendOptions{Deadline: deadline})
			if err != nil {
				t.Fatal(err)
			}
			if r := requestState(t, alice, sent.ID); r.State != RequestOpen || r.Deadline == nil || r.Intent != "review" {
				t.Fatalf("before the deadline: %+v", r)
			}
			waitFor(t, 20*time.Second, "bob holds the request", func() bool { return heldRequest(t, bob, sent.ID) != nil })
			held := heldRequest(t, bob, sent.ID)
			if held.Deadline == nil || held.Deadline.Sub(deadline).Abs() > time.Millisecond {
				t.Fatalf("held deadline %v, want %v", held.Deadline, deadline)
			}
			if held.Cancelled != nil {
				t.Fatalf("cancelled before the deadline: %+v", held.Cancelled)
			}
			waitFor(t, 20*time.Second, "alice times the request out", func() bool { return requestState(t, alice, sent.ID).State == RequestTimedOut })
			if st, err := alice.MessageStatus(ctx, []string{sent.ID}); err != nil || len(st) != 1 || st[0].RequestState != RequestTimedOut {
				t.Fatalf("status of the timed-out request: %+v, %v", st, err)
			}
			waitFor(t, 20*time.Second, "bob sees the cancellation", func() bool { return heldRequest(t, bob, sent.ID).Cancelled != nil })
			if c := heldRequest(t, bob, sent.ID).Cancelled; c.Reason != CancelReasonDeadline || c.At.IsZero() {
				t.Fatalf("held cancellation %+v", c)
			}
			// Answering a cancelled request is allowed; the requester
			// stores the late answer, the state stays.
			resp, err := bob.SendResponse(ctx, "alice", sent.ID, "completed", json.RawMessage(`"late"`), SendOptions{})
			if err != nil {
				t.Fatalf("answering a cancelled request: %v", err)
			}
			waitFor(t, 20*time.Second, "the late answer is recorded", func() bool { return requestState(t, alice, sent.ID).ResponseID == resp.ID })
			if r := requestState(t, alice, sent.ID); r.State != RequestTimedOut || r.FinalStatus != "completed" {
				t.Fatalf("after the late answer: %+v", r)
			}
			b, err := alice.Receive(ctx, Query{RequestID: sent.ID})
			if err != nil || len(b.Messages) != 1 || b.Messages[0].ID != resp.ID {
				t.Fatalf("the late answer in alice's inbox: %+v, %v", b.Messages, err)
			}
			noLifecycleItems(t, bob, nil)
			noLifecycleItems(t, alice, alice.lc.cancelIDs())
		})
	}
}

// cancelIDs lists the meerkat.cancel requests this node sent.
func (lc *lifecycle) cancelIDs() map[string]bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	m := map[string]bool{}
	for id := range lc.cancels {
		m[id.String()] = true
	}
	return m
}

// meerkat_deadline goes only to peers known to verify it.
func TestDeadlineFieldOnlyToMeerkatPeers(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	ctx := context.Background()
	for _, speaks := range []bool{false, true} {
		alice.lc.speaks = func(identity.PeerID) bool { return speaks }
		sent, err := alice.SendRequest(ctx, "bob", "review", nil, SendOptions{Deadline: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "bob holds the request", func() bool { return heldRequest(t, bob, sent.ID) != nil })
		if got := heldRequest(t, bob, sent.ID).Deadline != nil; got != speaks {
			t.Errorf("speaks %v: deadline shown %v", speaks, got)
		}
		if r := requestState(t, alice, sent.ID); r.Deadline == nil {
			t.Errorf("speaks %v: alice keeps no deadline: %+v", speaks, r)
		}
	}
}

// A cancel reaches the holder, with its note; only an open request this
// node sent can be cancelled.
func TestCancelRequest(t *testing.T) {
	alice, bob := pairedNodes(t, false)
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id, reason, code string
	}{
		{"not an id", "nope", "", CodeBadArgument},
		{"never sent", identity.NewUUID().String(), "", CodeUnknownRequest},
		{"reason too long", sent.ID, strings.Repeat("x", MaxCancelNote+1), CodeBadArgument},
		{"reason not UTF-8", sent.ID, "\xff", CodeBadArgument},
	} {
		if _, err := alice.CancelRequest(ctx, tc.id, tc.reason, SendOptions{}); CodeOf(err) != tc.code {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.code)
		}
	}
	c, err := alice.CancelRequest(ctx, sent.ID, "not needed any more", SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Request.State != RequestCancelled || c.Request.Note != "not needed any more" || c.Cancel.Delivery != DeliveryAcked {
		t.Fatalf("cancel: %+v", c)
	}
	// message_status and sent say so too.
	if st, err := alice.MessageStatus(ctx, []string{sent.ID}); err != nil || len(st) != 1 || st[0].RequestState != RequestCancelled || st[0].RequestNote != "not needed any more" {
		t.Fatalf("status of the cancelled request: %+v, %v", st, err)
	}
	waitFor(t, 20*time.Second, "bob sees the cancellation", func() bool {
		m := heldRequest(t, bob, sent.ID)
		return m != nil && m.Cancelled != nil
	})
	if h := heldRequest(t, bob, sent.ID); h.Cancelled.Reason != CancelReasonCancelled || h.Cancelled.Note != "not needed any more" || h.Deadline != nil {
		t.Fatalf("held: %+v %+v", h, h.Cancelled)
	}
	if _, err := alice.CancelRequest(ctx, sent.ID, "", SendOptions{}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("second cancel: %v", err)
	}
	// A request bob received is not bob's to cancel.
	if _, err := bob.CancelRequest(ctx, sent.ID, "", SendOptions{}); CodeOf(err) != CodeUnknownRequest {
		t.Fatalf("cancel by the holder: %v", err)
	}
	// Answered requests cannot be cancelled either.
	sent2, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "bob holds it", func() bool { return heldRequest(t, bob, sent2.ID) != nil })
	if _, err := bob.SendResponse(ctx, "alice", sent2.ID, "failed", nil, SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "answered", func() bool { return requestState(t, alice, sent2.ID).State == RequestAnswered })
	if _, err := alice.CancelRequest(ctx, sent2.ID, "", SendOptions{}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("cancel of an answered request: %v", err)
	}
	rs, err := alice.Requests(ctx, RequestQuery{States: []string{RequestCancelled}})
	if err != nil || len(rs) != 1 || rs[0].ID != sent.ID {
		t.Fatalf("cancelled requests: %+v, %v", rs, err)
	}
	noLifecycleItems(t, bob, nil)
	noLifecycleItems(t, alice, alice.lc.cancelIDs())
}

// A cancel applies only to a request held from the same peer: one from
// anybody else, or for a request not held, is answered failed and
// changes nothing; none is stored for the agent.
func TestCancelFromAnotherPeerIgnored(t *testing.T) {
	m, bob := mcpTestNode(t)
	carol, _ := identity.GenerateKeypair()
	req := arrive(t, m, bob, wire.Request("build", wire.Null()))
	cancelOf := func(id identity.UUID) wire.Kind {
		p, _ := wire.Map(wire.Member{Key: "request_id", Value: wire.Text(id.String())}, wire.Member{Key: "reason", Value: wire.Text("cancelled")})
		return wire.Request(IntentCancel, p)
	}
	// carol (pushed as if admitted) cancels bob's request.
	e, err := wire.Seal(carol, identity.NewUUID(), m.h.Key.ID(), cancelOf(req.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.inbox.Push(comms.Item{Type: comms.ItemExternal, Received: time.Now(), Envelope: e, PeerName: "carol"}); err != nil {
		t.Fatal(err)
	}
	arrive(t, m, bob, cancelOf(identity.NewUUID())) // not held
	if h := heldRequest(t, m, req.ID.String()); h == nil || h.Cancelled != nil {
		t.Fatalf("held after foreign cancels: %+v", h)
	}
	arrive(t, m, bob, cancelOf(req.ID))
	if h := heldRequest(t, m, req.ID.String()); h.Cancelled == nil || h.Cancelled.Reason != CancelReasonCancelled {
		t.Fatalf("held after bob's cancel: %+v", h)
	}
	if got := fromPeers(t, m); len(got) != 1 { // the node's own notices aside
		t.Fatalf("inbox holds %d items from peers, want only the request: %+v", len(got), got)
	}
}

// Accepted responses are progress: SendRequest with Wait lists them and
// waits on for the final one, and the request stays open meanwhile.
func TestAcceptedIsProgress(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	ctx := context.Background()
	type outcome struct {
		sent Sent
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		s, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Wait: time.Minute})
		done <- outcome{s, err}
	}()
	var id string
	waitFor(t, 20*time.Second, "bob holds the request", func() bool {
		b, _ := bob.Receive(ctx, Query{Kinds: []string{wire.TypeRequest}})
		if len(b.Messages) > 0 {
			id = b.Messages[0].ID
		}
		return id != ""
	})
	if _, err := bob.SendResponse(ctx, "alice", id, "accepted", json.RawMessage(`{"eta":"soon"}`), SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the accepted response arrives", func() bool {
		b, _ := alice.Receive(ctx, Query{RequestID: id})
		return len(b.Messages) == 1
	})
	if r := requestState(t, alice, id); r.State != RequestOpen || r.ResponseID != "" {
		t.Fatalf("after accepted: %+v", r)
	}
	select {
	case o := <-done:
		t.Fatalf("SendRequest returned on an accepted response: %+v, %v", o.sent, o.err)
	default:
	}
	if _, err := bob.SendResponse(ctx, "alice", id, "completed", json.RawMessage(`1`), SendOptions{}); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || len(o.sent.Responses) != 2 || o.sent.Responses[0].Status != "accepted" || o.sent.Responses[1].Status != "completed" {
		t.Fatalf("SendRequest: %+v, %v", o.sent, o.err)
	}
	if r := requestState(t, alice, id); r.State != RequestAnswered || r.FinalStatus != "completed" {
		t.Fatalf("after completed: %+v", r)
	}
}

// SendRequest with Wait and a deadline that comes first ends at the
// deadline with CodeTimedOut.
func TestWaitEndsAtDeadline(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	sent, err := alice.SendRequest(context.Background(), "bob", "build", nil, SendOptions{Wait: time.Minute, Deadline: time.Now().Add(500 * time.Millisecond)})
	if CodeOf(err) != CodeTimedOut || sent.ID == "" {
		t.Fatalf("SendRequest: %+v, %v", sent, err)
	}
	waitFor(t, 20*time.Second, "timed out", func() bool { return requestState(t, alice, sent.ID).State == RequestTimedOut })
	// The peer is told: its held request shows the cancellation, and
	// alice's outbox has delivered the cancel.
	waitFor(t, 20*time.Second, "bob sees the deadline's cancel", func() bool {
		m := heldRequest(t, bob, sent.ID)
		return m != nil && m.Cancelled != nil && m.Cancelled.Reason == "deadline"
	})
	waitFor(t, 20*time.Second, "alice's outbox is empty", func() bool {
		ob, err := alice.Outbox(context.Background())
		return err == nil && len(ob.Entries) == 0
	})
}

// SendRequest with Wait and no answer ends with CodePeerOffline (exit 3)
// and a message that says the request was delivered and stays open,
// not that it was acked and then offline.
func TestWaitEndsWithoutFinalResponse(t *testing.T) {
	alice, _ := pairedNodes(t, true)
	sent, err := alice.SendRequest(context.Background(), "bob", "build", nil, SendOptions{Wait: 300 * time.Millisecond})
	if CodeOf(err) != CodePeerOffline || sent.ID == "" {
		t.Fatalf("SendRequest: %+v, %v", sent, err)
	}
	msg := err.Error()
	for _, want := range []string{"no final response within 300ms", "acknowledged", "stays open", sent.ID} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "acked, but") {
		t.Fatalf("error %q", msg)
	}
	if r := requestState(t, alice, sent.ID); r.State != RequestOpen {
		t.Fatalf("after the wait: %+v", r)
	}
}

// A request's intent is one line of UTF-8 text of at most MaxIntentLen
// bytes, with no space at either end, not starting with the nodes'
// reserved prefix in any letter case.
func TestCheckIntent(t *testing.T) {
	for _, tc := range []struct {
		intent string
		ok     bool
	}{
		{"review", true},
		{"code.review/v2", true},
		{"résumé aufräumen", true},
		{strings.Repeat("i", MaxIntentLen), true},
		{strings.Repeat("é", MaxIntentLen/2), true},
		{"", false},
		{strings.Repeat("i", MaxIntentLen+1), false},
		{"re\nview", false},
		{"tab\there", false},
		{"\x1b[31mred", false},
		{"del\x7f", false},
		{"nul\x00", false},
		{"next line\u0085", false},
		{"line\u2028separator", false},
		{"para\u2029separator", false},
		{"rtl\u202eweiver", false},
		{"zero\u200bwidth", false},
		{"\ufeffbom", false},
		{" review", false},
		{"review ", false},
		{"code review", true},
		{"meerkat.cancel", false},
		{"Meerkat.Cancel", false},
		{"MEERKAT.x", false},
		{"meerkats", true},
		{"bad \xff byte", false},
	} {
		err := checkIntent(tc.intent)
		if ok := err == nil; ok != tc.ok || !ok && codeOfErr(err) != CodeBadArgument {
			t.Errorf("checkIntent(%q) = %v, want ok %v (else bad_argument)", tc.intent, err, tc.ok)
		}
	}
}

func TestRequestLifecycleArguments(t *testing.T) {
	m, _ := mcpTestNode(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"reserved intent", func() error {
			_, err := m.SendRequest(ctx, "bob", "meerkat.cancel", nil, SendOptions{})
			return err
		}, CodeBadArgument},
		{"intent on two lines", func() error {
			_, err := m.SendRequest(ctx, "bob", "re\nview", nil, SendOptions{})
			return err
		}, CodeBadArgument},
		{"message body not UTF-8", func() error {
			_, err := m.SendMessage(ctx, "bob", "a\xffb", SendOptions{})
			return err
		}, CodeBadArgument},
		{"intent too long", func() error {
			_, err := m.SendRequest(ctx, "bob", strings.Repeat("i", MaxIntentLen+1), nil, SendOptions{})
			return err
		}, CodeBadArgument},
		{"past deadline", func() error {
			_, err := m.SendRequest(ctx, "bob", "x", nil, SendOptions{Deadline: time.Now().Add(-time.Second)})
			return err
		}, CodeBadArgument},
		{"deadline beyond MaxTTL", func() error {
			_, err := m.SendRequest(ctx, "bob", "x", nil, SendOptions{Deadline: time.Now().Add(MaxTTL + time.Hour)})
			return err
		}, CodeBadArgument},
		// A duration out of range is refused as the same time in RFC
		// 3339 is (docs/mcp.md: bad_argument, not a malformed call).
		{"past deadline as a duration", func() error {
			d, err := ParseDeadline("-5m", time.Now())
			if err != nil {
				return err
			}
			_, err = m.SendRequest(ctx, "bob", "x", nil, SendOptions{Deadline: d})
			return err
		}, CodeBadArgument},
		{"deadline beyond MaxTTL as a duration", func() error {
			d, err := ParseDeadline("169h", time.Now())
			if err != nil {
				return err
			}
			_, err = m.SendRequest(ctx, "bob", "x", nil, SendOptions{Deadline: d})
			return err
		}, CodeBadArgument},
		{"deadline on a message", func() error {
			_, err := m.SendMessage(ctx, "bob", "x", SendOptions{Deadline: time.Now().Add(time.Hour)})
			return err
		}, CodeBadArgument},
		{"unknown state", func() error { _, err := m.Requests(ctx, RequestQuery{States: []string{"done"}}); return err }, CodeBadArgument},
		{"negative limit", func() error { _, err := m.Requests(ctx, RequestQuery{Limit: -1}); return err }, CodeBadArgument},
		{"unknown peer", func() error { _, err := m.Requests(ctx, RequestQuery{Peer: "zed"}); return err }, CodeUnknownPeer},
	} {
		if err := tc.call(); CodeOf(err) != tc.code {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.code)
		}
	}
	// A node that does not serve the home follows no requests.
	h, _ := testHome(t, "carol", nil)
	c := startTest(t, h, ModeSend)
	if _, err := c.SendRequest(ctx, "bob", "x", nil, SendOptions{Deadline: time.Now().Add(time.Hour)}); CodeOf(err) != CodeNoDaemon {
		t.Errorf("deadline without the daemon: %v", err)
	}
	if _, err := c.Requests(ctx, RequestQuery{}); CodeOf(err) != CodeNoDaemon {
		t.Errorf("Requests without the daemon: %v", err)
	}
	if _, err := c.CancelRequest(ctx, identity.NewUUID().String(), "", SendOptions{}); CodeOf(err) != CodeNoDaemon {
		t.Errorf("CancelRequest without the daemon: %v", err)
	}
}

func TestParseDeadline(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"30s", now.Add(30 * time.Second), true},
		{" 1h30m ", now.Add(90 * time.Minute), true},
		{"2026-01-02T04:00:00Z", time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC), true},
		{"2026-01-02T05:00:00.5+01:00", time.Date(2026, 1, 2, 4, 0, 0, 5e8, time.UTC), true},
		{"", time.Time{}, false},
		// The form only: the node refuses the past and beyond MaxTTL
		// (bad_argument), whether given as a duration or a time.
		{"0s", now, true},
		{"-5m", now.Add(-5 * time.Minute), true},
		{"169h", now.Add(169 * time.Hour), true},
		{"2020-01-01T00:00:00Z", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"30", time.Time{}, false}, // no unit
		{"tomorrow", time.Time{}, false},
		{"2026-01-02 04:00:00", time.Time{}, false},
	} {
		got, err := ParseDeadline(tc.in, now)
		if (err == nil) != tc.ok || tc.ok && !got.Equal(tc.want) {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{"30s", "2026-01-02T04:00:00Z", "", "1h", "9999-12-31T23:59:59.999999999+23:59"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDeadline(s, now)
		if err != nil {
			return
		}
		// What the node puts on the wire reads back as the same instant
		// (to the millisecond).
		w := formatWireDeadline(d)
		back, ok := parseWireDeadline(wire.Text(w))
		if d.Year() >= 1 && d.Year() <= 9999 && (!ok || !back.Equal(d.UTC().Truncate(time.Millisecond))) {
			t.Fatalf("%q: %v → %q → %v %v", s, d, w, back, ok)
		}
	})
}

func TestParseCancelParams(t *testing.T) {
	id := identity.NewUUID()
	for _, tc := range []struct {
		name, params string
		ok           bool
	}{
		{"minimal", `{"request_id":"` + id.String() + `","reason":"cancelled"}`, true},
		{"deadline with note", `{"request_id":"` + id.String() + `","reason":"deadline","note":"late"}`, true},
		{"extra fields ignored", `{"request_id":"` + id.String() + `","reason":"cancelled","x":[1]}`, true},
		{"no reason", `{"request_id":"` + id.String() + `"}`, false},
		{"other reason", `{"request_id":"` + id.String() + `","reason":"bored"}`, false},
		{"bad id", `{"request_id":"nope","reason":"cancelled"}`, false},
		{"id not text", `{"request_id":5,"reason":"cancelled"}`, false},
		{"note not text", `{"request_id":"` + id.String() + `","reason":"cancelled","note":{}}`, false},
		{"note too long", `{"request_id":"` + id.String() + `","reason":"cancelled","note":"` + strings.Repeat("n", MaxCancelNote+1) + `"}`, false},
		{"not an object", `["x"]`, false},
		{"null", `null`, false},
	} {
		v, err := wire.ParseJSON([]byte(tc.params))
		if err != nil {
			t.Fatal(err)
		}
		p, err := parseCancelParams(v)
		if (err == nil) != tc.ok || tc.ok && p.RequestID != id {
			t.Errorf("%s: %+v, %v", tc.name, p, err)
		}
	}
}

func FuzzParseCancelParams(f *testing.F) {
	f.Add(`{"request_id":"` + identity.NewUUID().String() + `","reason":"cancelled","note":"n"}`)
	f.Add(`{"reason":"deadline"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := wire.ParseJSON([]byte(s))
		if err != nil {
			return
		}
		p, err := parseCancelParams(v)
		if err != nil {
			return
		}
		if p.Reason != CancelReasonCancelled && p.Reason != CancelReasonDeadline || len(p.Note) > MaxCancelNote || p.RequestID.IsZero() && !strings.Contains(s, "00000000-0000-0000-0000-000000000000") {
			t.Fatalf("accepted %q as %+v", s, p)
		}
	})
}

// The open requests survive a restart (SQLite): a deadline that passed
// while the node was down times the request out when it starts again.
// The request was still queued, so it becomes a dead letter before any
// attempt, and no cancel is queued for a peer that never got it.
func TestDeadlineAcrossRestart(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	n, err := Start(h, Options{Mode: ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	sent, err := n.SendRequest(context.Background(), "bob", "build", nil, SendOptions{Reliable: true, NoWait: true, Deadline: deadline})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("send to the unreachable bob: %+v, %v", sent, err)
	}
	n.Close()
	time.Sleep(time.Until(deadline)) // the deadline passes while no node runs
	n = startTest(t, h, ModeServe)
	waitFor(t, 20*time.Second, "timed out after the restart", func() bool { return requestState(t, n, sent.ID).State == RequestTimedOut })
	dl, err := n.DeadLetters(context.Background())
	if err != nil || len(dl) != 1 || dl[0].ID != sent.ID || !strings.HasPrefix(dl[0].Reason, "deadline: ") {
		t.Fatalf("dead letters after the restart: %+v, %v", dl, err)
	}
	if o, err := n.Outbox(context.Background()); err != nil || len(o.Entries) != 0 {
		t.Fatalf("outbox after the restart: %+v, %v (want no request, no cancel)", o.Entries, err)
	}
}

// A cancel retried with its idempotency key returns the first result and
// does nothing again (without a key the retry fails: not open); the key
// with another request or reason is a conflict, send options are refused.
func TestCancelRequestIdempotent(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := SendOptions{IdempotencyKey: "cancel-build"}
	if _, err := alice.CancelRequest(ctx, sent.ID, "", SendOptions{IdempotencyKey: "k", Reliable: true}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("send options on a cancel: %v", err)
	}
	first, err := alice.CancelRequest(ctx, sent.ID, "done elsewhere", key)
	if err != nil || first.Replayed || first.Request.State != RequestCancelled || first.Cancel.Delivery != DeliveryAcked {
		t.Fatalf("first cancel: %+v, %v", first, err)
	}
	again, err := alice.CancelRequest(ctx, sent.ID, "done elsewhere", key)
	if err != nil || !again.Replayed || again.Cancel.ID != first.Cancel.ID || again.Request.ID != sent.ID {
		t.Fatalf("retried cancel: %+v, %v: want the first result replayed", again, err)
	}
	if _, err := alice.CancelRequest(ctx, sent.ID, "another reason", key); CodeOf(err) != CodeIdempotencyConflict {
		t.Fatalf("the key with another reason: %v", err)
	}
	if _, err := alice.CancelRequest(ctx, sent.ID, "done elsewhere", SendOptions{}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("a retry without the key: %v, want bad_argument (not open)", err)
	}
	// bob's node was told once: one cancel arrived for the request.
	waitFor(t, 20*time.Second, "bob sees the cancellation", func() bool {
		m := heldRequest(t, bob, sent.ID)
		return m != nil && m.Cancelled != nil
	})
	st, err := alice.SentList(ctx, SentQuery{Peer: "bob"})
	cancels := 0
	for _, s := range st {
		if s.Intent == IntentCancel {
			cancels++
		}
	}
	if err != nil || cancels != 1 {
		t.Fatalf("alice's sends: %d cancel requests (%v), want 1: %+v", cancels, err, st)
	}
}

// AwaitResponses after SendRequest without Wait waits as SendRequest with
// Wait does, the responses that came in between included; it refuses an
// id that is not a UUID, a request already answered, and a wait ended by
// the request's deadline is timed_out.
func TestAwaitResponsesAfterTheSend(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The accepted response comes before anyone waits.
	if _, err := bob.SendResponse(ctx, "alice", sent.ID, "accepted", nil, SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the accepted response arrives", func() bool {
		b, _ := alice.Receive(ctx, Query{RequestID: sent.ID})
		return len(b.Messages) == 1
	})
	done := make(chan Sent, 1)
	errs := make(chan error, 1)
	go func() {
		s, err := alice.AwaitResponses(ctx, sent.ID, time.Minute, time.Time{})
		done <- s
		errs <- err
	}()
	if _, err := bob.SendResponse(ctx, "alice", sent.ID, "completed", json.RawMessage(`1`), SendOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := <-done, <-errs
	if err != nil || got.ID != sent.ID || got.Peer != "bob" || len(got.Responses) != 2 || got.Responses[0].Status != "accepted" || got.Responses[1].Status != "completed" {
		t.Fatalf("AwaitResponses: %+v, %v", got, err)
	}
	// A waited response shows no seq (it has none there); the inbox holds
	// each under its own.
	if j, _ := json.Marshal(got); bytes.Contains(j, []byte(`"seq"`)) {
		t.Errorf("waited responses with a seq: %s", j)
	}
	if b, err := alice.Receive(ctx, Query{RequestID: sent.ID}); err != nil || len(b.Messages) != 2 || b.Messages[0].Seq == 0 || b.Messages[1].Seq == 0 {
		t.Errorf("the waited responses in the inbox: %+v, %v", b.Messages, err)
	}
	// Answered: nothing more to wait for.
	if _, err := alice.AwaitResponses(ctx, sent.ID, time.Second, time.Time{}); CodeOf(err) != CodeUnknownRequest {
		t.Fatalf("AwaitResponses of an answered request: %v, want %s", err, CodeUnknownRequest)
	}
	if _, err := alice.AwaitResponses(ctx, "bogus", time.Second, time.Time{}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("AwaitResponses(bogus): %v, want %s", err, CodeBadArgument)
	}
	// A deadline before the wait's end: timed_out.
	late, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Deadline: time.Now().Add(500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.AwaitResponses(ctx, late.ID, time.Minute, time.Now().Add(500*time.Millisecond)); CodeOf(err) != CodeTimedOut {
		t.Fatalf("AwaitResponses past the deadline: %v, want %s", err, CodeTimedOut)
	}
}

// A direct request whose delivery failed reached nobody: it is not listed
// as open, has no deadline to reach, and cannot be cancelled (no cancel
// goes to a peer that never got it).
func TestFailedRequestNotTracked(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	bob.Close()
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Deadline: time.Now().Add(300 * time.Millisecond)})
	if CodeOf(err) != CodePeerOffline || sent.ID == "" {
		t.Fatalf("SendRequest to a stopped peer: %+v, %v", sent, err)
	}
	rs, err := alice.Requests(ctx, RequestQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ID == sent.ID {
			t.Fatalf("the failed request is listed: %+v", r)
		}
	}
	if _, err := alice.CancelRequest(ctx, sent.ID, "", SendOptions{}); CodeOf(err) != CodeUnknownRequest {
		t.Fatalf("cancel of the failed request: %v, want %s", err, CodeUnknownRequest)
	}
	time.Sleep(500 * time.Millisecond) // past its deadline: nothing times out, nothing is queued
	ob, err := alice.Outbox(ctx)
	if err != nil || len(ob.Entries) != 0 {
		t.Fatalf("outbox after the deadline: %+v, %v", ob.Entries, err)
	}
}

// A reliable request that went into the outbox has no response to wait
// for yet: SendRequest with Wait, and AwaitSent after one without, say
// it is queued instead of waiting.
func TestQueuedRequestNotWaitedFor(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	bob.Close()
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Reliable: true, Wait: time.Minute})
	if CodeOf(err) != CodePeerOffline || sent.Delivery != DeliveryQueued || !strings.Contains(err.Error(), "queued for retry") {
		t.Fatalf("SendRequest with Wait to a stopped peer: %+v, %v", sent, err)
	}
	sent, err = alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Reliable: true})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("SendRequest to a stopped peer: %+v, %v", sent, err)
	}
	if _, err := AwaitSent(ctx, alice, sent, time.Minute, time.Time{}); CodeOf(err) != CodePeerOffline || !strings.Contains(err.Error(), sent.ID) {
		t.Fatalf("AwaitSent of a queued request: %v", err)
	}
}

// A reliable request still queued when its deadline passes never reached
// the peer: it becomes a dead letter (reason deadline), the agent is told
// so, and no cancel is queued after it for a peer that never got it.
func TestQueuedRequestPastDeadline(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	bob.Close()
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Reliable: true, Wait: time.Minute, Deadline: time.Now().Add(2 * time.Second)})
	if CodeOf(err) != CodePeerOffline || sent.Delivery != DeliveryQueued || !strings.Contains(err.Error(), "still queued at its deadline") {
		t.Fatalf("SendRequest with a wait and a deadline to a stopped peer: %+v, %v", sent, err)
	}
	waitFor(t, 20*time.Second, "the request times out", func() bool { return requestState(t, alice, sent.ID).State == RequestTimedOut })
	waitFor(t, 20*time.Second, "the request is a dead letter", func() bool {
		dl, err := alice.DeadLetters(ctx)
		return err == nil && len(dl) == 1 && dl[0].ID == sent.ID && strings.HasPrefix(dl[0].Reason, "deadline: ")
	})
	ob, err := alice.Outbox(ctx)
	if err != nil || len(ob.Entries) != 0 {
		t.Fatalf("outbox after the deadline: %+v, %v (want no cancel queued)", ob.Entries, err)
	}
	st, err := alice.MessageStatus(ctx, []string{sent.ID})
	if err != nil || st[0].State != StateDead {
		t.Fatalf("status of the withdrawn request: %+v, %v", st, err)
	}
	if m := waitNotice(t, alice, NoticeRequestTimedOut); m.Notice.ID != sent.ID || !strings.Contains(m.Body, "before it could be delivered") {
		t.Fatalf("notice %+v, want the timeout saying it was never delivered", m)
	}
	// Not a failed delivery: no dead_letter notice (it would be stored
	// before the timeout's, raised after it), no failed send counted.
	b, err := alice.Receive(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range b.Messages {
		if m.Notice != nil && m.Notice.Event == NoticeDeadLetter {
			t.Errorf("a dead_letter notice for the withdrawn request: %+v", m)
		}
	}
	if got := alice.sends.snapshot(); got[outbox.EventDeadLetter] != 0 {
		t.Errorf("sends counted: %v, want no dead letter", got)
	}
	// Sent again it would reach bob as a request nobody waits for: a
	// retry by id leaves it and says why; a retry of all leaves it quietly.
	if k, err := alice.RetryDeadLetters(ctx, []string{sent.ID}, false); k != 0 || CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), sent.ID) {
		t.Fatalf("retry of the withdrawn request: %d, %v", k, err)
	}
	if k, err := alice.RetryDeadLetters(ctx, nil, true); k != 0 || err != nil {
		t.Fatalf("retry of all: %d, %v; want 0 requeued, no error", k, err)
	}
	if dl, err := alice.DeadLetters(ctx); err != nil || len(dl) != 1 {
		t.Fatalf("dead letters after the refused retries: %+v, %v", dl, err)
	}
}

// A request id that is not a UUID is a bad argument to cancel and to a
// response, as it is to message_status; unknown_request is for an id
// this node has no request of.
func TestMalformedRequestID(t *testing.T) {
	alice, _ := pairedNodes(t, true)
	ctx := context.Background()
	if _, err := alice.CancelRequest(ctx, "nope", "", SendOptions{}); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), `"nope" is not a request id`) {
		t.Fatalf("cancel of a malformed id: %v, want %s", err, CodeBadArgument)
	}
	if _, err := alice.SendResponse(ctx, "bob", "nope", "completed", nil, SendOptions{}); CodeOf(err) != CodeBadArgument {
		t.Fatalf("response to a malformed id: %v, want %s", err, CodeBadArgument)
	}
	if _, err := alice.CancelRequest(ctx, "00000000-0000-4000-8000-000000000000", "", SendOptions{}); CodeOf(err) != CodeUnknownRequest {
		t.Fatalf("cancel of an unknown id: %v, want %s", err, CodeUnknownRequest)
	}
}

// Cancelling a request still queued for a peer that is away withdraws it:
// a dead letter (reason cancelled), no cancel queued behind it, and the
// result says so.
func TestCancelQueuedRequest(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	bob.Close()
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Reliable: true})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("SendRequest to a stopped peer: %+v, %v", sent, err)
	}
	// Not while an attempt is under way (it might deliver it): after the
	// second failed one (the first is retried at once), it waits 5s for
	// its next.
	waitFor(t, 20*time.Second, "the request to wait for its next attempt", func() bool {
		ob, err := alice.Outbox(ctx)
		return err == nil && len(ob.Entries) == 1 && ob.Entries[0].Attempts >= 2 && !ob.Entries[0].InFlight
	})
	c, err := alice.CancelRequest(ctx, sent.ID, "not needed", SendOptions{})
	if err != nil || !c.Withdrawn || c.Cancel != nil || c.Request.State != RequestCancelled {
		t.Fatalf("cancel of a queued request: %+v, %v", c, err)
	}
	if b, err := json.Marshal(c); err != nil || strings.Contains(string(b), `"cancel"`) {
		t.Fatalf("a withdrawn request's JSON: %s, %v (want no cancel object: none was sent)", b, err)
	}
	if ob, err := alice.Outbox(ctx); err != nil || len(ob.Entries) != 0 {
		t.Fatalf("outbox after the cancel: %+v, %v (want no request, no cancel)", ob.Entries, err)
	}
	dl, err := alice.DeadLetters(ctx)
	if err != nil || len(dl) != 1 || dl[0].ID != sent.ID || !strings.HasPrefix(dl[0].Reason, "cancelled: ") {
		t.Fatalf("dead letters: %+v, %v", dl, err)
	}
}

// A request that became a dead letter after attempts (its time-to-live
// passed with the peer away) may have reached the peer, its ack lost: a
// cancel tells it. Either way the request is over, and it is not sent
// again from the dead letters, where it would reach the peer as a
// request nobody waits for.
func TestCancelDeadLetteredRequest(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	bob.Close()
	ctx := context.Background()
	sent, err := alice.SendRequest(ctx, "bob", "build", nil, SendOptions{Reliable: true, TTL: 300 * time.Millisecond})
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("SendRequest to a stopped peer: %+v, %v", sent, err)
	}
	waitFor(t, 20*time.Second, "the request to expire into the dead letters", func() bool {
		dl, err := alice.DeadLetters(ctx)
		return err == nil && len(dl) == 1 && dl[0].ID == sent.ID
	})
	c, err := alice.CancelRequest(ctx, sent.ID, "not needed", SendOptions{})
	if err != nil || c.Withdrawn || c.Cancel == nil || c.Request.State != RequestCancelled {
		t.Fatalf("cancel of an attempted dead-lettered request: %+v, %v (want the cancel sent)", c, err)
	}
	for _, all := range []bool{false, true} {
		ids := []string{sent.ID}
		if all {
			ids = nil
		}
		n, err := alice.RetryDeadLetters(ctx, ids, all)
		if n != 0 || (!all && (CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), sent.ID))) || (all && err != nil) {
			t.Fatalf("retry (all %v) of a cancelled request's dead letter: %d requeued, %v", all, n, err)
		}
	}
	ob, err := alice.Outbox(ctx)
	if err != nil || slices.ContainsFunc(ob.Entries, func(e QueuedSend) bool { return e.ID == sent.ID }) {
		t.Fatalf("outbox after the retries: %+v, %v (the request must not be queued again)", ob.Entries, err)
	}
}

// A dead letter never attempted (it expired while the peer's breaker
// held it, say) never reached the peer: withdrawing it needs no cancel.
// One attempted may have: the peer is told.
func TestWithdrawDeadLetterNeverAttempted(t *testing.T) {
	alice, bob := pairedNodes(t, true)
	for _, attempts := range []int{0, 1} {
		e := outbox.Entry{ID: identity.NewUUID(), To: bob.h.Key.ID(), Peer: "bob", Kind: "request", Payload: []byte("x"), Created: time.Now()}
		if _, err := alice.obStore.Add(e); err != nil {
			t.Fatal(err)
		}
		if attempts > 0 {
			if err := alice.obStore.Attempted(e.ID, attempts, time.Now(), "connection refused"); err != nil {
				t.Fatal(err)
			}
		}
		if err := alice.obStore.Kill(e.ID, outbox.ReasonExpired, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := alice.lc.withdraw(bob.h.Key.ID(), e.ID.String(), "cancelled: test"); got != (attempts == 0) {
			t.Errorf("withdraw of a dead letter attempted %d times: %v, want %v", attempts, got, attempts == 0)
		}
	}
}
