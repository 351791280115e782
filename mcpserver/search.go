package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// searchResult is what search_messages returns.
type searchResult struct {
	node.SearchResult
	Pending int `json:"pending"`
}

// addSearchTools adds search_messages.
func (s *Server) addSearchTools() {
	s.mcp.AddTool(mcp.NewTool("search_messages",
		mcp.WithDescription("Search what this node received, newest first: the unacknowledged items and the acknowledged history (history: false in the result means the node keeps its inbox in memory and searched only the unacknowledged items). "+
			"The query is words that must all occur (case-insensitive), \"quoted phrases\" and prefix* words; punctuation only separates words. "+
			"It searches message bodies, request intents and params, response statuses and results, envelopes of spaces and the sender's name. "+
			"Each hit is the item (as receive_messages shows it), acked, and a snippet with the matched words between « and ». "+
			"When more is true, pass cursor back (with the same query and filters) for the next page. Searching acknowledges nothing."),
		mcp.WithString("query", mcp.Required(), mcp.Description("words, \"quoted phrases\", prefix* (all must match)")),
		mcp.WithString("peer", mcp.Description("only items from this peer: name, key or peer UUID (a key also finds a peer no longer trusted)")),
		mcp.WithString("kind", mcp.Enum("message", "request", "response", "meup"), mcp.Description("only items of this kind")),
		mcp.WithString("since", mcp.Description("only items received at or after this time (RFC 3339, e.g. 2026-03-01T12:00:00Z)")),
		mcp.WithString("until", mcp.Description("only items received at or before this time (RFC 3339)")),
		mcp.WithInteger("limit", mcp.Min(1), mcp.Max(node.MaxSearchLimit), mcp.Description(fmt.Sprintf("hits per page (1-%d, default %d)", node.MaxSearchLimit, node.DefaultSearchLimit))),
		mcp.WithString("cursor", mcp.Description("the cursor of the previous page")),
		mcp.WithOutputSchema[searchResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Search messages", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.search)
}

// parseSearch reads search_messages' arguments.
func parseSearch(a args) (q node.SearchQuery, err error) {
	if q.Query, err = a.str("query", true); err != nil {
		return q, err
	}
	if q.Peer, err = a.str("peer", false); err != nil {
		return q, err
	}
	kind, err := a.str("kind", false)
	if err != nil {
		return q, err
	}
	switch kind {
	case "":
	case "message", "request", "response", "meup":
		q.Kinds = []string{kind}
	default:
		return q, invalidParams{fmt.Sprintf("kind: %q is not message, request, response or meup", kind)}
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		v, err := a.str(f.name, false)
		if err != nil || v == "" {
			if err != nil {
				return q, err
			}
			continue
		}
		if *f.dst, err = time.Parse(time.RFC3339, v); err != nil {
			return q, invalidParams{fmt.Sprintf("argument %q must be an RFC 3339 time, e.g. 2026-03-01T12:00:00Z", f.name)}
		}
	}
	limit, _, err := a.num("limit", 1, node.MaxSearchLimit)
	if err != nil {
		return q, err
	}
	q.Limit = int(limit)
	q.Cursor, err = a.str("cursor", false)
	return q, err
}

func (s *Server) search(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := parseSearch(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	r, err := s.api.Search(ctx, q)
	if err != nil {
		return s.failed(ctx, err)
	}
	if r.Hits == nil {
		r.Hits = []node.SearchHit{}
	}
	return result(searchResult{SearchResult: r, Pending: s.pending(ctx)})
}
