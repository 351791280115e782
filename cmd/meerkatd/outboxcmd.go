package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/audit"
	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
)

func runOutbox(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags, homeFlag, asJSON := e.newCmd("outbox", "")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	switch {
	case sub == "retry" && len(pos) <= 1:
		peer := strings.Join(pos, "") // "" (every peer) or the one given
		n, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (int, error) { return b.RetryOutbox(ctx, peer) })
		if done, err := e.jsonDone(*asJSON, map[string]int{"due": n}, err); done {
			return err
		}
		fmt.Fprintf(e.stdout, "%d queued send(s) due now\n", n)
		return nil
	case sub == "retry":
		return fmt.Errorf("%w: outbox retry takes at most one PEER", errUsage)
	case sub == "drop":
		d, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (node.Dropped, error) { return b.DropQueued(ctx, pos) })
		if err != nil {
			return err // nothing printed but the error
		} else if *asJSON {
			return e.printPartial(d, true, d.Err())
		}
		return nodetext.Dropped(e.stdout, e.stderr, d)
	case sub != "" && sub != "list":
		return fmt.Errorf("%w: unknown outbox subcommand %q (want list, retry or drop)", errUsage, sub)
	case len(pos) > 0:
		return fmt.Errorf("%w: outbox list takes no arguments", errUsage)
	}
	info, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (node.Outbox, error) { return b.Outbox(ctx) })
	if done, err := e.jsonDone(*asJSON, info, err); done {
		return err
	}
	if len(info.Peers) > 0 {
		nodetext.OutboxPeers(e.stdout, info.Peers)
		if len(info.Entries) > 0 {
			fmt.Fprintln(e.stdout)
		}
	}
	return nodetext.List(e.stdout, e.stderr, false, info.Entries, "outbox empty", nodetext.Queued)
}

func runDeadLetters(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	if sub == "" {
		sub = "list"
	}
	flags, homeFlag, asJSON := e.newCmd("deadletters", "")
	all := flags.Bool("all", false, "with retry or drop: every dead letter")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(pos) > 0 || *all {
			return fmt.Errorf("%w: deadletters list takes no ids or --all", errUsage)
		}
	case "retry", "drop":
		if *all == (len(pos) > 0) {
			return fmt.Errorf("%w: deadletters %s wants ID... or --all", errUsage, sub)
		}
	default:
		return fmt.Errorf("%w: unknown deadletters subcommand %q (want list, retry or drop)", errUsage, sub)
	}
	var n int
	var dl []node.DeadLetter
	var missed error // of a retry or drop that did some: printed with its count
	err = e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *control.Backend) (err error) {
		switch sub {
		case "retry":
			n, missed = b.RetryDeadLetters(ctx, pos, *all)
		case "drop":
			n, missed = b.DropDeadLetters(ctx, pos, *all)
		default:
			dl, err = b.DeadLetters(ctx)
		}
		return err
	})
	if err != nil || missed != nil && n == 0 {
		return cmp.Or(err, missed)
	}
	switch sub {
	case "retry", "drop":
		verb := map[string]string{"retry": "requeued", "drop": "dropped"}[sub]
		if want := node.DistinctIDs(pos); missed == nil && n < want {
			missed = &node.Error{Code: node.CodeBadArgument, Msg: fmt.Sprintf("%d of the %d ids given are not dead letters (see meerkatd deadletters)", want-n, want)}
		}
		if *asJSON {
			return e.printPartial(map[string]int{verb: n}, true, missed)
		}
		if n > 0 || missed == nil { // "0 requeued" and an error say nothing the error does not
			fmt.Fprintf(e.stdout, "%s %d dead letter(s)\n", verb, n)
		}
		return missed
	}
	return nodetext.List(e.stdout, e.stderr, *asJSON, dl, "no dead letters", nodetext.DeadLetters)
}

func runAudit(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("audit", "print JSON lines")
	since := flags.String("since", "", "only rows from `WHEN` on: a duration back from now (1h, 30m) or an RFC 3339 time")
	peer := flags.String("peer", "", "only rows about this peer (`name`, key or peer UUID)")
	event := flags.String("event", "", "only rows of this `event` (sent, received, acked, refused, retry, expired, dead_letter, …)")
	id := flags.String("id", "", "only rows about this envelope `id` (its acks and responses too)")
	limit := flags.Int("limit", 1000, "show the newest `N` matching rows (0: all)")
	follow := flags.Bool("follow", false, "then print rows as they are written, across rotations, until interrupted")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, false, node.OpenOptions{})
	if err != nil {
		return err
	}
	f, err := node.AuditFilter(h, *peer, *event, *id)
	if err != nil {
		return err
	}
	if *since != "" {
		if f.Since, err = node.ParseSince(*since, time.Now()); err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
	}
	if *limit < 0 {
		return fmt.Errorf("%w: --limit must not be negative", errUsage)
	}
	if *follow {
		if !h.Config.Audit.Enabled {
			return &node.Error{Code: node.CodeBadArgument, Msg: "no audit log: [audit] enabled is false for this home"}
		}
		return e.followAudit(filepath.Join(h.Dir, audit.FileName), audit.FollowOptions{Filter: f, Limit: *limit}, *asJSON)
	}
	recs, st, err := audit.Read(filepath.Join(h.Dir, audit.FileName), f, *limit)
	if errors.Is(err, fs.ErrNotExist) {
		if !h.Config.Audit.Enabled {
			return &node.Error{Code: node.CodeBadArgument, Msg: "no audit log: [audit] enabled is false for this home"}
		}
		fmt.Fprintln(e.stderr, "no audit log yet (the daemon writes audit.log in the home)")
		return nil
	}
	if err != nil {
		return err
	}
	if n := st.Skipped(); n > 0 {
		fmt.Fprintf(e.stderr, "skipped %d unreadable line(s)\n", n)
	}
	if *asJSON {
		return audit.FormatJSON(e.stdout, recs)
	}
	if len(recs) == 0 {
		fmt.Fprintln(e.stderr, "no matching rows")
		return nil
	}
	return audit.Format(e.stdout, recs)
}

// followAudit prints the audit rows there and those written afterwards,
// until SIGINT or SIGTERM.
func (e *env) followAudit(path string, opts audit.FollowOptions, asJSON bool) error {
	ctx, stop := interruptible()
	defer stop()
	first := true
	return audit.Follow(ctx, path, opts, func(recs []audit.Record, st audit.ReadStats) error {
		if first && st.Skipped() > 0 {
			fmt.Fprintf(e.stderr, "skipped %d unreadable line(s)\n", st.Skipped())
		}
		defer func() { first = false }()
		if asJSON {
			return audit.FormatJSON(e.stdout, recs)
		}
		return audit.FormatFollow(e.stdout, recs, first)
	})
}
