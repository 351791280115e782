package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// lifecycleHelp is the help of the requests and cancel commands.
const lifecycleHelp = `The running node follows every request it sends: open until a final
response (completed or failed) arrives; an accepted response is progress
and leaves it open. A request sent with --deadline that has no final
response by then becomes timed_out, and the node tells the peer with a
meerkat.cancel request. meerkatd cancel ID withdraws an open request the
same way. A final response arriving after that is still delivered to
the inbox (its id shows here), but the state stays.`

func runRequests(e *env, args []string) error {
	flags := e.newFlags("requests")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
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
	var rs []node.SentRequest
	if err := e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *backend) (err error) { rs, err = b.Requests(ctx, q); return err }); err != nil {
		return err
	}
	if *asJSON {
		if rs == nil {
			rs = []node.SentRequest{}
		}
		return printJSON(e.stdout, rs)
	}
	if len(rs) == 0 {
		fmt.Fprintln(e.stderr, "no requests")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPEER\tINTENT\tSENT\tDEADLINE\tSTATE\tRESPONSE")
	for _, r := range rs {
		resp := "-"
		if r.ResponseID != "" {
			resp = r.FinalStatus + " " + r.ResponseID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, orKey(r.Peer, r.PubKey), safeLine(r.Intent), timeText(&r.Sent), timeText(r.Deadline), r.State, resp)
	}
	return tw.Flush()
}

func runCancel(e *env, args []string) error {
	flags := e.newFlags("cancel")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
	reason := flags.String("reason", "", fmt.Sprintf("a short note for the peer (at most %d bytes)", node.MaxCancelNote))
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one request ID, got %d argument(s)", errUsage, len(pos))
	}
	var c node.Cancelled
	err = e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *backend) (err error) {
		c, err = b.CancelRequest(ctx, pos[0], *reason)
		return err
	})
	if err != nil && c.Request.ID == "" {
		if *asJSON {
			printJSONError(e.stdout, err)
			return jsonShown(err)
		}
		return err
	}
	if *asJSON {
		if perr := printJSON(e.stdout, c); perr != nil {
			return perr
		}
		return jsonShown(err)
	}
	fmt.Fprintf(e.stdout, "%s cancelled; %s told (cancel %s, %s)\n", c.Request.ID, orKey(c.Request.Peer, c.Request.PubKey), c.Cancel.ID, c.Cancel.Delivery)
	return err
}

// printLifecycle adds a held request's deadline and cancellation to the
// inbox listing.
func printLifecycle(w io.Writer, m node.Message) {
	if m.Deadline != nil {
		fmt.Fprintf(w, "  deadline %s\n", timeText(m.Deadline))
	}
	if c := m.Cancelled; c != nil {
		note := ""
		if c.Note != "" {
			note = ": " + safeText(c.Note, "  ")
		}
		fmt.Fprintf(w, "  cancelled by the sender (%s) at %s%s\n", safeText(c.Reason, ""), timeText(&c.At), note)
	}
}
