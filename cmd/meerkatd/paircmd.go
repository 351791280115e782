package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/trust/pair"
)

func runPair(e *env, args []string) error {
	sub, args := splitSub(args)
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
	case "offer":
		if len(pos) > 0 {
			return fmt.Errorf("%w: pair offer takes no arguments", errUsage)
		}
		if set["name"] {
			return fmt.Errorf("%w: --name is for pair accept; pair offer takes --name-for-peer", errUsage)
		}
	case "accept":
		for _, f := range []string{"ttl", "name-for-peer", "no-wait", "nats"} {
			if set[f] {
				return fmt.Errorf("%w: --%s is for pair offer", errUsage, f)
			}
		}
	case "":
		return fmt.Errorf("%w: want pair offer or pair accept", errUsage)
	default:
		return fmt.Errorf("%w: unknown pair subcommand %q (want offer or accept)", errUsage, sub)
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
		dir, err := e.runtimeDir()
		if err == nil {
			var remove func()
			if remove, err = node.WriteLocalOffer(dir, h, info.Line, info.Expires); err == nil {
				defer remove()
			}
		}
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			b.PairCancel(cctx, info.ID)
			cancel()
			return err
		}
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
		var theirs string
		if line, theirs, err = node.AcceptLocalLine(dir, h, pos[0]); err != nil {
			return err
		}
		name = cmp.Or(name, theirs)
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
