package control

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// TellArgs are the arguments of OpTell.
type TellArgs struct {
	Body string `json:"body"`
}

// Tell implements node.API.
func (c *Client) Tell(ctx context.Context, body string) (t node.Told, err error) {
	err = c.call(ctx, OpTell, TellArgs{Body: body}, &t)
	return t, err
}

// Tell implements node.API.
func (s *Session) Tell(ctx context.Context, body string) (node.Told, error) {
	return do(s, ctx, func(a node.API) (node.Told, error) { return a.Tell(ctx, body) })
}
