package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// guardAPI is a node.API whose loop guard holds "bob" until released.
type guardAPI struct {
	node.API
	mu       sync.Mutex
	released []string
}

func (g *guardAPI) LoopGuards(context.Context) ([]node.LoopGuardState, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.released) > 0 {
		return []node.LoopGuardState{}, nil
	}
	until := time.Date(2030, 1, 2, 3, 14, 5, 0, time.UTC)
	since := until.Add(-10 * time.Minute)
	return []node.LoopGuardState{{Peer: "bob", PubKey: "ed25519:Ag==", Exchanges: 20, Since: &since, Held: true, HeldUntil: &until}}, nil
}

func (g *guardAPI) ReleaseLoopGuard(_ context.Context, peer string) error {
	if peer != "bob" {
		return &node.Error{Code: node.CodeUnknownPeer, Msg: "no trusted peer " + peer}
	}
	g.mu.Lock()
	g.released = append(g.released, peer)
	g.mu.Unlock()
	return nil
}

// The loop guard's operations carry its states, the release and its
// error codes through the control socket.
func TestClientLoopGuard(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := tempSocket(t)
	api := &guardAPI{}
	serveAt(t, path, api, Options{})
	c := NewClient(path)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := c.LoopGuards(ctx)
	if err != nil || len(gs) != 1 || gs[0].Peer != "bob" || !gs[0].Held || gs[0].Exchanges != 20 || gs[0].HeldUntil == nil || gs[0].HeldUntil.Minute() != 14 {
		t.Fatalf("loop guards: %+v, %v", gs, err)
	}
	if err := c.ReleaseLoopGuard(ctx, "carol"); codeOf(err) != node.CodeUnknownPeer {
		t.Fatalf("release of an unknown peer: %v", err)
	}
	if err := c.ReleaseLoopGuard(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if gs, err := c.LoopGuards(ctx); err != nil || gs == nil || len(gs) != 0 {
		t.Fatalf("after release: %+v, %v", gs, err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.released) != 1 || api.released[0] != "bob" {
		t.Fatalf("released %v", api.released)
	}
}

// Through a served node, a release needs nothing held and a list is empty
// at first.
func TestServedLoopGuard(t *testing.T) {
	_, c := served(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gs, err := c.LoopGuards(ctx); err != nil || len(gs) != 0 {
		t.Fatalf("loop guards of a new node: %+v, %v", gs, err)
	}
	if err := c.ReleaseLoopGuard(ctx, "bob"); err != nil {
		t.Fatalf("release of a peer not held: %v", err)
	}
}
