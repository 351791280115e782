package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// searchHelp is more about search than its usage line says.
const searchHelp = `QUERY is words that must all occur (case-insensitive), "quoted phrases"
whose words come in a row, and prefix* words; punctuation only separates
words. Several arguments are one query. It searches bodies, request
intents and params, response statuses and results, envelopes of spaces
and the sender's name, in the unacknowledged items and the acknowledged
history (a node keeping its inbox in memory has no history). Hits come
newest first, a page at a time: --cursor with the cursor printed gets the
next page. With no daemon running, the home's database is read (read
only). Text from peers is shown with control characters escaped.`

func runSearch(e *env, args []string) error {
	flags := e.newFlags("search")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON: the same result as MCP's search_messages")
	var q node.SearchQuery
	flags.StringVar(&q.Peer, "peer", "", "only items from this `peer` (name, key or UUID)")
	kind := flags.String("kind", "", "only items of this `kind` (message, request, response, meup)")
	since := flags.String("since", "", "only items received from `WHEN` on: a duration back from now (1h, 30m) or an RFC 3339 time")
	until := flags.String("until", "", "only items received up to `WHEN`: a duration back from now or an RFC 3339 time")
	flags.IntVar(&q.Limit, "limit", node.DefaultSearchLimit, fmt.Sprintf("hits per page, `N` from 1 to %d", node.MaxSearchLimit))
	flags.StringVar(&q.Cursor, "cursor", "", "the `cursor` a previous page printed: its next page")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: want QUERY", errUsage)
	}
	q.Query = strings.Join(pos, " ")
	if *kind != "" {
		q.Kinds = []string{*kind}
	}
	now := time.Now()
	for _, f := range []struct {
		name, val string
		dst       *time.Time
	}{{"since", *since, &q.Since}, {"until", *until, &q.Until}} {
		if f.val != "" {
			if *f.dst, err = parseSince(f.val, now); err != nil {
				return fmt.Errorf("%w: --%s: %v", errUsage, f.name, err)
			}
		}
	}
	var r node.SearchResult
	err = e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *backend) (err error) {
		r, err = b.Search(ctx, q)
		return err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, r)
	}
	for _, h := range r.Hits {
		m := h.Message
		state := ""
		if h.Acked {
			state = " (acknowledged)"
		}
		fmt.Fprintf(e.stdout, "#%d %s %s from %s id %s%s\n  %s\n", m.Seq, m.Received.Local().Format(time.RFC3339),
			safeText(m.Kind, ""), safeText(m.Peer, ""), m.ID, state, safeText(h.Snippet, "  "))
	}
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
