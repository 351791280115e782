package mcpserver

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// messageStatusResult is what message_status returns.
type messageStatusResult struct {
	Statuses []node.SendStatus `json:"statuses"`
	Pending  int               `json:"pending"`
}

// idempotencyKeyArg is the idempotency_key argument of the send tools.
var idempotencyKeyArg = mcp.WithString("idempotency_key", mcp.MaxLength(node.MaxIdempotencyKey),
	mcp.Description("optional: a key of your choosing (up to 128 bytes of printable text) that makes this call safe to retry: the same call again with the same key, also after a restart, returns the first result with \"replayed\": true and sends nothing; a call that failed (peer_offline, a timeout) is not remembered and its retry tries again: send_message, send_request, send_response and broadcast retry under the failed attempt's envelope id, so the peer gets it once even if that attempt did arrive; the key with other arguments fails with idempotency_conflict. Keys are remembered for agent.idempotency_window_secs (a day by default); use a new key for each new send."))

// parseIdempotencyKey reads idempotency_key into opts.
func parseIdempotencyKey(a args, opts *node.SendOptions) error {
	k, err := a.str("idempotency_key", false)
	if err != nil {
		return err
	}
	if _, ok := a.m["idempotency_key"]; ok && a.m["idempotency_key"] != nil {
		if err := node.CheckIdempotencyKey(k); err != nil {
			return invalidParams{fmt.Sprintf("argument \"idempotency_key\": %s", node.UserText(err))}
		}
	}
	opts.IdempotencyKey = k
	return nil
}

func (s *Server) addSentTools() {
	s.mcp.AddTool(mcp.NewTool("message_status",
		mcp.WithDescription("What became of envelopes you sent, by the id a send returned: state queued (in the outbox, waiting for its next attempt), in_flight, stored_in_broker (a NATS JetStream stream holds it for a peer reached through NATS; the peer has not acknowledged it yet), acked (acked_at: when the peer's node acknowledged it), written (a response, which is not acknowledged), dead (a reliable send given up on; reason says why; see list_dead_letters), failed (a direct send whose one attempt failed, or whose sending process ended before the ack: reason says so), answered (a request with a final response: answer.response_id and answer.status, completed or failed; read it with receive_messages request_id), or unknown (no record here; a broadcast_id is none: each copy has its own id, listed by broadcast). A request's \"accepted\" responses are progress: they appear under progress while the state stays acked; request_state says whether a request is open, answered, timed_out (its deadline passed) or cancelled (request_note: why), as list_requests does."),
		mcp.WithArray("ids", mcp.Required(), mcp.WithStringItems(), mcp.MinItems(1), mcp.MaxItems(node.MaxStatusIDs), mcp.Description("envelope ids (the id of send_message, send_request or send_response), 1 to 100")),
		mcp.WithOutputSchema[messageStatusResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Message status", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.messageStatus)
}

func parseMessageStatus(a args) ([]string, error) {
	ids, err := a.strings("ids")
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 || len(ids) > node.MaxStatusIDs {
		return nil, invalidParams{fmt.Sprintf("argument \"ids\" must hold 1 to %d envelope ids", node.MaxStatusIDs)}
	}
	return ids, nil
}

func (s *Server) messageStatus(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ids, err := parseMessageStatus(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	// An id that is no envelope id is answered on its own (unknown, with
	// why), not by failing the others with it; the node answers the rest,
	// in order.
	st := make([]node.SendStatus, len(ids))
	var valid []string
	ok := make([]bool, len(ids))
	for i, id := range ids {
		if ok[i] = node.DistinctIDs([]string{id}) == 1; ok[i] { // an envelope id
			valid = append(valid, id)
		} else {
			st[i] = node.SendStatus{ID: id, State: node.StateUnknown, Reason: "not an envelope id"}
		}
	}
	if len(valid) > 0 {
		got, err := s.api.MessageStatus(ctx, valid)
		if err != nil {
			return s.failed(ctx, err)
		}
		for i := range st {
			if ok[i] && len(got) > 0 {
				st[i], got = got[0], got[1:]
			}
		}
	}
	return result(messageStatusResult{Statuses: st, Pending: s.pending(ctx)})
}
