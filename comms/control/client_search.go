package control

import (
	"context"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Search implements node.API.
func (c *Client) Search(ctx context.Context, q node.SearchQuery) (r node.SearchResult, err error) {
	err = c.call(ctx, OpSearch, q, &r)
	return r, err
}

// Search implements node.API.
func (s *Session) Search(ctx context.Context, q node.SearchQuery) (node.SearchResult, error) {
	return doRead(s, ctx, func(a node.API) (node.SearchResult, error) { return a.Search(ctx, q) })
}
