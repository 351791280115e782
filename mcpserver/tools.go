package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Tool results. Every one carries Pending so a model notices new mail
// during normal tool use.
type (
	// sendResult is a send's node.Sent (the same fields as the CLI's
	// send --json) with what a model should know next.
	sendResult struct {
		node.Sent
		Note    string `json:"note,omitempty"` // queued: what happens next, where to look
		Pending int    `json:"pending"`
	}
	listPeersResult struct {
		Self    node.Self   `json:"self"`
		Peers   []node.Peer `json:"peers"`
		Pending int         `json:"pending"`
	}
	ackResult struct {
		Acked   int `json:"acked"`
		Pending int `json:"pending"`
		// Unread: items up to up_to matching the filters that no read
		// returned; they stay pending.
		Unread int `json:"unread,omitempty"`
		// Above: when up_to acknowledged nothing, the items reads
		// returned above it (priority order): acknowledge them by id.
		Above int `json:"above,omitempty"`
		// NotFound: the ids given that name no pending item.
		NotFound []string `json:"not_found,omitempty"`
		Note     string   `json:"note,omitempty"`
	}
	listOutboxResult struct {
		Entries []node.QueuedSend    `json:"entries"`
		Peers   []node.PeerSendState `json:"peers"`
		Pending int                  `json:"pending"`
	}
	listDeadLettersResult struct {
		DeadLetters []node.DeadLetter `json:"dead_letters"`
		Pending     int               `json:"pending"`
	}
	retryOutboxResult struct {
		Due     int `json:"due"` // queued sends made due now
		Pending int `json:"pending"`
	}
	dropQueuedResult struct {
		Dropped   []string `json:"dropped"`          // now dead letters (reason dropped)
		NotQueued []string `json:"not_queued"`       // not in the outbox
		InFlight  []string `json:"in_flight"`        // being attempted right now: not dropped
		Stored    []string `json:"stored_in_broker"` // held by the NATS stream, which delivers them: not dropped
		Pending   int      `json:"pending"`
	}
	retryDeadLettersResult struct {
		Requeued int `json:"requeued"`
		NotFound int `json:"not_found"` // ids given that are not dead letters
		Pending  int `json:"pending"`
	}
)

// invalidParams is returned (as a Go error) for calls whose arguments do
// not fit the schema; invalidAsToolError makes it a bad_argument tool
// error.
type invalidParams struct{ msg string }

func (e invalidParams) Error() string { return e.msg }

// args reads tool arguments.
type args struct {
	m map[string]any
}

func (a args) str(name string, required bool) (string, error) {
	v, ok := a.m[name]
	if !ok || v == nil {
		if required {
			return "", invalidParams{fmt.Sprintf("missing required argument %q", name)}
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", invalidParams{fmt.Sprintf("argument %q must be a string", name)}
	}
	if required && s == "" {
		return "", invalidParams{fmt.Sprintf("argument %q must not be empty", name)}
	}
	return s, nil
}

// optStr reads an optional string argument that, when given, must not be
// empty: "" would otherwise read as not given at all, which means
// leftOut ("none", "every peer").
func (a args) optStr(name, leftOut string) (string, error) {
	s, err := a.str(name, false)
	if err == nil && s == "" && a.m[name] != nil {
		return "", invalidParams{fmt.Sprintf("argument %q must not be empty (leave it out for %s)", name, leftOut)}
	}
	return s, err
}

func (a args) num(name string, lo, hi float64) (float64, bool, error) {
	v, ok := a.m[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) || f < lo || f > hi {
		return 0, false, invalidParams{fmt.Sprintf("argument %q must be an integer from %.0f to %.0f", name, lo, hi)}
	}
	return f, true, nil
}

func (a args) strings(name string) ([]string, error) {
	v, ok := a.m[name]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, invalidParams{fmt.Sprintf("argument %q must be an array of strings", name)}
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, invalidParams{fmt.Sprintf("argument %q must be an array of strings", name)}
		}
		out = append(out, s)
	}
	return out, nil
}

// rawJSON returns argument name exactly as the client sent it (mcp-go's
// decoded map would turn every number into a float64, losing integers
// above 2^53 and the difference between 1 and 1.0).
func rawJSON(req mcp.CallToolRequest, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(req.Params.RawArguments, &m) == nil {
		if v, ok := m[name]; ok {
			return v
		}
		return nil
	}
	// In-process clients have no raw bytes: fall back to the decoded value.
	v, ok := req.GetArguments()[name]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

func readOnly(v bool) *bool { return &v }

// errPending asks the node for the current pending count: -1 when it
// cannot be read (the node is gone), which toolError then leaves out
// rather than say 0.
func (s *Server) errPending(ctx context.Context) int {
	b, err := s.api.Receive(ctx, node.Query{Limit: 1, Order: node.OrderArrival, Peek: true}) // the count only: the cheapest read, shown to nobody
	if err != nil {
		return -1
	}
	return b.Pending
}

// pending is errPending for a result, which always has the count.
func (s *Server) pending(ctx context.Context) int { return max(s.errPending(ctx), 0) }

func (s *Server) addTools() {
	peerArg := mcp.WithString("peer", mcp.Required(), mcp.Description("the peer: its trust-list name (see list_peers), its key (ed25519:…) or its peer UUID"))
	reliableArg := mcp.WithBoolean("reliable", mcp.DefaultBool(true), mcp.Description("true (default): store it in the outbox first and retry until the peer acknowledges it or ttl_seconds pass; if the first attempt fails the result is delivery \"queued\", not an error. false: one attempt, and a peer_offline error if it fails"))
	ttlArg := mcp.WithNumber("ttl_seconds", mcp.Min(0), mcp.Max(node.MaxTTL.Seconds()), mcp.Description("reliable sends only: give up (move it to the dead letters, see list_dead_letters) if not delivered within this many seconds; 0 or absent: the node's default (outbox.default_ttl_secs, normally none)"))
	interruptArg := mcp.WithBoolean("interrupt", mcp.Description(interruptDoc))
	s.mcp.AddTool(mcp.NewTool("send_message",
		mcp.WithDescription("Send a text message to a peer. Returns once the peer's node acknowledged it (delivery \"acked\"), or, for a reliable send whose first attempt failed, delivery \"queued\": the node keeps retrying it (see list_outbox)."),
		peerArg,
		mcp.WithString("body", mcp.Required(), mcp.Description("the message text")),
		reliableArg,
		ttlArg,
		interruptArg,
		idempotencyKeyArg,
		taskArg, // broadcast and tasks slice
		mcp.WithOutputSchema[sendResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Send message", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.sendMessage)
	s.mcp.AddTool(mcp.NewTool("send_request",
		mcp.WithDescription("Ask a peer to do something. Returns the request id (\"id\") once the peer's node acknowledged the request (delivery \"acked\") or, for a reliable send whose first attempt failed, once it is queued for retry (delivery \"queued\"); the answer arrives later as a response (see receive_messages with request_id). A response with status \"accepted\" is progress, not the answer: the request stays open until a completed or failed one. list_requests shows each request's state; with a deadline, one not answered in time becomes timed_out and the peer is told; cancel_request withdraws one."),
		peerArg,
		mcp.WithString("intent", mcp.Required(), mcp.Description(fmt.Sprintf("what is asked, e.g. \"review-pr\": one line of at most %d bytes, no control or format characters (tabs included), no space at either end, not starting with \"meerkat.\" (the nodes' own)", node.MaxIntentLen))),
		mcp.WithAny("params", mcp.Description("any JSON value with the details (default null)")),
		reliableArg,
		ttlArg,
		interruptArg,
		idempotencyKeyArg,
		taskArg,     // broadcast and tasks slice
		deadlineArg, // slice F
		mcp.WithOutputSchema[sendResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Send request", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.sendRequest)
	s.mcp.AddTool(mcp.NewTool("send_response",
		mcp.WithDescription("Answer a request you received. status is \"accepted\" (will answer later), \"completed\" or \"failed\"; a request can be answered finally only once (a reliable final answer counts once it is queued). Answer before you acknowledge the request (ack_messages): an acknowledged one cannot be answered after the node restarts."),
		peerArg,
		mcp.WithString("request_id", mcp.Required(), mcp.Description("the id of the request being answered")),
		mcp.WithString("status", mcp.Required(), mcp.Enum("accepted", "completed", "failed"), mcp.Description("accepted: you will answer later (progress, any number of times); completed or failed: the final answer, once")),
		mcp.WithAny("result", mcp.Description("any JSON value (default null)")),
		reliableArg,
		ttlArg,
		idempotencyKeyArg,
		taskArg, // broadcast and tasks slice
		mcp.WithOutputSchema[sendResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Send response", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.sendResponse)
	s.mcp.AddTool(mcp.NewTool("status",
		mcp.WithDescription("Show this node's state, the same as `meerkatd status --json`: its name, key and listen addresses; embedded (true when this MCP server runs the node itself, for as long as its session lasts, instead of a daemon); running (true when a node serves the home) and started_at; peers (how many it trusts); inbox and pending (unacknowledged items: what you still have to read) and pending_by_class (pending by item class: system, user, interrupt, broadcast, normal); the counters accepted, acks_sent, connections and rejected (by reason); outbox (reliable sends waiting), dead_letters, and send_peers (peers with something queued or a breaker that is not closed), db_bytes (the size on disk of the node's database, 0 in memory mode), loop_guards (the peers whose sends the loop guard holds, if any), problems, when present (what keeps the running node from being reached as configured, such as its socket file removed), and warnings, when present (what it runs despite: meerkat.toml changed since it started and not applied until a restart, or a trust or spaces file it could not take in)."),
		mcp.WithOutputSchema[node.Status](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Node status", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.status)
	listPeers := mcp.NewTool("list_peers",
		mcp.WithDescription("Show this node and the peers it trusts, with each peer's reliable-send state: breaker (closed; open: sends are queued without dialling; half_open: the next attempt is the probe), queued count and last error; and card: a summary (name, description, intent names, fetched_at) of the peer's verified agent card if this node holds one, else null (describe_peer fetches and shows the whole card)."),
		mcp.WithOutputSchema[listPeersResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List peers", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	)
	// A peer's meta is any JSON value (a json.RawMessage, which the
	// generated schema would describe as an array of bytes).
	admitAnyJSON(listPeers.OutputSchema.Properties, "peers", "items", "properties", "meta")
	s.mcp.AddTool(listPeers, s.listPeers)
	s.mcp.AddTool(mcp.NewTool("receive_messages",
		mcp.WithDescription("List unacknowledged messages, requests, responses and envelopes of spaces (kind meup, with the space, the sender's participant id and the whole MEUP envelope), without removing them. "+receiveOrderDoc+" With wait_ms, waits up to that long for the first new one. In arrival order, pass the returned cursor as after to page to newer items; in priority order (the default), acknowledge what you handled by ids (ack_messages) and read again: passing the cursor as after never skips an item, but items you saw may come again until acknowledged. The result's epoch names the inbox the cursor counts in: if it differs from the epoch of your previous read, the node's inbox started over (a restart of a node that keeps its inbox in memory) and your cursor means nothing there, so read again from after 0."),
		mcp.WithInteger("wait_ms", mcp.Min(0), mcp.Max(int(MaxWait/time.Millisecond)), mcp.Description("wait up to this many milliseconds for the first item (0-25000, default 0)")),
		mcp.WithInteger("limit", mcp.Min(1), mcp.Max(1000), mcp.Description("at most this many items (1-1000, default 100)")),
		mcp.WithInteger("after", mcp.Min(0), mcp.Description("only items after this cursor (a cursor above every seq the inbox handed out is refused: bad_argument)")),
		mcp.WithArray("kinds", mcp.WithStringItems(), mcp.Description("only these kinds: message, request, response, meup (envelopes of spaces)")),
		mcp.WithString("from", mcp.Description("only from this peer")),
		mcp.WithString("request_id", mcp.Description("only responses to this request")),
		spaceFilter, meupKindsFilter, contextFilter,
		orderArg,
		mcp.WithString("epoch", mcp.Description("the epoch of the read your after cursor came from: if the inbox has started over since, the node reads it from its start (after is ignored) and returns the new epoch")),
		mcp.WithOutputSchema[node.Batch](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Receive messages", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.receive)
	s.mcp.AddTool(mcp.NewTool("ack_messages",
		mcp.WithDescription("Mark received items as handled so they stop counting as pending: by id (preferred), or every item up to a cursor (up_to). With up_to, pass the same filters as the receive_messages call the cursor came from (all of those you gave: kinds, from, request_id, space, meup_kinds, context) and its epoch. up_to never acknowledges an item no receive_messages call returned: a filtered read's cursor passes the items its filters skipped, and those stay pending (unread counts them). An epoch that is not the inbox's (it started over) refuses up_to: read again."),
		mcp.WithArray("ids", mcp.WithStringItems(), mcp.Description("ids of the items handled (the result's not_found lists those that name no pending item: acknowledged before, or not an item's id, such as a request_id)")),
		mcp.WithInteger("up_to", mcp.Min(0), mcp.Description("acknowledge every item up to this cursor that matches the filters given and that a read returned (0 acknowledges nothing)")),
		mcp.WithArray("kinds", mcp.WithStringItems(), mcp.Description("with up_to: only these kinds")),
		mcp.WithString("from", mcp.Description("with up_to: only from this peer")),
		mcp.WithString("request_id", mcp.Description("with up_to: only responses to this request")),
		mcp.WithString("space", mcp.Description("with up_to: only envelopes of this space (kind meup)")),
		mcp.WithArray("meup_kinds", mcp.WithStringItems(), mcp.Description("with up_to: only envelopes of spaces with these MEUP kinds")),
		mcp.WithString("context", mcp.Description("with up_to: only envelopes of spaces in this context")),
		mcp.WithString("epoch", mcp.Description("with up_to: the epoch of the receive_messages result the cursor came from; if the inbox's epoch differs, nothing is acknowledged and the call fails")),
		mcp.WithOutputSchema[ackResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Acknowledge messages", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(true), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.ack)
	s.mcp.AddTool(mcp.NewTool("list_outbox",
		mcp.WithDescription("Show the reliable sends not delivered yet (without bodies): id, peer, kind, attempts, next attempt (due: true once its time has come), expiry, last error; and each peer's circuit breaker. They are retried until acknowledged or expired; retry_outbox tries them now."),
		mcp.WithOutputSchema[listOutboxResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List outbox", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.listOutbox)
	s.mcp.AddTool(mcp.NewTool("retry_outbox",
		mcp.WithDescription("Try the reliable sends queued for a peer (or for every peer) now instead of at their next attempt time; a peer whose circuit breaker is open gets one attempt first, and the rest follow if it is acknowledged. Returns how many sends were made due. Use it when you know the peer is back; the node also retries on its own."),
		mcp.WithString("peer", mcp.Description("only this peer's sends (name, key or peer UUID); leave out for every peer")),
		mcp.WithOutputSchema[retryOutboxResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Retry outbox now", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(true)}),
	), s.retryOutbox)
	s.mcp.AddTool(mcp.NewTool("drop_queued",
		mcp.WithDescription("Take reliable sends out of the outbox, by id (see list_outbox), into the dead letters (reason dropped): for a send the peer will never take, which holds back what is queued behind it. A send being attempted right now is left (in_flight: it may be delivered); retry_dead_letters queues a dropped send again."),
		mcp.WithArray("ids", mcp.Required(), mcp.WithStringItems(), mcp.MaxItems(node.MaxStatusIDs), mcp.Description("ids of the queued sends to drop")),
		mcp.WithOutputSchema[dropQueuedResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Drop queued sends", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(true), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.dropQueued)
	s.mcp.AddTool(mcp.NewTool("list_dead_letters",
		mcp.WithDescription("Show the reliable sends given up on (without bodies), oldest first, with the reason: expired (its ttl passed), retries_exhausted, unknown_peer (no longer trusted), rejected, or, for a request withdrawn before it was delivered, deadline or cancelled."),
		mcp.WithOutputSchema[listDeadLettersResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List dead letters", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), s.listDeadLetters)
	s.mcp.AddTool(mcp.NewTool("retry_dead_letters",
		mcp.WithDescription("Queue dead letters for delivery again (attempts reset, no time-to-live): the ones with the given ids, or all of them. Requests withdrawn at their deadline or by a cancel are not sent again (named by id, they are refused with bad_argument, the others still queued; with all they are left out): send a new request instead."),
		mcp.WithArray("ids", mcp.WithStringItems(), mcp.Description("ids of the dead letters to retry (see list_dead_letters)")),
		mcp.WithBoolean("all", mcp.Description("retry every dead letter (instead of ids)")),
		mcp.WithOutputSchema[retryDeadLettersResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Retry dead letters", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.retryDeadLetters)
	if !s.noPairing {
		s.addPairTools()
	}
	s.addSpaceTools()
	s.addSentTools() // slice B
	// Slice C: search.
	s.addSearchTools()
	s.addBroadcastTools() // broadcast and tasks slice
	s.addCardTools()      // slice E: agent cards
	s.addLifecycleTools() // slice F
}

// addPairTools adds pair_offer and pair_accept (left out with
// Options.NoPairing: unlisted, and calls to them fail as calls to an
// unknown tool).
func (s *Server) addPairTools() {
	s.mcp.AddTool(mcp.NewTool("pair_offer",
		mcp.WithDescription("Start pairing with another agent's node: returns a one-time line (a code and this node's address, valid for 10 minutes) to give to the other agent, who passes it to its pair_accept. When it is used, both nodes trust each other. Only do this when your user asks you to pair."),
		mcp.WithOutputSchema[pairOfferResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Offer pairing", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(true), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.pairOffer)
	s.mcp.AddTool(mcp.NewTool("pair_accept",
		mcp.WithDescription("Pair with the node whose pair_offer line you were given: both nodes then trust each other, and you can send to it by name. Only do this when your user asks you to pair."),
		mcp.WithString("code_line", mcp.Required(), mcp.Description("the line pair_offer returned on the other node (starts with meerkat-pair/1)")),
		mcp.WithString("name", mcp.Description("what to call the other node here (default: its own name)")),
		mcp.WithOutputSchema[pairAcceptResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Accept pairing", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(true), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
	), s.pairAccept)
}

type pairOfferResult struct {
	node.PairOffer
	Pending int `json:"pending"`
}

type pairAcceptResult struct {
	Paired  node.Paired `json:"paired"`
	Pending int         `json:"pending"`
}

func (s *Server) pairOffer(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	o, err := s.api.PairOffer(ctx, node.PairOptions{})
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(pairOfferResult{PairOffer: o, Pending: s.pending(ctx)})
}

func parsePairAccept(a args) (line, name string, err error) {
	if line, err = a.str("code_line", true); err != nil {
		return
	}
	name, err = a.str("name", false)
	return
}

func (s *Server) pairAccept(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	line, name, err := parsePairAccept(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	p, err := s.api.PairAccept(ctx, line, name)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(pairAcceptResult{Paired: p, Pending: s.pending(ctx)})
}

func parseSendMessage(a args) (peer, body string, opts node.SendOptions, err error) {
	if peer, err = a.str("peer", true); err != nil {
		return
	}
	if body, err = a.str("body", true); err != nil {
		return
	}
	if opts, err = parseSendOptions(a); err != nil {
		return
	}
	if opts.Interrupt, err = parseInterrupt(a); err != nil {
		return
	}
	opts.TaskID, err = a.optStr("task_id", "none") // broadcast and tasks slice
	return
}

func parseSendRequest(a args) (peer, intent string, opts node.SendOptions, err error) {
	if peer, err = a.str("peer", true); err != nil {
		return
	}
	if intent, err = a.str("intent", true); err != nil {
		return
	}
	if opts, err = parseSendOptions(a); err != nil {
		return
	}
	if opts.Interrupt, err = parseInterrupt(a); err != nil {
		return
	}
	if opts.TaskID, err = a.optStr("task_id", "none"); err != nil {
		return
	}
	opts.Deadline, err = parseDeadline(a) // slice F
	return
}

func parseSendResponse(a args) (peer, rid, status string, opts node.SendOptions, err error) {
	if peer, err = a.str("peer", true); err != nil {
		return
	}
	if rid, err = a.str("request_id", true); err != nil {
		return
	}
	if status, err = a.str("status", true); err != nil {
		return
	}
	if opts, err = parseSendOptions(a); err != nil {
		return
	}
	opts.TaskID, err = a.optStr("task_id", "none") // broadcast and tasks slice
	return
}

// parseSendOptions reads reliable (default true) and ttl_seconds (reliable
// sends only).
func parseSendOptions(a args) (node.SendOptions, error) {
	opts := node.SendOptions{Reliable: true}
	if v, ok := a.m["reliable"]; ok && v != nil {
		b, ok := v.(bool)
		if !ok {
			return opts, invalidParams{`argument "reliable" must be a boolean`}
		}
		opts.Reliable = b
	}
	if err := parseIdempotencyKey(a, &opts); err != nil { // slice B
		return opts, err
	}
	v, ok := a.m["ttl_seconds"]
	if !ok || v == nil {
		return opts, nil
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || f < 0 || f > node.MaxTTL.Seconds() {
		return opts, invalidParams{fmt.Sprintf(`argument "ttl_seconds" must be a number from 0 to %g`, node.MaxTTL.Seconds())}
	}
	if !opts.Reliable {
		return opts, invalidParams{`argument "ttl_seconds" applies to reliable sends only (reliable: false makes one attempt)`}
	}
	opts.TTL = time.Duration(f * float64(time.Second))
	return opts, nil
}

// queuedNote tells a model what happens to a send that is queued.
func queuedNote(sent node.Sent) string {
	if sent.Delivery == node.DeliveryStored {
		return "not delivered yet: the NATS JetStream stream stored it, and the peer gets it when it is back; nothing to do now (message_status shows when the peer acknowledges it). Do not send it again."
	}
	if sent.Delivery != node.DeliveryQueued {
		return ""
	}
	waits := ""
	if sent.Behind > 0 {
		waits = fmt.Sprintf("it waits behind %d earlier sends to this peer (sends to a peer go in order), not attempted yet; ", sent.Behind)
	}
	if sent.BreakerOpenUntil != nil {
		waits += "the peer's circuit breaker holds it until " + sent.BreakerOpenUntil.Format(time.RFC3339) + " (sooner if the peer shows it is back); "
	}
	return "not delivered yet: " + waits + "the node keeps retrying it with backoff until the peer acknowledges it or its ttl passes; " +
		"nothing to do now. See list_outbox for its attempts (and list_peers for the peer's breaker); " +
		"if it expires it moves to list_dead_letters, from where retry_dead_letters queues it again; " +
		"drop_queued takes out one the peer will never take."
}

func (s *Server) sendMessage(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	peer, body, opts, err := parseSendMessage(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	sent, err := s.api.SendMessage(ctx, peer, body, opts)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(sendResult{Sent: sent, Note: queuedNote(sent), Pending: s.pending(ctx)})
}

func (s *Server) sendRequest(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	a := args{req.GetArguments()}
	peer, intent, opts, err := parseSendRequest(a)
	if err != nil {
		return nil, err
	}
	sent, err := s.api.SendRequest(ctx, peer, intent, rawJSON(req, "params"), opts)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(sendResult{Sent: sent, Note: queuedNote(sent), Pending: s.pending(ctx)})
}

func (s *Server) sendResponse(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	a := args{req.GetArguments()}
	peer, rid, status, opts, err := parseSendResponse(a)
	if err != nil {
		return nil, err
	}
	sent, err := s.api.SendResponse(ctx, peer, rid, status, rawJSON(req, "result"), opts)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(sendResult{Sent: sent, Note: queuedNote(sent), Pending: s.pending(ctx)})
}

func (s *Server) listOutbox(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	o, err := s.api.Outbox(ctx)
	if err != nil {
		return s.failed(ctx, err)
	}
	if o.Entries == nil {
		o.Entries = []node.QueuedSend{}
	}
	if o.Peers == nil {
		o.Peers = []node.PeerSendState{}
	}
	return result(listOutboxResult{Entries: o.Entries, Peers: o.Peers, Pending: s.pending(ctx)})
}

func (s *Server) retryOutbox(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	peer, err := args{req.GetArguments()}.optStr("peer", "every peer")
	if err != nil {
		return nil, err
	}
	n, err := s.api.RetryOutbox(ctx, peer)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(retryOutboxResult{Due: n, Pending: s.pending(ctx)})
}

// parseDropQueued reads drop_queued's ids: at least one.
func parseDropQueued(a args) ([]string, error) {
	ids, err := a.strings("ids")
	if err == nil && (len(ids) == 0 || len(ids) > node.MaxStatusIDs) {
		err = invalidParams{fmt.Sprintf("argument \"ids\" must hold 1 to %d ids of queued sends", node.MaxStatusIDs)}
	}
	return ids, err
}

func (s *Server) dropQueued(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ids, err := parseDropQueued(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	d, err := s.api.DropQueued(ctx, ids)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(dropQueuedResult{Dropped: d.Dropped, NotQueued: d.NotQueued, InFlight: d.InFlight, Stored: d.Stored, Pending: s.pending(ctx)})
}

func (s *Server) listDeadLetters(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	dl, err := s.api.DeadLetters(ctx)
	if err != nil {
		return s.failed(ctx, err)
	}
	if dl == nil {
		dl = []node.DeadLetter{}
	}
	return result(listDeadLettersResult{DeadLetters: dl, Pending: s.pending(ctx)})
}

func parseRetry(a args) (ids []string, all bool, err error) {
	if ids, err = a.strings("ids"); err != nil {
		return
	}
	// Each id once: not_found counts the ids given that requeued nothing.
	seen := map[string]bool{}
	uniq := ids[:0]
	for _, id := range ids {
		if id = strings.ToLower(id); !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	ids = uniq
	if v, ok := a.m["all"]; ok && v != nil {
		if all, ok = v.(bool); !ok {
			return nil, false, invalidParams{`argument "all" must be a boolean`}
		}
	}
	if all == (len(ids) > 0) {
		return nil, false, invalidParams{"give ids or all: true (not both)"}
	}
	return ids, all, nil
}

func (s *Server) retryDeadLetters(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ids, all, err := parseRetry(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	n, err := s.api.RetryDeadLetters(ctx, ids, all)
	if err != nil {
		return s.failed(ctx, err)
	}
	notFound := 0
	if !all {
		notFound = max(len(ids)-n, 0)
	}
	return result(retryDeadLettersResult{Requeued: n, NotFound: notFound, Pending: s.pending(ctx)})
}

// status returns the node's Status as is: it carries pending already
// (the same count the other tools add).
func (s *Server) status(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	st, err := s.api.Status(ctx)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(st)
}

func (s *Server) listPeers(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	peers, err := s.api.Peers(ctx)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(listPeersResult{Self: s.self(ctx), Peers: orEmpty(peers), Pending: s.pending(ctx)})
}

// The receive and ack filters for envelopes of spaces.
var (
	spaceFilter     = mcp.WithString("space", mcp.Description("only envelopes of this space (kind meup)"))
	meupKindsFilter = mcp.WithArray("meup_kinds", mcp.WithStringItems(), mcp.Description("only envelopes of spaces with these MEUP kinds, e.g. [\"mcp/proposal\", \"chat\"]"))
	contextFilter   = mcp.WithString("context", mcp.Description("only envelopes of spaces in this context (sub-thread)"))
)

// admitAnyJSON makes the schema at path (below a tool's output schema
// properties) admit any JSON value: the empty schema {}, not the boolean
// schema true, which means the same but which the 1.x TypeScript SDK
// rejects as a property of an outputSchema (its tools/list then fails).
func admitAnyJSON(props map[string]any, path ...string) {
	m := props
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			panic("bug: no output schema at " + strings.Join(path, "."))
		}
		m = next
	}
	if _, ok := m[path[len(path)-1]]; !ok {
		panic("bug: no output schema at " + strings.Join(path, "."))
	}
	m[path[len(path)-1]] = map[string]any{}
}

// orEmpty returns peers, or an empty list for nil (the output schema
// wants an array). Each peer is shown as the node reports it, as
// `meerkatd peers list --json` shows it.
func orEmpty(peers []node.Peer) []node.Peer {
	if peers == nil {
		return []node.Peer{}
	}
	return peers
}

func parseReceive(a args) (node.Query, error) {
	var q node.Query
	wait, _, err := a.num("wait_ms", 0, float64(MaxWait/time.Millisecond))
	if err != nil {
		return q, err
	}
	q.Wait = time.Duration(wait) * time.Millisecond
	limit, ok, err := a.num("limit", 1, 1000)
	if err != nil {
		return q, err
	}
	q.Limit = 100
	if ok {
		q.Limit = int(limit)
	}
	after, _, err := a.num("after", 0, 1<<53)
	if err != nil {
		return q, err
	}
	q.After = uint64(after)
	if q.Order, err = parseOrder(a); err != nil {
		return q, err
	}
	if q.Epoch, err = a.str("epoch", false); err != nil {
		return q, err
	}
	return q, parseFilters(a, &q)
}

// parseFilters reads the kinds, from and request_id filters.
func parseFilters(a args, q *node.Query) error {
	var err error
	if q.Kinds, err = a.strings("kinds"); err != nil {
		return err
	}
	for _, k := range q.Kinds {
		if k != "message" && k != "request" && k != "response" && k != "meup" {
			return invalidParams{fmt.Sprintf("kinds: %q is not message, request, response or meup", k)}
		}
	}
	if q.From, err = a.str("from", false); err != nil {
		return err
	}
	if q.Space, err = a.str("space", false); err != nil {
		return err
	}
	if q.MEUPKinds, err = a.strings("meup_kinds"); err != nil {
		return err
	}
	if q.Context, err = a.str("context", false); err != nil {
		return err
	}
	q.RequestID, err = a.str("request_id", false)
	q.RequestID = strings.ToLower(q.RequestID)
	return err
}

func (s *Server) receive(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := parseReceive(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	now := q
	now.Wait = 0
	b, err := waitUnlessInputEnds(s, ctx,
		func(ctx context.Context) (node.Batch, error) { return s.api.Receive(ctx, q) },
		func(ctx context.Context) (node.Batch, error) { return s.api.Receive(ctx, now) })
	if err != nil {
		return s.failed(ctx, err)
	}
	if b.Messages == nil {
		b.Messages = []node.Message{}
	}
	return result(b)
}

// upToBelowNote is ack_messages' note for an up_to below what reads
// returned; upToZeroNote, for up_to 0, which is below every item.
const (
	upToBelowNote = "nothing was acknowledged: the items your reads returned lie above up_to (in priority order a read's cursor stays below the oldest item it left out); acknowledge them by ids"
	upToZeroNote  = "nothing was acknowledged: up_to 0 lies below every item (a priority read's cursor is 0 while it leaves out the oldest); acknowledge what you handled by ids"
)

func (s *Server) ack(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ar, err := parseAck(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	if len(ar.IDs) == 0 && ar.UpTo == 0 {
		// A priority read's cursor can be 0 (below every item it left
		// out): up_to 0 acknowledges nothing, and says what would (it
		// does not ask the node, so it knows nothing of what reads
		// returned).
		return result(ackResult{Pending: s.pending(ctx), Note: upToZeroNote})
	}
	r, err := s.api.Ack(ctx, ar)
	if err != nil {
		return s.failed(ctx, err)
	}
	if r.Acked > 0 {
		s.inboxChanged()
	}
	res := ackResult{Acked: r.Acked, Pending: r.Pending, Unread: r.Unread, Above: r.Above, NotFound: r.NotFound}
	if r.Above > 0 {
		res.Note = upToBelowNote
	}
	return result(res)
}

// parseAck reads ack_messages: ids, or up_to with the filters of the read
// it came from (every filter receive_messages takes) and its epoch.
func parseAck(a args) (node.AckRequest, error) {
	var ar node.AckRequest
	var err error
	if ar.IDs, err = a.strings("ids"); err != nil {
		return ar, err
	}
	for i := range ar.IDs {
		ar.IDs[i] = strings.ToLower(ar.IDs[i])
	}
	n, has, err := a.num("up_to", 0, 1<<53)
	if err != nil {
		return ar, err
	}
	if len(ar.IDs) == 0 && !has {
		return ar, invalidParams{"give ids or up_to"}
	}
	ar.UpTo = uint64(n)
	var filter node.Query
	if err := parseFilters(a, &filter); err != nil {
		return ar, err
	}
	ar.Kinds, ar.From, ar.RequestID, ar.MEUPFilter = filter.Kinds, filter.From, filter.RequestID, filter.MEUPFilter
	ar.Epoch, err = a.str("epoch", false)
	return ar, err
}

func (s *Server) addResources() {
	s.mcp.AddResource(mcp.NewResource(InboxURI, "inbox",
		mcp.WithResourceDescription("Unacknowledged received items, oldest first (JSON). Subscribe to be told when it changes."),
		mcp.WithMIMEType("application/json"),
	), func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		b, err := s.api.Receive(ctx, node.Query{Limit: 1000, Order: node.OrderArrival})
		if err != nil {
			return nil, err
		}
		if b.Messages == nil {
			b.Messages = []node.Message{}
		}
		text, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: InboxURI, MIMEType: "application/json", Text: string(text)}}, nil
	})
	s.mcp.AddResource(mcp.NewResource(PeersURI, "peers",
		mcp.WithResourceDescription("This node and its trusted peers (JSON)."),
		mcp.WithMIMEType("application/json"),
	), func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		peers, err := s.api.Peers(ctx)
		if err != nil {
			return nil, err
		}
		text, err := json.Marshal(listPeersResult{Self: s.self(ctx), Peers: orEmpty(peers)})
		if err != nil {
			return nil, err
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: PeersURI, MIMEType: "application/json", Text: string(text)}}, nil
	})
}

var _ server.ToolHandlerFunc = (*Server)(nil).sendMessage
