package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
)

// runSent shows what became of the envelopes this node sent.
func runSent(e *env, args []string) error {
	flags := e.newFlags("sent")
	homeFlag := e.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
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
	var st []node.SendStatus
	err = e.withBackend(*homeFlag, 30*time.Second, func(ctx context.Context, b *backend) (err error) {
		if len(ids) > 0 {
			st, err = b.MessageStatus(ctx, ids)
		} else {
			st, err = b.SentList(ctx, node.SentQuery{Peer: *peer, Limit: *limit})
		}
		return err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, st)
	}
	if len(st) == 0 {
		fmt.Fprintln(e.stderr, "no sends recorded")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPEER\tKIND\tSTATE\tSENT\tDETAIL")
	for _, s := range st {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, orDash(orKey(s.Peer, s.PubKey)), orDash(s.Kind), s.State, timeText(s.Created), safeLine(sentDetail(s)))
	}
	return tw.Flush()
}

// sentDetail says what a person wants to know next about a send.
func sentDetail(s node.SendStatus) string {
	d := ""
	switch s.State {
	case node.StateAnswered:
		d = s.Answer.Status + " by response " + s.Answer.ResponseID
	case node.StateAcked, node.StateWritten:
		d = "at " + timeText(s.AckedAt)
	case node.StateDead, node.StateFailed:
		d = s.Reason
	case node.StateQueued:
		if s.Attempts > 0 {
			d = fmt.Sprintf("%d failed attempt(s); last: %s", s.Attempts, s.LastError)
		}
	}
	if s.Progress != nil && s.State != node.StateAnswered {
		d += fmt.Sprintf("; %d accepted response(s), last %s", s.Progress.Accepted, s.Progress.ResponseID)
	}
	if s.Intent != "" {
		d = "intent " + s.Intent + "; " + d
	}
	return d
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
