package control

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// PeerArgs are the arguments of OpFetchCard and OpDescribePeer.
type PeerArgs struct {
	Peer    string `json:"peer"`
	Refresh bool   `json:"refresh,omitempty"` // OpDescribePeer: fetch the card again
}

// Card implements node.API.
func (c *Client) Card(ctx context.Context) (o node.OwnCard, err error) {
	err = c.call(ctx, OpCard, nil, &o)
	return o, err
}

// CardEdit implements node.API.
func (c *Client) CardEdit(ctx context.Context, e node.CardEdit) (o node.OwnCard, err error) {
	err = c.call(ctx, OpCardEdit, e, &o)
	return o, err
}

// FetchCard implements node.API.
func (c *Client) FetchCard(ctx context.Context, peer string) (p node.PeerCard, err error) {
	err = c.call(ctx, OpFetchCard, PeerArgs{Peer: peer}, &p)
	return p, err
}

// DescribePeer implements node.API.
func (c *Client) DescribePeer(ctx context.Context, peer string, refresh bool) (d node.PeerDescription, err error) {
	err = c.call(ctx, OpDescribePeer, PeerArgs{Peer: peer, Refresh: refresh}, &d)
	return d, err
}

// Card implements node.API.
func (s *Session) Card(ctx context.Context) (node.OwnCard, error) {
	return doRead(s, ctx, func(a node.API) (node.OwnCard, error) { return a.Card(ctx) })
}

// CardEdit implements node.API.
func (s *Session) CardEdit(ctx context.Context, e node.CardEdit) (node.OwnCard, error) {
	return do(s, ctx, func(a node.API) (node.OwnCard, error) { return a.CardEdit(ctx, e) })
}

// FetchCard implements node.API.
func (s *Session) FetchCard(ctx context.Context, peer string) (node.PeerCard, error) {
	return do(s, ctx, func(a node.API) (node.PeerCard, error) { return a.FetchCard(ctx, peer) })
}

// DescribePeer implements node.API.
func (s *Session) DescribePeer(ctx context.Context, peer string, refresh bool) (node.PeerDescription, error) {
	return do(s, ctx, func(a node.API) (node.PeerDescription, error) { return a.DescribePeer(ctx, peer, refresh) })
}
