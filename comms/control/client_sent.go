package control

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// MessageStatusArgs are the arguments of OpMessageStatus. The arguments
// of OpSentList are a node.SentQuery.
type MessageStatusArgs struct {
	IDs []string `json:"ids"`
}

// MessageStatus implements node.API.
func (c *Client) MessageStatus(ctx context.Context, ids []string) (st []node.SendStatus, err error) {
	err = c.call(ctx, OpMessageStatus, MessageStatusArgs{IDs: ids}, &st)
	return st, err
}

// SentList implements node.API.
func (c *Client) SentList(ctx context.Context, q node.SentQuery) (st []node.SendStatus, err error) {
	err = c.call(ctx, OpSentList, q, &st)
	return st, err
}

// MessageStatus implements node.API.
func (s *Session) MessageStatus(ctx context.Context, ids []string) ([]node.SendStatus, error) {
	return doRead(s, ctx, func(a node.API) ([]node.SendStatus, error) { return a.MessageStatus(ctx, ids) })
}

// SentList implements node.API.
func (s *Session) SentList(ctx context.Context, q node.SentQuery) ([]node.SendStatus, error) {
	return doRead(s, ctx, func(a node.API) ([]node.SendStatus, error) { return a.SentList(ctx, q) })
}
