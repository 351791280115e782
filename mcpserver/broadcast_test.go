package mcpserver

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// The fake node's broadcast and task methods record their calls.

type broadcastCalls struct {
	broadcasts []node.BroadcastArgs
	completes  []string // task id + " " + result
	queries    []node.TaskQuery
	waits      []string // task id + " " + wait
}

var (
	fakeCallsMu sync.Mutex
	fakeCalls   = map[*fakeNode]*broadcastCalls{}
)

func (f *fakeNode) calls() *broadcastCalls {
	fakeCallsMu.Lock()
	defer fakeCallsMu.Unlock()
	if fakeCalls[f] == nil {
		fakeCalls[f] = &broadcastCalls{}
	}
	return fakeCalls[f]
}

func (f *fakeNode) Broadcast(_ context.Context, a node.BroadcastArgs) (node.Broadcasted, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls().broadcasts = append(f.calls().broadcasts, a)
	if a.Group == "qa" {
		return node.Broadcasted{}, &node.Error{Code: node.CodeBadArgument, Msg: `no group "qa": the trusted peers' groups are ops`}
	}
	return node.Broadcasted{ID: "b-1", TaskID: a.TaskID, Copies: []node.BroadcastCopy{
		{Peer: "bob", PubKey: "ed25519:bob", ID: "c-1", Delivery: node.DeliveryAcked, Marked: true},
		{Peer: "carol", PubKey: "ed25519:carol", ID: "c-2", Delivery: node.DeliveryQueued, LastError: "offline"},
	}}, nil
}

func (f *fakeNode) TaskComplete(_ context.Context, id string, result json.RawMessage, opts node.SendOptions) (node.TaskCompleted, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls().completes = append(f.calls().completes, id+" "+string(result)+opts.IdempotencyKey)
	if id == "nope" {
		return node.TaskCompleted{}, &node.Error{Code: node.CodeUnknownTask, Msg: "no task"}
	}
	return node.TaskCompleted{Task: node.Task{ID: id, State: node.TaskStateCompleted, Participants: []node.TaskParticipant{}, CompletedBy: "self", Result: result}, Copies: []node.BroadcastCopy{}}, nil
}

func (f *fakeNode) Tasks(_ context.Context, q node.TaskQuery) (node.TaskList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls().queries = append(f.calls().queries, q)
	return node.TaskList{Tasks: []node.Task{{ID: "t1", State: node.TaskStateOpen, Participants: []node.TaskParticipant{{Peer: "bob", PubKey: "ed25519:bob"}}}}, More: true, Cursor: "5/t1"}, nil
}

func (f *fakeNode) WaitTask(_ context.Context, id string, wait time.Duration) (node.TaskWaited, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls().waits = append(f.calls().waits, id+" "+wait.String())
	return node.TaskWaited{Task: node.Task{ID: id, State: node.TaskStateOpen, Participants: []node.TaskParticipant{}}, TimedOut: true}, nil
}

// The broadcast and task tools carry their arguments to the node and
// return its answer with pending.
func TestBroadcastTools(t *testing.T) { bothEras(t, testBroadcastTools) }

func testBroadcastTools(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	res, out, err := call(t, c, "broadcast", map[string]any{"body": "hi all", "group": "ops", "task_id": "t1"})
	if err != nil || res.IsError || out["broadcast_id"] != "b-1" || out["pending"] == nil || len(out["copies"].([]any)) != 2 {
		t.Fatalf("broadcast: %v %v %s", out, err, text(res))
	}
	res, _, err = call(t, c, "broadcast", map[string]any{"body": "x", "peers": []any{"bob", "bob"}, "reliable": false})
	if err != nil || res.IsError {
		t.Fatalf("direct broadcast: %v %s", err, text(res))
	}
	res, _, err = call(t, c, "broadcast", map[string]any{"body": "x", "group": "qa"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "bad_argument: ") || !strings.Contains(text(res), "ops") {
		t.Fatalf("unknown group: %v %s", err, text(res))
	}
	res, out, err = call(t, c, "task_complete", map[string]any{"task_id": "t1", "result": map[string]any{"n": 12345678901234567}})
	if err != nil || res.IsError || out["task"].(map[string]any)["state"] != "completed" {
		t.Fatalf("task_complete: %v %v %s", out, err, text(res))
	}
	res, _, err = call(t, c, "task_complete", map[string]any{"task_id": "nope", "idempotency_key": "k-nope"})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "unknown_task: ") {
		t.Fatalf("unknown task: %v %s", err, text(res))
	}
	_, out, err = call(t, c, "list_tasks", map[string]any{"state": "open"})
	if err != nil || len(out["tasks"].([]any)) != 1 || out["pending"] == nil || out["more"] != true || out["cursor"] != "5/t1" {
		t.Fatalf("list_tasks: %v %v", out, err)
	}
	if _, _, err = call(t, c, "list_tasks", map[string]any{"state": "open", "cursor": "5/t1"}); err != nil {
		t.Fatal(err)
	}
	_, out, err = call(t, c, "wait_task", map[string]any{"task_id": "t1", "wait_ms": 1500})
	if err != nil || out["timed_out"] != true || out["task"].(map[string]any)["state"] != "open" {
		t.Fatalf("wait_task: %v %v", out, err)
	}
	_, _, err = call(t, c, "send_message", map[string]any{"peer": "bob", "body": "x", "task_id": "t1"})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cs := f.calls()
	want := []node.BroadcastArgs{
		{Body: "hi all", Group: "ops", SendOptions: node.SendOptions{TaskID: "t1"}},
		{Body: "x", Peers: []string{"bob", "bob"}, Direct: true},
		{Body: "x", Group: "qa"},
	}
	if !reflect.DeepEqual(cs.broadcasts, want) {
		t.Errorf("broadcasts\n%+v\nwant\n%+v", cs.broadcasts, want)
	}
	if cs.completes[0] != `t1 {"n":12345678901234567}` {
		t.Errorf("task_complete result %q: want the JSON as sent", cs.completes[0])
	}
	if !strings.HasSuffix(cs.completes[1], "k-nope") {
		t.Errorf("task_complete %q: the idempotency key did not reach the node", cs.completes[1])
	}
	if !reflect.DeepEqual(cs.queries, []node.TaskQuery{{State: "open", Limit: 100}, {State: "open", Limit: 100, Cursor: "5/t1"}}) || cs.waits[0] != "t1 1.5s" {
		t.Errorf("queries %+v, waits %v", cs.queries, cs.waits)
	}
	if last := f.opts[len(f.opts)-1]; last.TaskID != "t1" {
		t.Errorf("send_message options %+v: want task_id t1", last)
	}
}

// Malformed calls of the broadcast and task tools are invalid params.
func TestBroadcastToolsInvalidParams(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"broadcast", map[string]any{}},
		{"broadcast", map[string]any{"body": ""}},
		{"broadcast", map[string]any{"body": "x", "group": "a", "peers": []any{"b"}}},
		{"broadcast", map[string]any{"body": "x", "peers": "bob"}},
		{"broadcast", map[string]any{"body": "x", "reliable": false, "ttl_seconds": 5}},
		{"broadcast", map[string]any{"body": "x", "task_id": 7}},
		{"broadcast", map[string]any{"body": "x", "peers": []any{}}}, // no one, not everyone
		{"broadcast", map[string]any{"body": "x", "group": ""}},      // no group, not every peer
		{"broadcast", map[string]any{"body": "x", "group": "", "peers": []any{"bob"}}},
		{"task_complete", map[string]any{}},
		{"list_tasks", map[string]any{"state": "done"}},
		{"list_tasks", map[string]any{"limit": 0}},
		{"list_tasks", map[string]any{"cursor": 5}},
		{"wait_task", map[string]any{"task_id": "t", "wait_ms": 26000}},
		{"wait_task", map[string]any{"wait_ms": 10}},
		{"send_message", map[string]any{"peer": "bob", "body": "x", "task_id": []any{}}},
	} {
		if err := checkArgs(tc.tool, tc.args); err == nil {
			t.Errorf("%s %v: want invalid params", tc.tool, tc.args)
		}
	}
	for _, ok := range []struct {
		tool string
		args map[string]any
	}{
		{"wait_task", map[string]any{"task_id": "t", "wait_ms": float64(25000)}},
		{"broadcast", map[string]any{"body": "x"}}, // every trusted peer
		{"broadcast", map[string]any{"body": "x", "group": "ops"}},
		{"broadcast", map[string]any{"body": "x", "peers": []any{"bob"}}},
		{"broadcast", map[string]any{"body": "x", "group": nil, "peers": nil}}, // null: left out
	} {
		if err := checkArgs(ok.tool, ok.args); err != nil {
			t.Errorf("%s %v: %v", ok.tool, ok.args, err)
		}
	}
}
