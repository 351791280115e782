package mcpserver

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/meerkatd/meerkatd/comms/node"
)

// orderNode records the order of each Receive.
type orderNode struct {
	*fakeNode
	mu     sync.Mutex
	orders []string
}

func (o *orderNode) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	o.mu.Lock()
	o.orders = append(o.orders, q.Order)
	o.mu.Unlock()
	return o.fakeNode.Receive(ctx, q)
}

// receive_messages passes order on (priority by default); the pending
// counts after other tools read in arrival order; interrupt reaches the
// node on send_message and send_request; bad values are invalid params.
func TestClassArgs(t *testing.T) { bothEras(t, testClassArgs) }

func testClassArgs(t *testing.T, era string) {
	o := &orderNode{fakeNode: newFakeNode()}
	c, _ := startClient(t, o, era)
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, ""},
		{map[string]any{"order": "priority"}, node.OrderPriority},
		{map[string]any{"order": "arrival"}, node.OrderArrival},
	} {
		o.mu.Lock()
		o.orders = nil
		o.mu.Unlock()
		res, _, err := call(t, c, "receive_messages", tc.args)
		if err != nil || res.IsError {
			t.Fatalf("receive_messages %v: %v", tc.args, err)
		}
		o.mu.Lock()
		got := slices.Clone(o.orders)
		o.mu.Unlock()
		// Other reads (the pending count, the arrival watcher) read in
		// arrival order; the tool's own read is the only other one.
		priority := slices.DeleteFunc(got, func(o string) bool { return o == node.OrderArrival })
		switch {
		case tc.want == node.OrderArrival && len(priority) != 0,
			tc.want != node.OrderArrival && !slices.Equal(priority, []string{tc.want}):
			t.Errorf("receive_messages %v: node got orders %q, want %q", tc.args, got, tc.want)
		}
	}
	wantBadArgument(t, c, "receive_messages", map[string]any{"order": "newest"})
	if err := checkArgs("receive_messages", map[string]any{"order": "newest"}); err == nil {
		t.Error("checkArgs order newest: want invalid params")
	}
	o.mu.Lock()
	o.orders = nil
	o.mu.Unlock()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want node.SendOptions
	}{
		{"send_message", map[string]any{"peer": "bob", "body": "x", "interrupt": true}, node.SendOptions{Reliable: true, Interrupt: true}},
		{"send_message", map[string]any{"peer": "bob", "body": "x", "interrupt": false}, node.SendOptions{Reliable: true}},
		{"send_request", map[string]any{"peer": "bob", "intent": "x", "interrupt": true, "reliable": false}, node.SendOptions{Interrupt: true}},
	} {
		res, _, err := call(t, c, tc.tool, tc.args)
		if err != nil || res.IsError {
			t.Fatalf("%s %v: %v %s", tc.tool, tc.args, err, text(res))
		}
		if got := o.lastOpts(); got != tc.want {
			t.Errorf("%s %v: node got %+v, want %+v", tc.tool, tc.args, got, tc.want)
		}
	}
	o.mu.Lock()
	for _, got := range o.orders {
		if got != node.OrderArrival {
			t.Errorf("a pending count read in order %q", got)
		}
	}
	o.mu.Unlock()
	bad := map[string]any{"peer": "bob", "body": "x", "interrupt": "yes"}
	wantBadArgument(t, c, "send_message", bad)
	if err := checkArgs("send_message", bad); err == nil {
		t.Error("checkArgs interrupt \"yes\": want invalid params")
	}
}
