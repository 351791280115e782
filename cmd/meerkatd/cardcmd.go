package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
)

func runCard(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags, homeFlag, asJSON := e.newCmd("card "+sub, "")
	var ed node.CardEdit
	text := func(name, usage string, dst **string) {
		flags.Func(name, usage, func(s string) error { *dst = &s; return nil })
	}
	text("name", "edit: the card's `name`", &ed.Name)
	text("description", "edit: what this node's agent does (`text`)", &ed.Description)
	text("contact", "edit: how to reach its owner (`text`)", &ed.Contact)
	addIntent := flags.String("add-intent", "", "edit: add (or replace) the intent `name`")
	intentDesc := flags.String("intent-description", "", "edit, with --add-intent: what the intent does (`text`)")
	schema := flags.String("schema", "", "edit, with --add-intent: the JSON Schema (an object) of its params: `JSON`, @FILE or -")
	flags.StringVar(&ed.RemoveIntent, "remove-intent", "", "edit: remove the intent `name`")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	switch {
	case sub == "show" && len(pos) <= 1, sub == "fetch" && len(pos) == 1, sub == "edit" && len(pos) == 0:
	case sub == "show" || sub == "fetch" || sub == "edit":
		return fmt.Errorf("%w: wrong number of arguments for card %s (see meerkatd help card)", errUsage, sub)
	default:
		return fmt.Errorf("%w: want card show, fetch or edit (see meerkatd help card)", errUsage)
	}
	if sub == "edit" {
		if *addIntent == "" && (*intentDesc != "" || *schema != "") {
			return fmt.Errorf("%w: --intent-description and --schema go with --add-intent", errUsage)
		}
		if *addIntent != "" {
			ed.AddIntent = &node.CardIntentEdit{Name: *addIntent, Description: *intentDesc}
			if *schema != "" {
				s, err := e.readInput("--schema", *schema)
				if err != nil {
					return err
				}
				if !json.Valid([]byte(s)) {
					return fmt.Errorf("%w: --schema is not valid JSON", errUsage)
				}
				ed.AddIntent.ParamsSchema = json.RawMessage(s)
			}
		}
		if ed == (node.CardEdit{}) {
			return fmt.Errorf("%w: card edit needs something to change (see meerkatd help card)", errUsage)
		}
	}
	mode := node.ModeSend
	if len(pos) == 1 {
		mode = node.ModeReplies // to receive the peer's answer
	}
	h, b, err := e.openBackend(*homeFlag, mode)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), h.Config.Comms.AckTimeout()+30*time.Second)
	defer cancel()
	var v any
	var show func(io.Writer)
	switch {
	case sub == "edit":
		var o node.OwnCard
		o, err = b.CardEdit(ctx, ed)
		v, show = o, func(w io.Writer) { nodetext.OwnCard(w, o) }
	case len(pos) == 0:
		var o node.OwnCard
		o, err = b.Card(ctx)
		v, show = o, func(w io.Writer) { nodetext.OwnCard(w, o) }
	default:
		var pc node.PeerCard
		if sub == "fetch" {
			pc, err = b.FetchCard(ctx, pos[0])
		} else {
			var d node.PeerDescription
			d, err = b.DescribePeer(ctx, pos[0], false)
			pc = d.Card
		}
		v, show = pc, func(w io.Writer) { nodetext.PeerCard(w, pc) }
	}
	if done, err := e.jsonDone(*asJSON, v, err); done {
		return err
	}
	show(e.stdout)
	return nil
}
