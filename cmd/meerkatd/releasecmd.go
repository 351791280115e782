package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// releaseHelp is more about release than its usage line says.
const releaseHelp = `The loop guard holds sends to a peer once this node's agent has
answered it agent.loop_fast_ms after receiving from it, too many times in
a row (agent.loop_max_exchanges) with no person in between: the sends
fail with loop_guard until agent.loop_hold_secs pass. release PEER lifts
the hold now and starts the peer's count again; without PEER, release
lists the peers the guard counts or holds. It needs the running daemon
(the guard lives in it). The MCP server offers no release: an agent does
not let itself out of a loop it is in.`

// runRelease lists the loop guard's peers, or releases one.
func runRelease(e *env, args []string) error {
	flags := e.newFlags("release")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: release takes at most one PEER", errUsage)
	}
	var before, after []node.LoopGuardState
	err = e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *backend) (err error) {
		if before, err = b.LoopGuards(ctx); err != nil || len(pos) == 0 {
			return err
		}
		if err = b.ReleaseLoopGuard(ctx, pos[0]); err != nil {
			return err
		}
		after, err = b.LoopGuards(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		if *asJSON {
			return printJSON(e.stdout, before)
		}
		if len(before) == 0 {
			fmt.Fprintln(e.stderr, "the loop guard counts no fast replies and holds no peer")
			return nil
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PEER\tFAST REPLIES\tSINCE\tHELD UNTIL")
		for _, g := range before {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", orKey(g.Peer, g.PubKey), g.Exchanges, timeText(g.Since), timeText(g.HeldUntil))
		}
		return tw.Flush()
	}
	// The peer released is the one whose state it dropped (PEER may be a
	// name, key or UUID).
	var was *node.LoopGuardState
	for i, g := range before {
		if !slices.ContainsFunc(after, func(a node.LoopGuardState) bool { return a.PubKey == g.PubKey }) {
			was = &before[i]
		}
	}
	if *asJSON {
		return printJSON(e.stdout, map[string]any{"peer": pos[0], "released": was != nil && was.Held})
	}
	if was != nil && was.Held {
		fmt.Fprintf(e.stdout, "released %s: sends to it go again (it was held until %s); its count starts again\n", safeLine(pos[0]), timeText(was.HeldUntil))
	} else {
		fmt.Fprintf(e.stdout, "%s was not held; its count starts again\n", safeLine(pos[0]))
	}
	return nil
}
