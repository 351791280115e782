package mcpserver

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/comms/node"
)

// ack_messages takes every filter receive_messages takes, and the epoch.
func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		args map[string]any
		want node.AckRequest
		bad  bool
	}{
		{"ids", map[string]any{"ids": []any{"AB-1"}}, node.AckRequest{IDs: []string{"ab-1"}}, false},
		{"up_to", map[string]any{"up_to": float64(7)}, node.AckRequest{UpTo: 7}, false},
		{"every filter", map[string]any{"up_to": float64(7), "kinds": []any{"meup"}, "from": "bob", "request_id": "R-1",
			"space": "build", "meup_kinds": []any{"chat"}, "context": "c1", "epoch": "e1"},
			node.AckRequest{UpTo: 7, Kinds: []string{"meup"}, From: "bob", RequestID: "r-1",
				MEUPFilter: node.MEUPFilter{Space: "build", MEUPKinds: []string{"chat"}, Context: "c1"}, Epoch: "e1"}, false},
		{"neither", map[string]any{"kinds": []any{"message"}}, node.AckRequest{}, true},
		{"up_to 0", map[string]any{"up_to": float64(0)}, node.AckRequest{}, false}, // acknowledges nothing (ack says so)
		{"up_to below 0", map[string]any{"up_to": float64(-1)}, node.AckRequest{}, true},
		{"epoch not text", map[string]any{"up_to": float64(1), "epoch": float64(3)}, node.AckRequest{}, true},
		{"space not text", map[string]any{"up_to": float64(1), "space": []any{"x"}}, node.AckRequest{}, true},
		{"meup_kinds not a list", map[string]any{"up_to": float64(1), "meup_kinds": "chat"}, node.AckRequest{}, true},
		{"context not text", map[string]any{"up_to": float64(1), "context": true}, node.AckRequest{}, true},
		{"bad kind", map[string]any{"up_to": float64(1), "kinds": []any{"acks"}}, node.AckRequest{}, true},
	} {
		got, err := parseAck(args{tc.args})
		if (err != nil) != tc.bad {
			t.Errorf("%s: %v, want invalid %v", tc.name, err, tc.bad)
			continue
		}
		if !tc.bad && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if cerr := checkArgs("ack_messages", tc.args); (cerr != nil) != tc.bad {
			t.Errorf("%s: checkArgs %v", tc.name, cerr)
		}
	}
}

// receive_messages passes epoch on to the node.
func TestParseReceiveEpoch(t *testing.T) {
	for _, tc := range []struct {
		args map[string]any
		want string
		bad  bool
	}{
		{map[string]any{}, "", false},
		{map[string]any{"after": float64(4), "epoch": "e1"}, "e1", false},
		{map[string]any{"epoch": float64(1)}, "", true},
		{map[string]any{"epoch": []any{"e1"}}, "", true},
	} {
		q, err := parseReceive(args{tc.args})
		if (err != nil) != tc.bad || !tc.bad && q.Epoch != tc.want {
			t.Errorf("%v: epoch %q, %v; want %q (invalid %v)", tc.args, q.Epoch, err, tc.want, tc.bad)
		}
	}
}

// The tool hands the whole acknowledgement to the node and reports the
// items it left unread; the server's own reads (the pending count, the
// arrival watch) are peeks, so they make nothing acknowledgeable by
// up_to, while receive_messages is a read.
func TestAckToolAndPeeks(t *testing.T) { bothEras(t, testAckToolAndPeeks) }

func testAckToolAndPeeks(t *testing.T, era string) {
	f := newFakeNode()
	c, _ := startClient(t, f, era)
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "hello"})
	f.waitWatcher(t, 1)
	if _, _, err := call(t, c, "receive_messages", map[string]any{"kinds": []any{"message"}, "epoch": "e1"}); err != nil {
		t.Fatal(err)
	}
	if _, out, err := call(t, c, "list_peers", nil); err != nil || out["pending"] != float64(1) { // the pending count reads
		t.Fatalf("list_peers: %v, %v", out, err)
	}
	_, out, err := call(t, c, "ack_messages", map[string]any{"up_to": 1, "space": "build", "meup_kinds": []any{"chat"}, "context": "c1", "epoch": "e1"})
	if err != nil || out["acked"] != float64(1) || out["note"] != nil || out["above"] != nil {
		t.Fatalf("ack: %v, %v", out, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := node.AckRequest{UpTo: 1, MEUPFilter: node.MEUPFilter{Space: "build", MEUPKinds: []string{"chat"}, Context: "c1"}, Epoch: "e1"}
	if len(f.acks) != 1 || !reflect.DeepEqual(f.acks[0], want) {
		t.Fatalf("the node got %+v, want %+v", f.acks, want)
	}
	reads := 0
	for _, q := range f.queries {
		if !q.Peek {
			reads++
			if q.Epoch != "e1" || !reflect.DeepEqual(q.Kinds, []string{"message"}) {
				t.Errorf("a read that is not receive_messages': %+v", q)
			}
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads that are not peeks among %+v; want receive_messages' only", reads, f.queries)
	}
}

// An up_to below the items reads returned (in priority order a read's
// cursor stays below the oldest item it left out) acknowledges nothing;
// the result says how many lie above it and to acknowledge them by id.
func TestAckBelowTheRead(t *testing.T) {
	f := newFakeNode()
	c, _ := startClient(t, f, modernEra)
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "hello"}) // seq 1
	f.deliver(node.Message{ID: "x2", Kind: "message", Peer: "bob", Body: "later"}) // seq 2
	if _, out, err := call(t, c, "ack_messages", map[string]any{"ids": []any{"x1"}}); err != nil || out["acked"] != float64(1) || out["note"] != nil {
		t.Fatalf("by id: %v, %v", out, err)
	}
	if _, out, err := call(t, c, "ack_messages", map[string]any{"ids": []any{"x1"}}); err != nil || out["acked"] != float64(0) || fmt.Sprint(out["not_found"]) != "[x1]" {
		t.Fatalf("by an id acknowledged before: %v, %v; want it in not_found", out, err)
	}
	_, out, err := call(t, c, "ack_messages", map[string]any{"up_to": 1})
	if note, _ := out["note"].(string); err != nil || out["acked"] != float64(0) || out["above"] != float64(1) || !strings.Contains(note, "acknowledge them by ids") {
		t.Fatalf("ack below the read: %v, %v", out, err)
	}
	// A priority read's cursor can be 0: up_to 0 acknowledges nothing,
	// asks the node nothing, and says the same.
	f.mu.Lock()
	asked := len(f.acks)
	f.mu.Unlock()
	_, out, err = call(t, c, "ack_messages", map[string]any{"up_to": 0})
	if note, _ := out["note"].(string); err != nil || out["acked"] != float64(0) || out["pending"] != float64(1) || !strings.Contains(note, "acknowledge what you handled by ids") {
		t.Fatalf("ack up_to 0: %v, %v", out, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acks) != asked {
		t.Fatalf("up_to 0 went to the node: %+v", f.acks[asked:])
	}
}
