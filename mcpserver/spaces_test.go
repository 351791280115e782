package mcpserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Each space tool turns its arguments into the one SpaceMessage the node
// carries out; JSON values pass through exactly as sent.
func TestSpaceToolsMapArguments(t *testing.T) { bothEras(t, testSpaceToolsMapArguments) }

func testSpaceToolsMapArguments(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	reliable := node.SendOptions{Reliable: true}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want node.SpaceMessage
	}{
		{"space_send", map[string]any{"space": "build", "kind": "reasoning/thought", "payload": map[string]any{"n": 5}, "to": []any{"bob"}, "correlation_id": []any{"x"}, "context": "c1"},
			node.SpaceMessage{Space: "build", Action: node.ActSend, Kind: "reasoning/thought", Payload: json.RawMessage(`{"n":5}`), To: []string{"bob"}, CorrelationID: []string{"x"}, Context: "c1", SendOptions: reliable}},
		{"space_chat", map[string]any{"space": "build", "text": "hi", "reliable": false},
			node.SpaceMessage{Space: "build", Action: node.ActChat, Text: "hi"}},
		{"space_propose", map[string]any{"space": "build", "method": "tools/call", "params": map[string]any{"name": "read_file"}, "to": []any{"worker"}, "ttl_seconds": 60},
			node.SpaceMessage{Space: "build", Action: node.ActPropose, Method: "tools/call", Params: json.RawMessage(`{"name":"read_file"}`), To: []string{"worker"}, SendOptions: node.SendOptions{Reliable: true, TTL: time.Minute}}},
		{"space_fulfill", map[string]any{"space": "build", "proposal_id": "p1"},
			node.SpaceMessage{Space: "build", Action: node.ActFulfill, Proposal: "p1", SendOptions: reliable}},
		{"space_respond", map[string]any{"space": "build", "request_id": "r1", "error": map[string]any{"code": 1}},
			node.SpaceMessage{Space: "build", Action: node.ActRespond, Request: "r1", Error: json.RawMessage(`{"code":1}`), SendOptions: reliable}},
		{"space_reject", map[string]any{"space": "build", "proposal_id": "p1", "reason": "no"},
			node.SpaceMessage{Space: "build", Action: node.ActReject, Proposal: "p1", Reason: "no", SendOptions: reliable}},
		{"space_withdraw", map[string]any{"space": "build", "proposal_id": "p1"},
			node.SpaceMessage{Space: "build", Action: node.ActWithdraw, Proposal: "p1", SendOptions: reliable}},
		{"space_grant", map[string]any{"space": "build", "recipient": "carol", "capabilities": []any{map[string]any{"kind": "mcp/request"}}},
			node.SpaceMessage{Space: "build", Action: node.ActGrant, Recipient: "carol", Capabilities: json.RawMessage(`[{"kind":"mcp/request"}]`), SendOptions: reliable}},
		{"space_revoke", map[string]any{"space": "build", "recipient": "carol", "grant_id": "g1"},
			node.SpaceMessage{Space: "build", Action: node.ActRevoke, Recipient: "carol", GrantID: "g1", SendOptions: reliable}},
	} {
		res, out, err := call(t, c, tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", tc.tool, err, text(res))
		}
		f.mu.Lock()
		got := f.spaceMsgs[len(f.spaceMsgs)-1]
		f.mu.Unlock()
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s sent\n%+v\nwant\n%+v", tc.tool, got, tc.want)
		}
		if out["id"] != "m-1" || out["pending"] == nil || out["note"] == nil {
			t.Errorf("%s result %v: want the MEUP id, pending and a note for the queued copy", tc.tool, out)
		}
	}
	res, _, err := call(t, c, "space_chat", map[string]any{"space": "nowhere", "text": "hi"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "unknown_space: ") {
		t.Fatalf("unknown space: %v %s", err, text(res))
	}
	_, out, err := call(t, c, "list_spaces", nil)
	if err != nil || len(out["spaces"].([]any)) != 1 {
		t.Fatalf("list_spaces: %v %v", out, err)
	}
	_, out, err = call(t, c, "list_proposals", map[string]any{"state": "pending"})
	if err != nil || len(out["proposals"].([]any)) != 1 {
		t.Fatalf("list_proposals: %v %v", out, err)
	}
}

// Malformed calls of the space tools are invalid params, refused before
// they reach the node.
func TestSpaceToolsInvalidParams(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"space_send", map[string]any{"space": "build"}},
		{"space_send", map[string]any{"kind": "chat"}},
		{"space_send", map[string]any{"space": "build", "kind": "chat", "to": "bob"}},
		{"space_chat", map[string]any{"space": "build"}},
		{"space_chat", map[string]any{"space": "build", "text": ""}},
		{"space_chat", map[string]any{"space": 3, "text": "x"}},
		{"space_propose", map[string]any{"space": "build"}},
		{"space_fulfill", map[string]any{"space": "build"}},
		{"space_respond", map[string]any{"space": "build", "request_id": "r"}},
		{"space_respond", map[string]any{"space": "build", "request_id": "r", "result": 1, "error": 2}},
		{"space_reject", map[string]any{"space": "build", "proposal_id": ""}},
		{"space_grant", map[string]any{"space": "build", "recipient": "c"}},
		{"space_revoke", map[string]any{"space": "build", "recipient": "c"}},
		{"space_chat", map[string]any{"space": "build", "text": "x", "reliable": false, "ttl_seconds": 5}},
		{"list_proposals", map[string]any{"space": 1}},
	} {
		if err := checkArgs(tc.tool, tc.args); err == nil {
			t.Errorf("%s %v: want invalid params", tc.tool, tc.args)
		}
	}
	for _, ok := range []struct {
		tool string
		args map[string]any
	}{
		{"space_revoke", map[string]any{"space": "build", "recipient": "c", "capabilities": []any{map[string]any{"kind": "chat"}}}},
		{"list_proposals", map[string]any{}},
		{"receive_messages", map[string]any{"kinds": []any{"meup"}, "space": "build", "meup_kinds": []any{"chat"}, "context": "c"}},
	} {
		if err := checkArgs(ok.tool, ok.args); err != nil {
			t.Errorf("%s %v: %v", ok.tool, ok.args, err)
		}
	}
}

// edit_space carries its arguments to the node's SpaceEdit; the result is
// the space as the node shows it.
func TestEditSpaceTool(t *testing.T) { bothEras(t, testEditSpaceTool) }

func testEditSpaceTool(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	_, out, err := call(t, c, "edit_space", map[string]any{"op": "add", "space": "build", "peer": "bob", "id": "worker", "capabilities": []any{map[string]any{"kind": "chat"}}})
	if err != nil || out["space"].(map[string]any)["name"] != "build" {
		t.Fatalf("add: %v %v", out, err)
	}
	f.mu.Lock()
	got := f.edits[len(f.edits)-1]
	f.mu.Unlock()
	want := node.SpaceEdit{Op: "add", Space: "build", Peer: "bob", ID: "worker", Capabilities: json.RawMessage(`[{"kind":"chat"}]`)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("edit %+v, want %+v", got, want)
	}
	res, _, err := call(t, c, "edit_space", map[string]any{"op": "add", "space": "nope", "peer": "bob", "id": "w"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "unknown_space: ") {
		t.Fatalf("unknown space: %v %s", err, text(res))
	}
	for _, bad := range []map[string]any{
		{"space": "build"},
		{"op": "rename", "space": "build"},
		{"op": "create", "space": "build", "as": "me", "delivery": "some"},
		{"op": "add"},
		{"op": "add", "space": "build", "capabilities": map[string]any{"kind": "chat"}},
	} {
		if err := checkArgs("edit_space", bad); err == nil {
			t.Errorf("edit_space %v: want invalid params", bad)
		}
	}
}

// The note of a space send says what became of the copies: none to
// send, queued, skipped, or nothing sent at all.
func TestSpaceNote(t *testing.T) {
	queued := node.SpaceCopy{Delivery: node.DeliveryQueued}
	skipped := node.SpaceCopy{Skipped: "not trusted"}
	acked := node.SpaceCopy{Delivery: node.DeliveryAcked}
	for _, tc := range []struct {
		copies []node.SpaceCopy
		want   string
	}{
		{nil, "no other member to send to"},
		{[]node.SpaceCopy{acked}, ""},
		{[]node.SpaceCopy{acked, queued}, "1 copies not delivered yet"},
		{[]node.SpaceCopy{queued, skipped}, "1 copies queued"},
		{[]node.SpaceCopy{acked, skipped}, "1 members skipped"},
		{[]node.SpaceCopy{skipped, skipped}, "nothing was sent: every member was skipped"},
	} {
		got := spaceNote(node.SpaceSent{Copies: tc.copies})
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("copies %+v: note %q, want %q", tc.copies, got, tc.want)
		}
	}
}

// A queued send's note says what holds it back: the sends ahead of it,
// the peer's open breaker.
func TestQueuedNote(t *testing.T) {
	until := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		sent node.Sent
		want []string
		not  []string
	}{
		{node.Sent{Delivery: node.DeliveryQueued}, []string{"keeps retrying", "drop_queued"}, []string{"behind", "breaker holds"}},
		{node.Sent{Delivery: node.DeliveryQueued, Behind: 3}, []string{"behind 3 earlier sends"}, []string{"breaker holds"}},
		{node.Sent{Delivery: node.DeliveryQueued, Behind: 1, BreakerOpenUntil: &until}, []string{"behind 1 earlier", "breaker holds it until 2026-11-30T12:00:00Z"}, nil},
		{node.Sent{Delivery: node.DeliveryAcked}, nil, []string{"retrying"}},
	} {
		note := queuedNote(tc.sent)
		for _, w := range tc.want {
			if !strings.Contains(note, w) {
				t.Errorf("%+v: note %q lacks %q", tc.sent, note, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(note, w) {
				t.Errorf("%+v: note %q has %q", tc.sent, note, w)
			}
		}
	}
}
