package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// tellHelp is more about tell than its usage line says.
const tellHelp = `The note becomes a "user" item in this node's inbox: the agent reading
the inbox (meerkatd inbox, MCP receive_messages) gets it before anything
a peer sent, and only system notices of the node itself come first.
Notes come only from this command: no peer and no MCP tool can make
one. It needs the running daemon, which keeps the inbox.`

func runTell(e *env, args []string) error {
	flags := e.newFlags("tell")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON: the note's id and the pending count")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want BODY (one argument; - for standard input, @FILE for a file), got %d argument(s)", errUsage, len(pos))
	}
	body, err := e.readInput("the body", pos[0])
	if err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	b, err := e.backendFor(h, node.ModeSend)
	if err != nil {
		return err
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	told, err := b.Tell(ctx, body)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, told)
	}
	fmt.Fprintln(e.stdout, told.ID)
	return nil
}
