package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
)

// spaceArity is each space subcommand's positional arguments: at least,
// at most (-1: any number).
var spaceArity = map[string][2]int{
	"list": {0, 0}, "show": {1, 1}, "create": {1, 1}, "delete": {1, 1}, "add": {3, 3}, "remove": {2, 2},
	"send": {2, 3}, "chat": {2, 2}, "propose": {2, 3}, "fulfill": {2, 2}, "respond": {3, 3}, "reject": {2, 3},
	"withdraw": {2, 2}, "grant": {3, -1}, "revoke": {2, -1}, "proposals": {0, 1},
}

func runSpace(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	if sub == "" {
		sub = "list"
	}
	flags, homeFlag, asJSON := e.newCmd("space "+sub, "")
	as := flags.String("as", "", "create: this node's participant `id` in the space")
	delivery := flags.String("delivery", "", "create: delivery `MODE`: all (the default: every member receives every envelope) or addressed (only the members it names)")
	var caps, to, corr stringList
	flags.Var(&caps, "cap", "create, add: a capability: a kind pattern (chat, mcp/*), KIND:METHOD (mcp/request:tools/*), a JSON object or a JSON array of them (repeatable)")
	flags.Var(&to, "to", "send, chat, propose, fulfill, respond, reject, withdraw, grant, revoke: a participant `id` addressed (repeatable; default: everybody, or whom the answer concerns)")
	flags.Var(&corr, "correlation-id", "send, chat, propose: a MEUP `id` this envelope refers to (repeatable)")
	contextID := flags.String("context", "", "send, chat, propose: the sub-thread `id`")
	isError := flags.Bool("error", false, "respond: the JSON is an error, not a result")
	grantID := flags.String("grant-id", "", "revoke: the `id` of the grant to revoke")
	state := flags.String("state", "", "proposals: only `state` (pending, fulfilled, rejected, withdrawn, expired)")
	direct := flags.Bool("direct", false, "one attempt per member instead of a reliable send through the outbox")
	ttl := flags.Duration("ttl", 0, "reliable: give up on a copy not acked within `DUR` (default outbox.default_ttl_secs)")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	ar, ok := spaceArity[sub]
	if !ok {
		return fmt.Errorf("%w: unknown space subcommand %q (see meerkatd help space)", errUsage, sub)
	}
	if len(pos) < ar[0] || ar[1] >= 0 && len(pos) > ar[1] {
		return fmt.Errorf("%w: wrong number of arguments for space %s (see meerkatd help space)", errUsage, sub)
	}
	if sub == "revoke" && *grantID == "" && len(pos) == 2 {
		return fmt.Errorf("%w: space revoke needs --grant-id ID or the capabilities to take back", errUsage)
	}
	if (len(corr) > 0 || *contextID != "") && sub != "send" && sub != "chat" && sub != "propose" {
		return fmt.Errorf("%w: --correlation-id and --context apply to space send, chat and propose, not to space %s", errUsage, sub)
	}
	if *ttl < 0 || *direct && *ttl > 0 {
		return fmt.Errorf("%w: --ttl must be positive and applies to reliable sends (not --direct)", errUsage)
	}
	capsJSON := func(list []string) (json.RawMessage, error) {
		caps, err := node.CapabilityArgs(list)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		return caps, nil
	}
	jsonArg := func(what, arg string) (json.RawMessage, error) {
		text, err := e.readInput(what, arg)
		if err != nil {
			return nil, err
		}
		if !json.Valid([]byte(text)) {
			return nil, fmt.Errorf("%w: %s is not valid JSON", errUsage, what)
		}
		return json.RawMessage(text), nil
	}
	output := func(v any, text func(io.Writer)) error {
		if *asJSON {
			return nodetext.PrintJSON(e.stdout, v)
		}
		text(e.stdout)
		return nil
	}
	return e.withBackend(*homeFlag, node.MaxWait+30*time.Second, func(ctx context.Context, b *control.Backend) error {
		switch sub {
		case "list", "show":
			sp, err := b.Spaces(ctx)
			if err != nil {
				return err
			}
			if sub == "show" {
				for _, s := range sp {
					if strings.EqualFold(s.Name, pos[0]) {
						return output(s, func(w io.Writer) { nodetext.Space(w, s) })
					}
				}
				return &node.Error{Code: node.CodeUnknownSpace, Msg: fmt.Sprintf("no space %q here (meerkatd space list shows them)", pos[0])}
			}
			return nodetext.List(e.stdout, e.stderr, *asJSON, sp, "no spaces (create one with meerkatd space create NAME --as ID)", func(w io.Writer, sp []node.SpaceInfo) error {
				for i, s := range sp {
					if i > 0 {
						fmt.Fprintln(w)
					}
					nodetext.Space(w, s)
				}
				return nil
			})
		case "create", "delete", "add", "remove":
			ed := node.SpaceEdit{Op: sub, Space: pos[0], As: *as, Delivery: *delivery}
			if sub == "add" {
				ed.Peer, ed.ID = pos[1], pos[2]
			}
			if sub == "remove" {
				ed.ID = pos[1]
			}
			if ed.Capabilities, err = capsJSON(caps); err != nil {
				return err
			}
			info, err := b.SpaceEdit(ctx, ed)
			if err != nil {
				return err
			}
			return output(info, func(w io.Writer) {
				if sub == "delete" {
					fmt.Fprintf(w, "space %s deleted here\n", nodetext.Escape(pos[0], ""))
					return
				}
				nodetext.Space(w, info)
			})
		case "proposals":
			q := node.ProposalQuery{State: *state}
			if len(pos) > 0 {
				q.Space = pos[0]
			}
			ps, err := node.AllProposals(ctx, b, q)
			if err != nil {
				return err
			}
			return nodetext.List(e.stdout, e.stderr, *asJSON, ps, "no proposals", nodetext.Proposals)
		}
		m := node.SpaceMessage{Space: pos[0], Action: sub, To: to, CorrelationID: corr, Context: *contextID,
			SendOptions: node.SendOptions{Reliable: !*direct, TTL: *ttl}}
		switch sub {
		case "send":
			m.Kind = pos[1]
			if len(pos) == 3 {
				m.Payload, err = jsonArg("PAYLOAD_JSON", pos[2])
			}
		case "chat":
			m.Text, err = e.readInput("TEXT", pos[1])
		case "propose":
			m.Method = pos[1]
			if len(pos) == 3 {
				m.Params, err = jsonArg("PARAMS_JSON", pos[2])
			}
		case "fulfill", "withdraw":
			m.Proposal = pos[1]
		case "reject":
			m.Proposal = pos[1]
			if len(pos) == 3 {
				m.Reason = pos[2]
			}
		case "respond":
			m.Request = pos[1]
			var v json.RawMessage
			v, err = jsonArg("RESULT_JSON", pos[2])
			if *isError {
				m.Error = v
			} else {
				m.Result = v
			}
		case "grant", "revoke":
			m.Recipient = pos[1]
			m.GrantID = *grantID
			m.Capabilities, err = capsJSON(pos[2:])
		}
		if err != nil {
			return err
		}
		sent, err := b.SpaceSend(ctx, m)
		if err != nil {
			return err
		}
		failed := sent.CopiesError()
		if *asJSON {
			return e.printPartial(sent, true, failed)
		}
		nodetext.SpaceSent(e.stdout, e.stderr, sent)
		return failed
	})
}
