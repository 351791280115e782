package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Results of the request lifecycle tools.
type (
	cancelRequestResult struct {
		node.Cancelled
		Pending int `json:"pending"`
	}
	listRequestsResult struct {
		Requests []node.SentRequest `json:"requests"`
		Pending  int                `json:"pending"`
	}
)

// deadlineArg is send_request's deadline.
var deadlineArg = mcp.WithString("deadline", mcp.Description("when you stop waiting for the answer: an RFC 3339 time (2026-05-01T12:00:00Z) or a duration from now (30s, 5m, 2h; at most a week). If no final response (completed or failed) has arrived by then, the request becomes timed_out (see list_requests) and the node tells the peer. Needs the running node."))

// addLifecycleTools adds cancel_request and list_requests.
func (s *Server) addLifecycleTools() {
	s.mcp.AddTool(mcp.NewTool("cancel_request",
		mcp.WithDescription("Cancel an open request you sent: it becomes cancelled here and the peer's node is told (the peer's agent sees the cancellation on the request it holds). If the request was still queued for a peer that is away, it is withdrawn instead: withdrawn is true, it becomes a dead letter (reason cancelled), the peer never gets it, and no cancel is sent (cancel has no id). A response arriving later still shows in receive_messages; the request stays cancelled."),
		mcp.WithString("request_id", mcp.Required(), mcp.Description("the id send_request returned")),
		mcp.WithString("reason", mcp.Description(fmt.Sprintf("a short note for the peer (at most %d bytes)", node.MaxCancelNote))),
		idempotencyKeyArg,
		mcp.WithOutputSchema[cancelRequestResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Cancel request", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(true), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.cancelRequest)
	s.mcp.AddTool(mcp.NewTool("list_requests",
		mcp.WithDescription("List the requests you sent, newest first, with their state: open (waiting for a final response; accepted responses are progress and leave it open), answered (a completed or failed response arrived; response_id names it), timed_out (its deadline passed first and the peer was told) or cancelled (by cancel_request)."),
		mcp.WithArray("states", mcp.WithStringItems(), mcp.Description("only these states: open, answered, timed_out, cancelled")),
		mcp.WithString("peer", mcp.Description("only requests to this peer")),
		mcp.WithInteger("limit", mcp.Min(1), mcp.Max(node.MaxBatchItems), mcp.Description("at most this many (1-1000, default 100)")),
		mcp.WithOutputSchema[listRequestsResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List sent requests", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.listRequests)
}

// parseDeadline reads send_request's deadline (absent: none).
func parseDeadline(a args) (time.Time, error) {
	v, err := a.str("deadline", false)
	if err != nil || v == "" {
		return time.Time{}, err
	}
	d, err := node.ParseDeadline(v, time.Now())
	if err != nil {
		return time.Time{}, invalidParams{fmt.Sprintf("argument \"deadline\": %v", err)}
	}
	return d, nil
}

func parseCancelRequest(a args) (id, reason string, opts node.SendOptions, err error) {
	if id, err = a.str("request_id", true); err != nil {
		return
	}
	if reason, err = a.str("reason", false); err != nil {
		return
	}
	err = parseIdempotencyKey(a, &opts)
	return
}

func parseRequestQuery(a args) (node.RequestQuery, error) {
	var q node.RequestQuery
	var err error
	if q.States, err = a.strings("states"); err != nil {
		return q, err
	}
	for _, st := range q.States {
		switch st {
		case node.RequestOpen, node.RequestAnswered, node.RequestTimedOut, node.RequestCancelled:
		default:
			return q, invalidParams{fmt.Sprintf("argument \"states\": %q is not open, answered, timed_out or cancelled", st)}
		}
	}
	if q.Peer, err = a.str("peer", false); err != nil {
		return q, err
	}
	limit, ok, err := a.num("limit", 1, node.MaxBatchItems)
	if ok {
		q.Limit = int(limit)
	}
	return q, err
}

func (s *Server) cancelRequest(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, reason, opts, err := parseCancelRequest(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	c, err := s.api.CancelRequest(ctx, id, reason, opts)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(cancelRequestResult{Cancelled: c, Pending: s.pending(ctx)})
}

func (s *Server) listRequests(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := parseRequestQuery(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	rs, err := s.api.Requests(ctx, q)
	if err != nil {
		return s.failed(ctx, err)
	}
	if rs == nil {
		rs = []node.SentRequest{}
	}
	return result(listRequestsResult{Requests: rs, Pending: s.pending(ctx)})
}
