package mcpserver

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// LoopGuards implements node.API: the fake node's guard holds no one.
func (f *fakeNode) LoopGuards(context.Context) ([]node.LoopGuardState, error) {
	return []node.LoopGuardState{}, nil
}

// ReleaseLoopGuard implements node.API.
func (f *fakeNode) ReleaseLoopGuard(context.Context, string) error { return nil }
