package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// epochNode is a fakeNode whose inbox has an epoch and can start over, as
// a memory-mode node's does when it restarts. Like the node, it reads
// from the start when a query names another epoch.
type epochNode struct {
	*fakeNode
	mu    sync.Mutex
	epoch string
	gone  chan struct{} // closed by restart: ends the reads in progress
}

func newEpochNode(epoch string) *epochNode {
	return &epochNode{fakeNode: newFakeNode(), epoch: epoch, gone: make(chan struct{})}
}

func (e *epochNode) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	e.mu.Lock()
	epoch, gone := e.epoch, e.gone
	e.mu.Unlock()
	if q.Epoch != "" && q.Epoch != epoch {
		q.After = 0
	}
	e.fakeNode.mu.Lock()
	last := e.fakeNode.next - 1
	e.fakeNode.mu.Unlock()
	if q.After > last { // as the node: a cursor it never handed out
		return node.Batch{}, &node.Error{Code: node.CodeBadArgument, Msg: fmt.Sprintf("after %d: this inbox has handed out sequence numbers up to %d only", q.After, last)}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-gone:
			cancel()
		case <-rctx.Done():
		}
	}()
	b, err := e.fakeNode.Receive(rctx, q)
	if err != nil && ctx.Err() == nil {
		// The node went away during the read, as a daemon's control
		// connection does when it stops.
		return node.Batch{}, &node.Error{Code: node.CodeUnavailable, Msg: "the node restarted"}
	}
	b.Epoch = epoch
	return b, err
}

// restart ends the reads in progress and empties the inbox under a new
// epoch: seqs start at 1 again.
func (e *epochNode) restart(epoch string) {
	f := e.fakeNode
	f.mu.Lock()
	f.msgs, f.next = nil, 1
	f.mu.Unlock()
	e.mu.Lock()
	e.epoch = epoch
	close(e.gone)
	e.gone = make(chan struct{})
	e.mu.Unlock()
}

// restore empties the inbox in the same epoch, as restoring a durable
// node's database from an older backup does (seqs the watcher passed are
// handed out again), ends the reads in progress, and returns how many
// queries the node had had.
func (e *epochNode) restore() int {
	f := e.fakeNode
	f.mu.Lock()
	f.msgs, f.next = nil, 1
	n := len(f.queries)
	f.mu.Unlock()
	e.mu.Lock()
	close(e.gone)
	e.gone = make(chan struct{})
	e.mu.Unlock()
	return n
}

// arrivedID matches the arrival log event of item id.
func arrivedID(id string) func(mcp.JSONRPCNotification) bool {
	return func(x mcp.JSONRPCNotification) bool {
		data, _ := x.Params.AdditionalFields["data"].(map[string]any)
		return data["id"] == id
	}
}

// After the node's inbox went back in the same epoch, the watcher's
// cursor is beyond it, which the node refuses: the watcher then watches
// from the inbox's end again (not retrying the refused cursor for good),
// and notifies for what arrives next.
func TestWatcherRecoversFromCursorBeyondInbox(t *testing.T) {
	e := newEpochNode("db")
	_, n := startClient(t, e, legacyEra)
	e.waitWatcher(t, 0)
	for i := 1; i <= 3; i++ {
		from := n.mark()
		id := fmt.Sprintf("old-%d", i)
		e.deliver(node.Message{ID: id, Kind: "message", Peer: "bob"})
		n.wait(t, from, logged, arrivedID(id))
	}
	e.waitWatcher(t, 3)
	before := e.restore()
	waitFor(t, 10*time.Second, func() bool {
		e.fakeNode.mu.Lock()
		defer e.fakeNode.mu.Unlock()
		for _, q := range e.fakeNode.queries[before:] {
			if q.Wait == watchWait && q.After == 0 {
				return true // watching the restored inbox from its end
			}
		}
		return false
	})
	from := n.mark()
	e.deliver(node.Message{ID: "new-1", Kind: "message", Peer: "bob"}) // seq 1
	n.wait(t, from, logged, arrivedID("new-1"))
}

// After the node's inbox started over (a new epoch, seqs from 1 again),
// the arrival watcher notifies for what arrives in it, although its seq
// is below the cursor the watcher had reached.
func TestWatcherFollowsNewEpoch(t *testing.T) {
	e := newEpochNode("first")
	_, n := startClient(t, e, legacyEra)
	e.waitWatcher(t, 0)
	arrived := arrivedID
	for i := 1; i <= 3; i++ {
		from := n.mark()
		id := fmt.Sprintf("old-%d", i)
		e.deliver(node.Message{ID: id, Kind: "message", Peer: "bob"})
		n.wait(t, from, logged, arrived(id))
	}
	e.waitWatcher(t, 3) // its cursor is at seq 3

	e.restart("second")
	from := n.mark()
	e.deliver(node.Message{ID: "new-1", Kind: "message", Peer: "bob"}) // seq 1
	n.wait(t, from, logged, arrived("new-1"))
	if got := len(n.since(from, logged)); got != 1 {
		t.Fatalf("%d arrival events after the restart, want 1 (new-1)", got)
	}
}

// cutShort is a node whose waits end with errors of their own once the
// call's context ends, as a node's may (closed, internal).
type cutShort struct{ *fakeNode }

func (c cutShort) WaitTask(ctx context.Context, _ string, _ time.Duration) (node.TaskWaited, error) {
	<-ctx.Done()
	return node.TaskWaited{}, &node.Error{Code: node.CodeInternal, Msg: "the wait ended"}
}

func (c cutShort) Receive(ctx context.Context, _ node.Query) (node.Batch, error) {
	<-ctx.Done()
	return node.Batch{}, &node.Error{Code: node.CodeUnavailable, Msg: "the read ended"}
}

// A call cut short (the client cancelled it, or its session ended) fails
// alike whatever the tool and whatever the node answered: with the
// call's context error, not a tool error of the node's.
func TestCutShortCallsFailAlike(t *testing.T) {
	s := New(cutShort{newFakeNode()}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		call func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error)
		args map[string]any
	}{
		{"wait_task", s.waitTask, map[string]any{"task_id": "t1", "wait_ms": float64(1000)}},
		{"receive_messages", s.receive, map[string]any{"wait_ms": float64(1000)}},
	} {
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = tc.name, tc.args
		res, err := tc.call(ctx, req)
		if res != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("%s cut short: %+v, %v; want the context's error", tc.name, res, err)
		}
	}
}

// refusing is a node that refuses every read that waits (the arrival
// watcher's) as a bad argument, whatever its cursor, while the reads
// that skip what is there see its items.
type refusing struct {
	*fakeNode
	tries *atomic.Int32 // the watcher's reads
}

func (r refusing) Receive(ctx context.Context, q node.Query) (node.Batch, error) {
	if q.Wait > 0 {
		r.tries.Add(1)
		return node.Batch{}, &node.Error{Code: node.CodeBadArgument, Msg: "refused"}
	}
	return r.fakeNode.Receive(ctx, q)
}

// A watch read refused for another reason than a cursor beyond the inbox
// (skipping to the inbox's end does not move the cursor back) is retried
// after a pause, with a warning, not skipped again and again at once; a
// refusal that goes on is warned of once, not at every try.
func TestWatcherRefusedOtherwisePauses(t *testing.T) {
	f := refusing{newFakeNode(), new(atomic.Int32)}
	for i := range 3 {
		f.deliver(node.Message{ID: fmt.Sprintf("m%d", i), Kind: "message", Peer: "bob"})
	}
	logs := &testutil.SyncBuffer{}
	s := New(f, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WatchArrivals(ctx)
	}()
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "watching the inbox failed; retrying") })
	waitFor(t, 20*time.Second, func() bool { return f.tries.Load() >= 3 })
	cancel()
	<-done
	if n := strings.Count(logs.String(), "watching the inbox failed; retrying"); n != 1 {
		t.Errorf("%d warnings for %d tries refused alike, want 1:\n%s", n, f.tries.Load(), logs)
	}
	if strings.Contains(logs.String(), "no longer reaches") {
		t.Errorf("the watcher took the refusal for a cursor beyond the inbox:\n%s", logs)
	}
}
