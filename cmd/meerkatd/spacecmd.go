package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

const spaceUsage = "meerkatd space list | show SPACE | create SPACE --as ID [--delivery all|addressed] [--cap CAP]... | delete SPACE\n" +
	"       | add SPACE PEER ID [--cap CAP]... | remove SPACE MEMBER\n" +
	"       | send SPACE KIND [PAYLOAD_JSON] | chat SPACE TEXT | propose SPACE METHOD [PARAMS_JSON]\n" +
	"       | fulfill SPACE PROPOSAL_ID | respond SPACE REQUEST_ID RESULT_JSON [--error] | reject SPACE PROPOSAL_ID [REASON]\n" +
	"       | withdraw SPACE PROPOSAL_ID | grant SPACE PARTICIPANT CAP... | revoke SPACE PARTICIPANT (--grant-id ID | CAP...)\n" +
	"       | proposals [SPACE] [--state STATE]\n" +
	"       [--to ID]... [--correlation-id ID]... [--context C] [--direct] [--ttl DUR] [--home DIR] [--json]\n" +
	"       CAP is a kind pattern (chat, mcp/*) or a capability object ('{\"kind\":\"mcp/request\",\"payload\":{…}}');\n" +
	"       TEXT and the JSON arguments may be - (standard input) or @FILE"

// spaceArity is each space subcommand's positional arguments: at least,
// at most (-1: any number).
var spaceArity = map[string][2]int{
	"list": {0, 0}, "show": {1, 1}, "create": {1, 1}, "delete": {1, 1}, "add": {3, 3}, "remove": {2, 2},
	"send": {2, 3}, "chat": {2, 2}, "propose": {2, 3}, "fulfill": {2, 2}, "respond": {3, 3}, "reject": {2, 3},
	"withdraw": {2, 2}, "grant": {3, -1}, "revoke": {2, -1}, "proposals": {0, 1},
}

func runSpace(e *env, args []string) error {
	sub, args := splitSub(args)
	if sub == "" {
		sub = "list"
	}
	flags := e.newFlags("space " + sub)
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
	as := flags.String("as", "", "create: this node's participant `id` in the space")
	delivery := flags.String("delivery", "", "create: `all` members receive every envelope (default), or only the addressed ones")
	var caps, to, corr stringList
	flags.Var(&caps, "cap", "create, add: a capability: a kind pattern (chat, mcp/*), a JSON object or a JSON array of them (repeatable)")
	flags.Var(&to, "to", "send, chat, propose, fulfill, respond, reject, withdraw, grant, revoke: a participant `id` addressed (repeatable; default: everybody, or whom the answer concerns)")
	flags.Var(&corr, "correlation-id", "send, chat, propose: a MEUP `id` this envelope refers to (repeatable)")
	contextID := flags.String("context", "", "send, chat, propose: the sub-thread `id`")
	isError := flags.Bool("error", false, "respond: the JSON is an error, not a result")
	grantID := flags.String("grant-id", "", "revoke: the `id` of the grant to revoke")
	state := flags.String("state", "", "proposals: only `state` (pending, fulfilled, rejected, withdrawn, expired)")
	direct := flags.Bool("direct", false, "one attempt per member instead of a reliable send through the outbox")
	ttl := flags.Duration("ttl", 0, "reliable: give up on a copy not acked within this `long` (default outbox.default_ttl_secs)")
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
	if *ttl < 0 || *direct && *ttl > 0 {
		return fmt.Errorf("%w: --ttl must be positive and applies to reliable sends (not --direct)", errUsage)
	}
	capsJSON := func(list []string) (json.RawMessage, error) {
		if len(list) == 0 {
			return nil, nil
		}
		parts := make([]string, 0, len(list))
		for _, c := range list {
			c = strings.TrimSpace(c)
			switch {
			case strings.HasPrefix(c, "{"):
			case strings.HasPrefix(c, "["):
				var items []json.RawMessage
				err := json.Unmarshal([]byte(c), &items)
				for _, it := range items {
					if !bytes.HasPrefix(bytes.TrimSpace(it), []byte("{")) {
						err = errUsage
					}
					parts = append(parts, string(it))
				}
				if err != nil {
					return nil, fmt.Errorf("%w: capability %s is not a JSON array of capability objects", errUsage, c)
				}
				continue
			default:
				b, _ := json.Marshal(map[string]string{"kind": c})
				c = string(b)
			}
			parts = append(parts, c)
		}
		return json.RawMessage("[" + strings.Join(parts, ",") + "]"), nil
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
			return printJSON(e.stdout, v)
		}
		text(e.stdout)
		return nil
	}
	return e.withBackend(*homeFlag, node.MaxWait+30*time.Second, func(ctx context.Context, b *backend) error {
		switch sub {
		case "list", "show":
			sp, err := b.Spaces(ctx)
			if err != nil {
				return err
			}
			if sub == "show" {
				for _, s := range sp {
					if strings.EqualFold(s.Name, pos[0]) {
						return output(s, func(w io.Writer) { printSpace(w, s) })
					}
				}
				return &node.Error{Code: node.CodeUnknownSpace, Msg: fmt.Sprintf("no space %q here (meerkatd space list shows them)", pos[0])}
			}
			if sp == nil {
				sp = []node.SpaceInfo{}
			}
			return output(sp, func(w io.Writer) {
				if len(sp) == 0 {
					fmt.Fprintln(e.stderr, "no spaces (create one with meerkatd space create NAME --as ID)")
				}
				for i, s := range sp {
					if i > 0 {
						fmt.Fprintln(w)
					}
					printSpace(w, s)
				}
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
					fmt.Fprintf(w, "space %s deleted here\n", safeText(pos[0], ""))
					return
				}
				printSpace(w, info)
			})
		case "proposals":
			q := node.ProposalQuery{State: *state}
			if len(pos) > 0 {
				q.Space = pos[0]
			}
			ps, err := b.Proposals(ctx, q)
			if err != nil {
				return err
			}
			if ps == nil {
				ps = []node.Proposal{}
			}
			return output(ps, func(w io.Writer) { printProposals(e, w, ps) })
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
		return output(sent, func(w io.Writer) {
			fmt.Fprintf(w, "sent %s %s to space %s\n", safeText(sent.Kind, ""), safeText(sent.ID, ""), safeText(sent.Space, ""))
			for _, c := range sent.Copies {
				how := c.Delivery
				if c.Skipped != "" {
					how = "skipped: " + c.Skipped
				} else if c.LastError != "" {
					how += " (" + c.LastError + ")"
				}
				fmt.Fprintf(w, "  %s: %s\n", safeText(c.Participant, ""), safeLine(how))
			}
			if len(sent.Copies) == 0 {
				fmt.Fprintln(e.stderr, "no other active member in the space: nothing was sent")
			}
			if sent.NotApplied != "" {
				fmt.Fprintf(e.stderr, "warning: it breaks a rule of the space (%s): the members' nodes will refuse it\n", safeLine(sent.NotApplied))
			}
		})
	})
}

func printSpace(w io.Writer, s node.SpaceInfo) {
	fmt.Fprintf(w, "space %s (you are %s, delivery %s, %d pending proposals)\n", safeText(s.Name, ""), safeText(s.Self, ""), s.Delivery, s.Pending)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSTATUS\tPRESENCE\tCAPABILITIES\tKEY")
	for _, m := range s.Members {
		caps, _ := json.Marshal(m.Capabilities)
		if len(m.Granted) > 0 {
			g, _ := json.Marshal(m.Granted)
			caps = append(caps, []byte(" + granted "+string(g))...)
		}
		id := m.ID
		if m.Self {
			id += " (you)"
		}
		status := m.Status
		if m.Note != "" {
			status += ": " + m.Note
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", safeText(id, ""), safeLine(status), m.Presence, safeLine(string(caps)), m.Key)
	}
	tw.Flush()
}

func printProposals(e *env, w io.Writer, ps []node.Proposal) {
	if len(ps) == 0 {
		fmt.Fprintln(e.stderr, "no proposals")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SPACE\tID\tPROPOSER\tSTATE\tBY\tCALL")
	for _, p := range ps {
		state := p.State
		if p.Reason != "" {
			state += " (" + p.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", safeText(p.Space, ""), safeText(p.ID, ""), safeText(p.Proposer, ""), safeLine(state), safeText(p.By, ""), safeLine(string(p.Payload)))
	}
	tw.Flush()
}

// printMEUPItem shows an envelope of a space in the inbox listing.
func printMEUPItem(w io.Writer, it *node.MEUPItem) {
	if it == nil {
		return
	}
	fmt.Fprintf(w, "  space %s: %s from %s (meup id %s)", safeText(it.Space, ""), safeText(it.Kind, ""), safeText(it.Participant, ""), safeText(it.ID, ""))
	if len(it.To) > 0 {
		fmt.Fprintf(w, " to %s", safeText(strings.Join(it.To, ", "), ""))
	}
	if it.Context != "" {
		fmt.Fprintf(w, " context %s", safeText(it.Context, ""))
	}
	fmt.Fprintln(w)
	if raw, ok := it.Envelope.(json.RawMessage); ok {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(raw, &env) == nil && len(env.Payload) > 0 {
			fmt.Fprintf(w, "  %s\n", safeText(string(env.Payload), "  "))
		}
	}
}
