package control

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// LoopGuards implements node.API.
func (c *Client) LoopGuards(ctx context.Context) (g []node.LoopGuardState, err error) {
	err = c.call(ctx, OpLoopGuards, nil, &g)
	return g, err
}

// ReleaseLoopGuard implements node.API.
func (c *Client) ReleaseLoopGuard(ctx context.Context, peer string) error {
	return c.call(ctx, OpLoopRelease, ReleaseLoopGuardArgs{Peer: peer}, nil)
}

// LoopGuards implements node.API.
func (s *Session) LoopGuards(ctx context.Context) ([]node.LoopGuardState, error) {
	return doRead(s, ctx, func(a node.API) ([]node.LoopGuardState, error) { return a.LoopGuards(ctx) })
}

// ReleaseLoopGuard implements node.API.
func (s *Session) ReleaseLoopGuard(ctx context.Context, peer string) error {
	_, err := do(s, ctx, func(a node.API) (struct{}, error) { return struct{}{}, a.ReleaseLoopGuard(ctx, peer) })
	return err
}
