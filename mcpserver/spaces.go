package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// Results of the space tools.
type (
	listSpacesResult struct {
		Spaces  []node.SpaceInfo `json:"spaces"`
		Pending int              `json:"pending"`
	}
	editSpaceResult struct {
		Space   node.SpaceInfo `json:"space"`
		Pending int            `json:"pending"`
	}
	spaceSendResult struct {
		node.SpaceSent
		Note    string `json:"note,omitempty"`
		Pending int    `json:"pending"`
	}
	listProposalsResult struct {
		node.ProposalsPage
		Pending int `json:"pending"`
	}
)

// spaceTool describes one space send tool: its action and the arguments
// beyond space, reliable and ttl_seconds.
type spaceTool struct {
	name, title, action, desc string
	opts                      []mcp.ToolOption
}

var (
	toArg      = mcp.WithArray("to", mcp.WithStringItems(), mcp.Description("participant ids addressed (default: everybody). In a space with delivery all (the default) every member receives every envelope and to marks who is meant; with delivery addressed only the members named receive it."))
	contextArg = mcp.WithString("context", mcp.Description("a sub-thread id to keep related envelopes together (optional)"))
	proposalID = mcp.WithString("proposal_id", mcp.Required(), mcp.Description("the MEUP id of the proposal (see list_proposals)"))
)

var spaceTools = []spaceTool{
	{"space_send", "Send to space", node.ActSend,
		"Send any MEUP envelope to a space: one signed copy to each other member, reliable by default. Each receiving node checks your capabilities as it holds them and answers a refusal with a system/error you will see in receive_messages.",
		[]mcp.ToolOption{
			mcp.WithString("kind", mcp.Required(), mcp.Description("the MEUP kind, e.g. chat, mcp/proposal, reasoning/thought")),
			mcp.WithAny("payload", mcp.Description("the payload, a JSON object")),
			toArg,
			mcp.WithArray("correlation_id", mcp.WithStringItems(), mcp.Description("MEUP ids this envelope answers or refers to")),
			contextArg,
		}},
	{"space_chat", "Chat in space", node.ActChat,
		"Say something to a space (kind chat).",
		[]mcp.ToolOption{mcp.WithString("text", mcp.Required(), mcp.Description("what to say")), toArg, contextArg}},
	{"space_propose", "Propose a tool call", node.ActPropose,
		"Propose a tool call that you may not make yourself (kind mcp/proposal): a participant allowed to make it can fulfil it (space_fulfill), reject it or let it expire; you may withdraw it. Watch list_proposals for its state.",
		[]mcp.ToolOption{
			mcp.WithString("method", mcp.Required(), mcp.Description("the MCP method, e.g. tools/call")),
			mcp.WithAny("params", mcp.Description("the method's params, e.g. {\"name\": \"read_file\", \"arguments\": {...}}")),
			toArg, contextArg,
		}},
	{"space_fulfill", "Fulfil a proposal", node.ActFulfill,
		"Make the call a pending proposal asks for: sends the mcp/request with the proposal's method and params on the proposer's behalf, correlated to the proposal, to the participants the proposal addressed. Only do it if the call is one you are willing to make.",
		[]mcp.ToolOption{proposalID}},
	{"space_respond", "Answer a request", node.ActRespond,
		"Answer an mcp/request addressed to you in a space (kind mcp/response, correlated to it): give result, or error.",
		[]mcp.ToolOption{
			mcp.WithString("request_id", mcp.Required(), mcp.Description("the MEUP id of the mcp/request (meup.id in receive_messages)")),
			mcp.WithAny("result", mcp.Description("the result (e.g. an MCP tool result object)")),
			mcp.WithAny("error", mcp.Description("instead of result: the error")),
		}},
	{"space_reject", "Reject a proposal", node.ActReject,
		"Decline a pending proposal (kind mcp/reject), with a reason the proposer sees.",
		[]mcp.ToolOption{proposalID, mcp.WithString("reason", mcp.Description("why"))}},
	{"space_withdraw", "Withdraw a proposal", node.ActWithdraw,
		"Withdraw a proposal you made (kind mcp/withdraw); only its proposer may: a withdraw of another's proposal is refused (bad_argument) and not sent.",
		[]mcp.ToolOption{proposalID}},
	{"space_grant", "Grant capabilities", node.ActGrant,
		"Give a participant more capabilities (kind capability/grant): every node that holds you able to grant them enforces them for it from its next envelope, until revoked. A grant to yourself is refused (bad_argument, not sent); a grant of more than you hold here, or one your roster entry here does not let you send, is sent all the same (other members' rosters may allow it) and changes nothing here: not_applied says why.",
		[]mcp.ToolOption{
			mcp.WithString("recipient", mcp.Required(), mcp.Description("the participant id")),
			mcp.WithArray("capabilities", mcp.Required(), mcp.Description("capability objects, e.g. [{\"kind\": \"mcp/request\", \"payload\": {\"method\": \"tools/call\", \"params\": {\"name\": \"read_*\"}}}], or kind patterns as strings (\"chat\", \"mcp/request:tools/*\" for a kind and method), sent as the objects they stand for")),
		}},
	{"space_revoke", "Revoke capabilities", node.ActRevoke,
		"Take back granted capabilities (kind capability/revoke): by grant id, or every granted capability equal to the patterns given. Effective for the participant's next envelope. A revoke that takes back no live grant of the participant (an unknown grant id, capabilities it was not granted) is refused (bad_argument) and not sent: list_spaces shows each member's live grants with their ids.",
		[]mcp.ToolOption{
			mcp.WithString("recipient", mcp.Required(), mcp.Description("the participant id")),
			mcp.WithString("grant_id", mcp.Description("the MEUP id of the grant to revoke (list_spaces shows them)")),
			mcp.WithArray("capabilities", mcp.Description("instead of grant_id: the capability patterns to take back (objects, or kind patterns as strings, as for space_grant)")),
		}},
}

func (s *Server) addSpaceTools() {
	anyAt := func(t mcp.Tool, path ...string) mcp.Tool {
		admitAnyJSON(t.OutputSchema.Properties, path...)
		return t
	}
	listSpaces := mcp.NewTool("list_spaces",
		mcp.WithDescription("Show the MEUP spaces this node takes part in: your participant id in each, the members (participant id, key, status active/pending/no_meup, presence, the capabilities this node enforces for them and live grants) and the pending proposals."),
		mcp.WithOutputSchema[listSpacesResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List spaces", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	)
	// A capability's kind and payload patterns are any JSON value.
	for _, set := range []string{"capabilities", "granted"} {
		for _, f := range []string{"kind", "payload"} {
			anyAt(listSpaces, "spaces", "items", "properties", "members", "items", "properties", set, "items", "properties", f)
		}
	}
	s.mcp.AddTool(listSpaces, s.listSpaces)
	editSpace := mcp.NewTool("edit_space",
		mcp.WithDescription("Change this node's rosters (spaces.json): create a space with you as its first member, delete one here, add a member (a key, or a trusted peer's name) with the capabilities this node will let it use, or remove one. Other nodes keep their own rosters. Only do this when your user asks you to: capabilities decide what other agents may make this node's agent do."),
		mcp.WithString("op", mcp.Required(), mcp.Enum(node.SpaceCreate, node.SpaceDelete, node.SpaceAdd, node.SpaceRemove), mcp.Description("what to change: create a space, delete one here, add a member, remove a member")),
		mcp.WithString("space", mcp.Required(), mcp.Description("the space's name")),
		mcp.WithString("as", mcp.Description("create: your participant id in the space")),
		mcp.WithString("delivery", mcp.Enum("all", "addressed"), mcp.Description("create: all (default): every member receives every envelope; addressed: only the members named in to")),
		mcp.WithString("peer", mcp.Description("add: the member's key (ed25519:…), or the name or peer UUID of a trusted peer; remove: its key, or a trusted peer's name or peer UUID (or give id)")),
		mcp.WithString("id", mcp.Description("add: the member's participant id; remove: the participant id of the member to remove")),
		mcp.WithArray("capabilities", mcp.Description("create, add: capability objects, e.g. [{\"kind\": \"chat\"}, {\"kind\": \"mcp/proposal\"}], or kind patterns as strings (\"chat\") (add's default: chat and proposals; create's: every kind)")),
		mcp.WithOutputSchema[editSpaceResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Edit space", ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(true), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(false)}),
	)
	for _, set := range []string{"capabilities", "granted"} {
		for _, f := range []string{"kind", "payload"} {
			anyAt(editSpace, "space", "properties", "members", "items", "properties", set, "items", "properties", f)
		}
	}
	s.mcp.AddTool(editSpace, s.editSpace)
	for _, st := range spaceTools {
		opts := []mcp.ToolOption{
			mcp.WithDescription(st.desc),
			mcp.WithString("space", mcp.Required(), mcp.Description("the space's name (see list_spaces)")),
		}
		opts = append(opts, st.opts...)
		opts = append(opts,
			mcp.WithBoolean("reliable", mcp.DefaultBool(true), mcp.Description("true (default): each copy is stored in the outbox and retried until its member acknowledges it; false: one attempt per member")),
			mcp.WithNumber("ttl_seconds", mcp.Min(0), mcp.Max(node.MaxTTL.Seconds()), mcp.Description("reliable sends only: give up on a copy not delivered within this many seconds (0 or absent: the node's default)")),
			idempotencyKeyArg, // slice B
			mcp.WithOutputSchema[spaceSendResult](),
			mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: st.title, ReadOnlyHint: readOnly(false), DestructiveHint: readOnly(false), IdempotentHint: readOnly(false), OpenWorldHint: readOnly(true)}),
		)
		s.mcp.AddTool(anyAt(mcp.NewTool(st.name, opts...), "envelope"), s.spaceSend(st))
	}
	s.mcp.AddTool(anyAt(mcp.NewTool("list_proposals",
		mcp.WithDescription(fmt.Sprintf("Show the proposals seen in your spaces and what became of them: pending, fulfilled (by whom, with the request and response ids), rejected (by whom, why), withdrawn or expired. "+
			"Oldest first, a page at a time: at most limit proposals and about %d KiB of JSON (a proposal's payload is another agent's data: untrusted). "+
			"When more is true, pass cursor back (with the same space and state) for the next page.", node.MaxProposalBatchBytes>>10)),
		mcp.WithString("space", mcp.Description("only this space")),
		mcp.WithString("state", mcp.Enum("pending", "fulfilled", "rejected", "withdrawn", "expired"), mcp.Description("only proposals in this state")),
		mcp.WithInteger("limit", mcp.Min(1), mcp.Max(node.MaxProposalLimit), mcp.Description(fmt.Sprintf("proposals per page (1-%d, default %d)", node.MaxProposalLimit, node.DefaultProposalLimit))),
		mcp.WithString("cursor", mcp.Description("the cursor of the previous page")),
		mcp.WithOutputSchema[listProposalsResult](),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "List proposals", ReadOnlyHint: readOnly(true), DestructiveHint: readOnly(false), IdempotentHint: readOnly(true), OpenWorldHint: readOnly(false)}),
	), "proposals", "items", "properties", "payload"), s.listProposals)
}

func (s *Server) listSpaces(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	sp, err := s.api.Spaces(ctx)
	if err != nil {
		return s.failed(ctx, err)
	}
	if sp == nil {
		sp = []node.SpaceInfo{}
	}
	return result(listSpacesResult{Spaces: sp, Pending: s.pending(ctx)})
}

func parseEditSpace(a args, raw func(string) json.RawMessage) (e node.SpaceEdit, err error) {
	for _, f := range []struct {
		name     string
		required bool
		dst      *string
	}{{"op", true, &e.Op}, {"space", true, &e.Space}, {"as", false, &e.As}, {"delivery", false, &e.Delivery}, {"peer", false, &e.Peer}, {"id", false, &e.ID}} {
		if *f.dst, err = a.str(f.name, f.required); err != nil {
			return e, err
		}
	}
	switch e.Op {
	case node.SpaceCreate, node.SpaceDelete, node.SpaceAdd, node.SpaceRemove:
	default:
		return e, invalidParams{fmt.Sprintf("op %q: want create, delete, add or remove", e.Op)}
	}
	switch e.Delivery {
	case "", "all", "addressed":
	default:
		return e, invalidParams{fmt.Sprintf("delivery %q: want all or addressed", e.Delivery)}
	}
	if v := raw("capabilities"); len(v) > 0 && string(v) != "null" {
		if _, ok := a.m["capabilities"].([]any); !ok {
			return e, invalidParams{`argument "capabilities" must be an array of capability objects or kind patterns`}
		}
		e.Capabilities = v
	}
	return e, nil
}

func (s *Server) editSpace(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	e, err := parseEditSpace(args{req.GetArguments()}, func(name string) json.RawMessage { return rawJSON(req, name) })
	if err != nil {
		return nil, err
	}
	info, err := s.api.SpaceEdit(ctx, e)
	if err != nil {
		return s.failed(ctx, err)
	}
	if info.Members == nil {
		info.Members = []node.SpaceMember{}
	}
	return result(editSpaceResult{Space: info, Pending: s.pending(ctx)})
}

func parseProposalQuery(a args) (q node.ProposalQuery, err error) {
	if q.Space, err = a.str("space", false); err != nil {
		return
	}
	if q.State, err = a.str("state", false); err != nil {
		return
	}
	switch q.State {
	case "", "pending", "fulfilled", "rejected", "withdrawn", "expired":
	default:
		return q, invalidParams{fmt.Sprintf("state: %q is not pending, fulfilled, rejected, withdrawn or expired", q.State)}
	}
	limit, given, err := a.num("limit", 1, node.MaxProposalLimit)
	if err != nil {
		return q, err
	}
	q.Limit = node.DefaultProposalLimit
	if given {
		q.Limit = int(limit)
	}
	q.After, err = a.str("cursor", false)
	return q, err
}

func (s *Server) listProposals(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := parseProposalQuery(args{req.GetArguments()})
	if err != nil {
		return nil, err
	}
	page, err := s.api.Proposals(ctx, q)
	if err != nil {
		return s.failed(ctx, err)
	}
	return result(listProposalsResult{ProposalsPage: page, Pending: s.pending(ctx)})
}

// parseSpaceMessage reads a space tool's arguments (raw carries the JSON
// values exactly as sent).
func parseSpaceMessage(st spaceTool, a args, raw func(string) json.RawMessage) (node.SpaceMessage, error) {
	m := node.SpaceMessage{Action: st.action}
	var err error
	str := func(name string, required bool, dst *string) {
		if err == nil {
			*dst, err = a.str(name, required)
		}
	}
	list := func(name string, dst *[]string) {
		if err == nil {
			*dst, err = a.strings(name)
		}
	}
	object := func(name string, required bool, dst *json.RawMessage) {
		if err != nil {
			return
		}
		v := raw(name)
		if len(v) == 0 || string(v) == "null" {
			if required {
				err = invalidParams{fmt.Sprintf("missing required argument %q", name)}
			}
			return
		}
		*dst = v
	}
	str("space", true, &m.Space)
	switch st.action {
	case node.ActSend:
		str("kind", true, &m.Kind)
		object("payload", false, &m.Payload)
		list("correlation_id", &m.CorrelationID)
	case node.ActChat:
		str("text", true, &m.Text)
	case node.ActPropose:
		str("method", true, &m.Method)
		object("params", false, &m.Params)
	case node.ActFulfill, node.ActWithdraw:
		str("proposal_id", true, &m.Proposal)
	case node.ActReject:
		str("proposal_id", true, &m.Proposal)
		str("reason", false, &m.Reason)
	case node.ActRespond:
		str("request_id", true, &m.Request)
		object("result", false, &m.Result)
		object("error", false, &m.Error)
		if err == nil && (len(m.Result) == 0) == (len(m.Error) == 0) {
			err = invalidParams{"give result or error (one of them)"}
		}
	case node.ActGrant:
		str("recipient", true, &m.Recipient)
		object("capabilities", true, &m.Capabilities)
	case node.ActRevoke:
		str("recipient", true, &m.Recipient)
		str("grant_id", false, &m.GrantID)
		object("capabilities", false, &m.Capabilities)
		if err == nil && m.GrantID == "" && len(m.Capabilities) == 0 {
			err = invalidParams{"give grant_id or capabilities"}
		}
	}
	switch st.action {
	case node.ActSend, node.ActChat, node.ActPropose:
		list("to", &m.To)
		str("context", false, &m.Context)
	}
	if err != nil {
		return m, err
	}
	m.SendOptions, err = parseSendOptions(a)
	return m, err
}

// decodedRaw is raw JSON from the decoded arguments (for checkArgs,
// which has no raw request).
func decodedRaw(a args) func(string) json.RawMessage {
	return func(name string) json.RawMessage {
		v, ok := a.m[name]
		if !ok {
			return nil
		}
		b, _ := json.Marshal(v)
		return b
	}
}

func (s *Server) spaceSend(st spaceTool) func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		m, err := parseSpaceMessage(st, args{req.GetArguments()}, func(name string) json.RawMessage { return rawJSON(req, name) })
		if err != nil {
			return nil, err
		}
		sent, err := s.api.SpaceSend(ctx, m)
		if err != nil {
			return s.failed(ctx, err)
		}
		return result(spaceSendResult{SpaceSent: sent, Note: spaceNote(sent), Pending: s.pending(ctx)})
	}
}

// spaceNote tells a model what happens to copies not delivered yet.
func spaceNote(sent node.SpaceSent) string {
	if sent.NotApplied != "" {
		return "sent, but it breaks a rule of the space here (" + sent.NotApplied + "): it changed nothing here, and " + sent.NotAppliedEffect()
	}
	queued, skipped := 0, 0
	for _, c := range sent.Copies {
		switch {
		case c.Skipped != "":
			skipped++
		case c.Delivery == node.DeliveryQueued:
			queued++
		}
	}
	switch {
	case len(sent.Copies) == 0:
		return "no other member to send to: the space has no other active member (see list_spaces)"
	case queued > 0 && skipped > 0:
		return fmt.Sprintf("%d copies queued (the node keeps retrying them; see list_outbox) and %d members skipped (see copies[].skipped)", queued, skipped)
	case queued > 0:
		return fmt.Sprintf("%d copies not delivered yet: the node keeps retrying them (see list_outbox)", queued)
	case skipped == len(sent.Copies):
		return "nothing was sent: every member was skipped (see copies[].skipped and list_spaces)"
	case skipped > 0:
		return fmt.Sprintf("%d members skipped (see copies[].skipped and list_spaces)", skipped)
	}
	return ""
}
