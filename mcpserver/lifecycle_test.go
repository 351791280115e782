package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// The fake node's lifecycle: one open request "r-1"; cancelling it
// answers as the node would, anything else is unknown.
func (f *fakeNode) CancelRequest(_ context.Context, id, reason string, opts node.SendOptions) (node.Cancelled, error) {
	if id != "r-1" {
		return node.Cancelled{}, &node.Error{Code: node.CodeUnknownRequest, Msg: "this node sent no request " + id}
	}
	return node.Cancelled{
		Request:  node.SentRequest{ID: id, Peer: "bob", Intent: "build", State: node.RequestCancelled, Note: reason},
		Cancel:   &node.Sent{ID: "c-1", Peer: "bob", Delivery: node.DeliveryAcked},
		Replayed: opts.IdempotencyKey == "used-before",
	}, nil
}

func (f *fakeNode) Requests(_ context.Context, q node.RequestQuery) ([]node.SentRequest, error) {
	d := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	all := []node.SentRequest{
		{ID: "r-2", Peer: "bob", Intent: "test", State: node.RequestTimedOut, Deadline: &d},
		{ID: "r-1", Peer: "bob", Intent: "build", State: node.RequestOpen},
	}
	var out []node.SentRequest
	for _, r := range all {
		if len(q.States) == 0 || q.States[0] == r.State {
			out = append(out, r)
		}
	}
	return out, nil
}

func TestLifecycleTools(t *testing.T) { bothEras(t, testLifecycleTools) }

func testLifecycleTools(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	res, out, err := call(t, c, "cancel_request", map[string]any{"request_id": "r-1", "reason": "not needed"})
	if err != nil || res.IsError {
		t.Fatalf("cancel_request: %v %s", err, text(res))
	}
	req, _ := out["request"].(map[string]any)
	if req["state"] != "cancelled" || req["note"] != "not needed" || out["pending"] != float64(0) {
		t.Fatalf("cancel_request result %v", out)
	}
	// The key reaches the node, whose replay shows in the result.
	res, out, err = call(t, c, "cancel_request", map[string]any{"request_id": "r-1", "idempotency_key": "used-before"})
	if err != nil || res.IsError || out["replayed"] != true {
		t.Fatalf("cancel_request with a key used before: %v %v %s", out, err, text(res))
	}
	res, _, err = call(t, c, "cancel_request", map[string]any{"request_id": "r-9"})
	if err != nil || !res.IsError || !contains(text(res), "unknown_request") {
		t.Fatalf("cancel of an unknown request: %v %s", err, text(res))
	}
	res, out, err = call(t, c, "list_requests", map[string]any{"states": []any{"timed_out"}})
	if err != nil || res.IsError {
		t.Fatalf("list_requests: %v %s", err, text(res))
	}
	rs, _ := out["requests"].([]any)
	if len(rs) != 1 || rs[0].(map[string]any)["id"] != "r-2" || rs[0].(map[string]any)["deadline"] != "2030-01-02T03:04:05Z" {
		t.Fatalf("list_requests result %v", out)
	}
	// send_request passes the deadline: a duration from now.
	before := time.Now()
	if res, _, err := call(t, c, "send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "90s"}); err != nil || res.IsError {
		t.Fatalf("send_request with deadline: %v %s", err, text(res))
	}
	f.mu.Lock()
	d := f.opts[len(f.opts)-1].Deadline
	f.mu.Unlock()
	if d.Before(before.Add(90*time.Second)) || d.After(time.Now().Add(90*time.Second)) {
		t.Fatalf("deadline passed on: %v", d)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// The lifecycle tools' argument checks: the protocol's invalid params.
func TestLifecycleArgsInvalid(t *testing.T) {
	for _, c := range []struct {
		tool string
		args map[string]any
		ok   bool
	}{
		{"cancel_request", map[string]any{"request_id": "r-1"}, true},
		{"cancel_request", map[string]any{"request_id": "r-1", "reason": "why"}, true},
		{"cancel_request", map[string]any{}, false},
		{"cancel_request", map[string]any{"request_id": 5}, false},
		{"cancel_request", map[string]any{"request_id": "r-1", "reason": 1}, false},
		{"cancel_request", map[string]any{"request_id": "r-1", "idempotency_key": "cancel-1"}, true},
		{"cancel_request", map[string]any{"request_id": "r-1", "idempotency_key": "a\nb"}, false},
		{"cancel_request", map[string]any{"request_id": "r-1", "idempotency_key": 7}, false},
		{"task_complete", map[string]any{"task_id": "t", "idempotency_key": "done-t"}, true},
		{"task_complete", map[string]any{"task_id": "t", "idempotency_key": ""}, false},
		{"list_requests", map[string]any{}, true},
		{"list_requests", map[string]any{"states": []any{"open", "answered", "timed_out", "cancelled"}, "limit": float64(5)}, true},
		{"list_requests", map[string]any{"states": []any{"done"}}, false},
		{"list_requests", map[string]any{"states": "open"}, false},
		{"list_requests", map[string]any{"limit": float64(0)}, false},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "2030-01-02T03:04:05Z"}, true},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "soon"}, false},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": 30}, false},
		// In the past or more than a week away, as a duration or as a
		// time: the node's bad_argument, not invalid params.
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "-5s"}, true},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "0s"}, true},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "169h"}, true},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "2001-01-01T00:00:00Z"}, true},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "deadline": "5 minutes"}, false},
	} {
		if err := checkArgs(c.tool, c.args); (err == nil) != c.ok {
			t.Errorf("checkArgs %s %v: %v, want ok=%v", c.tool, c.args, err, c.ok)
		}
	}
}
