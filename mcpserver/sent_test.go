package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/node"
)

// answeredID is the request the fake node's MessageStatus has answered.
const answeredID = "0f9c1d5e-8b2a-4c3e-9d7f-1a2b3c4d5e6f"

func (f *fakeNode) MessageStatus(_ context.Context, ids []string) ([]node.SendStatus, error) {
	out := make([]node.SendStatus, len(ids))
	for i, id := range ids {
		out[i] = node.SendStatus{ID: id, State: node.StateUnknown}
		if id == answeredID {
			out[i] = node.SendStatus{ID: id, State: node.StateAnswered, Peer: "bob", Kind: "request",
				Answer: &node.SendAnswer{ResponseID: "resp-1", Status: "completed"}, Progress: &node.SendProgress{Accepted: 1, ResponseID: "acc-1"}}
		}
	}
	return out, nil
}

func (f *fakeNode) SentList(context.Context, node.SentQuery) ([]node.SendStatus, error) {
	return []node.SendStatus{}, nil
}

// message_status passes the ids through and returns the statuses with
// their answer and progress, validated against its output schema by the
// client; bad ids lists are invalid params.
func TestMessageStatusTool(t *testing.T) { bothEras(t, testMessageStatusTool) }

func testMessageStatusTool(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	other := "1f9c1d5e-8b2a-4c3e-9d7f-1a2b3c4d5e6f"
	res, out, err := call(t, c, "message_status", map[string]any{"ids": []any{"", answeredID, "x", other}})
	if err != nil || res.IsError {
		t.Fatalf("message_status: %v %s", err, text(res))
	}
	st, _ := out["statuses"].([]any)
	if len(st) != 4 || out["pending"] == nil || st[0].(map[string]any)["reason"] != "not an envelope id" {
		t.Fatalf("result %v", out)
	}
	st = st[1:] // the empty id, answered in its place
	// An id that is no envelope id is answered on its own, in its place.
	if bad := st[1].(map[string]any); bad["id"] != "x" || bad["state"] != "unknown" || bad["reason"] != "not an envelope id" {
		t.Fatalf("the malformed id's status %v", bad)
	}
	st = append(st[:1], st[2])
	first := st[0].(map[string]any)
	answer, _ := first["answer"].(map[string]any)
	progress, _ := first["progress"].(map[string]any)
	if first["state"] != "answered" || answer["response_id"] != "resp-1" || progress["accepted"] != float64(1) {
		t.Fatalf("first status %v", first)
	}
	if st[1].(map[string]any)["state"] != "unknown" {
		t.Fatalf("second status %v", st[1])
	}
	many := make([]any, node.MaxStatusIDs+1)
	for i := range many {
		many[i] = "x"
	}
	for _, bad := range []map[string]any{{}, {"ids": []any{}}, {"ids": many}, {"ids": "r-1"}, {"ids": []any{1}}} {
		if err := checkArgs("message_status", bad); err == nil {
			t.Errorf("checkArgs(message_status, %v) passed", bad)
		}
	}
}

// idempotency_key reaches the node on every send tool; a key that is not
// printable or too long is an invalid-params error.
func TestIdempotencyKeyArgument(t *testing.T) { bothEras(t, testIdempotencyKeyArgument) }

func testIdempotencyKeyArgument(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"send_message", map[string]any{"peer": "bob", "body": "hi"}},
		{"send_request", map[string]any{"peer": "bob", "intent": "x"}},
		{"send_response", map[string]any{"peer": "bob", "request_id": "req-known", "status": "completed"}},
	} {
		tc.args["idempotency_key"] = "job-42 try"
		res, _, err := call(t, c, tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", tc.tool, err, text(res))
		}
		if k := f.lastOpts().IdempotencyKey; k != "job-42 try" {
			t.Errorf("%s: the node got key %q", tc.tool, k)
		}
		for _, bad := range []any{"", "tab\there", strings.Repeat("k", node.MaxIdempotencyKey+1), 7} {
			tc.args["idempotency_key"] = bad
			if err := checkArgs(tc.tool, tc.args); err == nil {
				t.Errorf("%s with key %q passed", tc.tool, bad)
			}
		}
	}
}
