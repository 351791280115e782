package control

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// CancelRequest implements node.API.
func (c *Client) CancelRequest(ctx context.Context, requestID, reason string, opts node.SendOptions) (r node.Cancelled, err error) {
	err = c.call(ctx, OpCancelRequest, CancelRequestArgs{RequestID: requestID, Reason: reason, Options: opts}, &r)
	return r, err
}

// Requests implements node.API.
func (c *Client) Requests(ctx context.Context, q node.RequestQuery) (rs []node.SentRequest, err error) {
	err = c.call(ctx, OpRequests, q, &rs)
	return rs, err
}

// CancelRequest implements node.API.
func (s *Session) CancelRequest(ctx context.Context, requestID, reason string, opts node.SendOptions) (node.Cancelled, error) {
	return do(s, ctx, func(a node.API) (node.Cancelled, error) { return a.CancelRequest(ctx, requestID, reason, opts) })
}

// Requests implements node.API.
func (s *Session) Requests(ctx context.Context, q node.RequestQuery) ([]node.SentRequest, error) {
	return doRead(s, ctx, func(a node.API) ([]node.SentRequest, error) { return a.Requests(ctx, q) })
}
