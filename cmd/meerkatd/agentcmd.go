// The commands of the agent's inbox beyond listing it: a person's notes
// (tell), search, what became of sends (sent), the requests this node
// sent (requests, cancel) and the loop guard (release).

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
)

func runTell(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("tell", "print JSON: the note's id and the pending count")
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
	told, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (node.Told, error) { return b.Tell(ctx, body) })
	if done, err := e.jsonDone(*asJSON, told, err); done {
		return err
	}
	fmt.Fprintln(e.stdout, told.ID)
	return nil
}

func runSearch(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("search", "print JSON: the same result as MCP's search_messages")
	var q node.SearchQuery
	flags.StringVar(&q.Peer, "peer", "", "only items from this `peer` (name, key or UUID)")
	flags.Var((*stringList)(&q.Kinds), "kind", "only items of this `kind` (message, request, response, meup; repeatable)")
	since := flags.String("since", "", "only items received from `WHEN` on: a duration back from now (1h, 30m) or an RFC 3339 time")
	until := flags.String("until", "", "only items received up to `WHEN`: a duration back from now or an RFC 3339 time")
	flags.IntVar(&q.Limit, "limit", node.DefaultSearchLimit, fmt.Sprintf("hits per page, `N` up to %d (0: the default)", node.MaxSearchLimit))
	flags.StringVar(&q.Cursor, "cursor", "", "the `cursor` a previous page printed: its next page")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: want QUERY", errUsage)
	}
	q.Query = strings.Join(pos, " ")
	now := time.Now()
	for _, f := range []struct {
		name, val string
		dst       *time.Time
	}{{"since", *since, &q.Since}, {"until", *until, &q.Until}} {
		if f.val != "" {
			if *f.dst, err = node.ParseSince(f.val, now); err != nil {
				return fmt.Errorf("%w: --%s: %v", errUsage, f.name, err)
			}
		}
	}
	r, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (node.SearchResult, error) { return b.Search(ctx, q) })
	if done, err := e.jsonDone(*asJSON, r, err); done {
		return err
	}
	nodetext.SearchHits(e.stdout, r.Hits)
	switch {
	case len(r.Hits) == 0:
		fmt.Fprintln(e.stderr, "no matches")
	case r.More:
		fmt.Fprintf(e.stderr, "more: add --cursor %s for the next page\n", r.Cursor)
	}
	if !r.History {
		fmt.Fprintln(e.stderr, "(the inbox is kept in memory: only unacknowledged items were searched)")
	}
	return nil
}

// runSent shows what became of the envelopes this node sent.
func runSent(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("sent", "")
	peer := flags.String("peer", "", "only sends to this `PEER` (name, key or peer UUID)")
	limit := flags.Int("limit", 0, fmt.Sprintf("at most `N` records, newest first (default %d, at most %d)", node.DefaultSentList, node.MaxSentList))
	ids, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(ids) > 0 && (*peer != "" || *limit != 0) {
		return fmt.Errorf("%w: --peer and --limit list the newest sends; with IDs give neither", errUsage)
	}
	if len(ids) > node.MaxStatusIDs {
		return fmt.Errorf("%w: at most %d IDs at a time", errUsage, node.MaxStatusIDs)
	}
	st, err := call(e, *homeFlag, func(ctx context.Context, b node.API) ([]node.SendStatus, error) {
		if len(ids) > 0 {
			return b.MessageStatus(ctx, ids)
		}
		return b.SentList(ctx, node.SentQuery{Peer: *peer, Limit: *limit})
	})
	if err != nil {
		return err
	}
	return nodetext.List(e.stdout, e.stderr, *asJSON, st, "no sends recorded", nodetext.Sent)
}

func runRequests(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("requests", "")
	state := flags.String("state", "", "only requests in these `STATES` (comma-separated: open, answered, timed_out, cancelled)")
	peer := flags.String("peer", "", "only requests to this `PEER`")
	limit := flags.Int("limit", 0, "at most `N` requests (default 100)")
	if err := parseNoArgs(e, flags, args); err != nil {
		return err
	}
	q := node.RequestQuery{Peer: *peer, Limit: *limit}
	if *state != "" {
		q.States = strings.Split(*state, ",")
	}
	if err := node.CheckRequestStates(q.States); err != nil {
		return err // before looking for the daemon
	}
	rs, err := call(e, *homeFlag, func(ctx context.Context, b node.API) ([]node.SentRequest, error) { return b.Requests(ctx, q) })
	if err != nil {
		return err
	}
	return nodetext.List(e.stdout, e.stderr, *asJSON, rs, "no requests", nodetext.Requests)
}

func runCancel(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("cancel", "")
	reason := flags.String("reason", "", fmt.Sprintf("a short note for the peer (at most %d bytes)", node.MaxCancelNote))
	idemKey := flags.String("idempotency-key", "", "make a retry safe: a cancel with a `KEY` used before prints the first one's result and does nothing")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one request ID, got %d argument(s)", errUsage, len(pos))
	}
	c, err := call(e, *homeFlag, func(ctx context.Context, b node.API) (node.Cancelled, error) {
		return b.CancelRequest(ctx, pos[0], *reason, node.SendOptions{IdempotencyKey: *idemKey})
	})
	if *asJSON {
		return e.printPartial(c, err == nil || c.Request.ID != "", err)
	}
	if err != nil && c.Request.ID == "" {
		return err
	}
	e.noteReplayed(c.Replayed, "cancel")
	nodetext.Cancelled(e.stdout, c)
	return err
}

// runRelease lists the loop guard's peers, or releases one.
func runRelease(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("release", "")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: release takes at most one PEER", errUsage)
	}
	var before, after []node.LoopGuardState
	err = e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *control.Backend) (err error) {
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
		return nodetext.List(e.stdout, e.stderr, *asJSON, before, "the loop guard counts no fast replies and holds no peer", nodetext.LoopGuards)
	}
	return nodetext.Released(e.stdout, *asJSON, pos[0], before, after)
}
