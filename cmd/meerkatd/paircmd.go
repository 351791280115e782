package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// pairFlagFor is the pair subcommands each flag is for.
var pairFlagFor = map[string][]string{"ttl": {"offer"}, "name-for-peer": {"offer"}, "no-wait": {"offer"}, "nats": {"offer"},
	"name": {"accept"}, "local": {"offer", "accept"}}

func runPair(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags, homeFlag, asJSON := e.newCmd("pair "+sub, "")
	local := flags.Bool("local", false, "offer: leave the code for this user's other local nodes; accept NAME: pair with the local node NAME, no code needed")
	ttl := flags.Duration("ttl", pair.DefaultTTL, "offer: how long the code stays valid (`DUR`)")
	nameForPeer := flags.String("name-for-peer", "", "offer: the `name` to give the other node here (default: its own name)")
	noWait := flags.Bool("no-wait", false, "offer, with a daemon: print the line and return; the daemon completes the pairing")
	name := flags.String("name", "", "accept: the `name` to give the other node here (default: its own name)")
	viaNATS := flags.Bool("nats", false, "offer: through the daemon's NATS connection (the line's address is nats:; both nodes then reach each other through NATS)")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch sub {
	case "offer", "accept", "cancel":
	case "":
		return fmt.Errorf("%w: want pair offer, pair accept or pair cancel", errUsage)
	default:
		return fmt.Errorf("%w: unknown pair subcommand %q (want offer, accept or cancel)", errUsage, sub)
	}
	if sub == "offer" && set["name"] {
		return fmt.Errorf("%w: --name is for pair accept; pair offer takes --name-for-peer", errUsage)
	}
	for _, f := range []string{"ttl", "name-for-peer", "no-wait", "nats", "name", "local"} {
		if subs := pairFlagFor[f]; set[f] && !slices.Contains(subs, sub) {
			return fmt.Errorf("%w: --%s is for pair %s", errUsage, f, strings.Join(subs, " and pair "))
		}
	}
	if sub == "offer" && len(pos) > 0 {
		return fmt.Errorf("%w: pair offer takes no arguments", errUsage)
	}
	if sub == "accept" && (len(pos) == 0 || len(pos) == 1 && pos[0] == "-") && !*local {
		// From stdin: the line then shows in no process list or shell
		// history.
		l, err := bufio.NewReader(io.LimitReader(e.stdin, 4096)).ReadString('\n')
		if err != nil && err != io.EOF {
			return err
		}
		if strings.TrimSpace(l) == "" {
			return fmt.Errorf("%w: pair accept wants the line pair offer printed (as arguments, or on stdin)", errUsage)
		}
		pos = strings.Fields(l)
	}
	h, err := e.openHome(*homeFlag, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	report := func(p node.Paired) error {
		if asked := cmp.Or(*name, *nameForPeer); asked != "" && p.Name != asked {
			fmt.Fprintf(e.stderr, "note: trusted as %s, not %s (that name was taken, or the key was trusted already)\n", nodetext.Escape(p.Name, ""), nodetext.Escape(asked, ""))
		}
		if *asJSON {
			return nodetext.PrintJSON(e.stdout, p)
		}
		fmt.Fprintf(e.stdout, "paired: trusting %s (%s) at %s\n", nodetext.Escape(p.Name, ""), p.PubKey, nodetext.Escape(p.Addr, ""))
		return nil
	}
	if sub == "accept" {
		return e.pairAccept(h, pos, *local, *name, report)
	} else if sub == "cancel" {
		return e.pairCancel(h, strings.Join(pos, " "), *asJSON)
	}

	// offer
	if *local && !set["ttl"] {
		*ttl = node.LocalOfferTTL // the other node picks it up at once
	}
	if *local && *noWait {
		return fmt.Errorf("%w: --local waits for the other node; drop --no-wait", errUsage)
	}
	mode := node.ModeReplies
	b, err := e.backendFor(h, mode)
	if err != nil {
		return err
	}
	defer b.Close()
	if *noWait && !b.Daemon {
		return &node.Error{Code: node.CodeNoDaemon, Msg: "--no-wait needs a running daemon to complete the pairing (start it with: meerkatd run --home " + h.Dir + ")"}
	}
	octx, ocancel := context.WithTimeout(context.Background(), 10*time.Second)
	info, err := b.PairOffer(octx, node.PairOptions{TTL: *ttl, NameForPeer: *nameForPeer, NATS: *viaNATS})
	ocancel()
	if err != nil {
		return err
	}
	// Ctrl-C withdraws the offer: caught before the line is printed, so
	// an interrupt right after it is never the default (a killed
	// process).
	ctx, stop := interruptible()
	defer stop()
	if *local {
		remove, err := node.ShareOfferLocally(context.Background(), e.getenv("XDG_RUNTIME_DIR"), h, b, info)
		if err != nil {
			return err
		}
		defer remove()
	}
	if *asJSON {
		// The offer first, then (once used) what was added: two JSON
		// documents, each complete.
		if err := nodetext.PrintJSON(e.stdout, info); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(e.stdout, info.Line)
	}
	until := info.Expires.Local().Format(time.TimeOnly)
	if *noWait {
		fmt.Fprintf(e.stderr, "pass this line to the other node (meerkatd pair accept LINE); it works once, until %s\n", until)
		return nil
	}
	fmt.Fprintf(e.stderr, "pass this line to the other node (meerkatd pair accept LINE); waiting until %s\n", until)
	p, err := node.AwaitPairing(ctx, b, info)
	if err != nil {
		return err
	}
	return report(p)
}

// pairAccept is pair accept: with the line given, or with --local the
// offer a node of this user left in the discovery directory.
func (e *env) pairAccept(h *node.Home, pos []string, local bool, name string, report func(node.Paired) error) error {
	line := strings.Join(pos, " ")
	if local {
		if len(pos) != 1 {
			return fmt.Errorf("%w: pair accept --local wants the other node's name", errUsage)
		}
		dir, err := e.runtimeDir()
		if err != nil {
			return err
		}
		// The peer's name comes from the exchange, as for a line: made
		// usable and told apart from the names trusted already.
		if line, err = node.AcceptLocalLine(dir, h, pos[0]); err != nil {
			return err
		}
	}
	if _, err := pair.ParseLine(line); err != nil {
		return fmt.Errorf("%w: %v", errUsage, strings.TrimPrefix(err.Error(), "pair: "))
	}
	b, err := e.backendFor(h, node.ModeSend)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), pair.ExchangeTimeout+5*time.Second)
	defer cancel()
	p, err := b.PairAccept(ctx, line, name)
	if err != nil {
		return err
	}
	return report(p)
}

// pairCancel is pair cancel: it withdraws the running daemon's open offer
// named by which (its line, or its id in --json), or every open offer.
func (e *env) pairCancel(h *node.Home, which string, asJSON bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, h.ControlPath())
	if errors.Is(err, control.ErrNoDaemon) {
		return &node.Error{Code: node.CodeNoDaemon, Msg: "no daemon is running for " + h.Dir + ": an offer made without one ended with the command that made it"}
	} else if err != nil {
		return err
	}
	n, err := c.PairCancel(ctx, which)
	if err != nil {
		return err
	} else if asJSON {
		return nodetext.PrintJSON(e.stdout, map[string]int{"withdrawn": n})
	}
	_, err = fmt.Fprintf(e.stdout, "withdrew %d %s\n", n, map[bool]string{true: "offer", false: "offers"}[n == 1])
	return err
}
