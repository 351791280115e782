package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
)

func runSend(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	flags, homeFlag, asJSON := e.newCmd("send "+sub, "")
	wait := flags.Duration("wait", 0, "with request: wait up to `DUR` (30s, 2m) for the final response and print it")
	reliable := flags.Bool("reliable", false, "store it in the outbox first and retry until the peer acks it (see meerkatd outbox)")
	ttl := flags.Duration("ttl", 0, "with --reliable: move it to the dead letters if not acked within `DUR` (default outbox.default_ttl_secs)")
	noWait := flags.Bool("no-wait", false, "with --reliable: return once it is stored, without waiting for the first attempt")
	interrupt := flags.Bool("interrupt", false, "with message or request: an interrupt (handling_mode \"steer\"): the peer's agent reads it before its queued items")
	idemKey := flags.String("idempotency-key", "", "make a retry safe: a send with a `KEY` used before returns the first send's result without sending")
	task := flags.String("task", "", "send under task `ID` (see meerkatd help task)")
	deadline := flags.String("deadline", "", "with request: time it out if no final response comes within `DUR` (30s) or by an RFC 3339 time; needs the daemon")
	bodyFile := flags.String("body-file", "", "read the body (message), params (request) or result (response) from `FILE` (- for standard input)")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	// The last argument is the content; --body-file supplies it instead.
	min, max := 0, 0
	switch sub {
	case "message":
		min, max = 2, 2
		err = wantContent(pos, *bodyFile, min, max, "PEER BODY")
	case "request":
		min, max = 2, 3
		err = wantContent(pos, *bodyFile, min, max, "PEER INTENT [PARAMS_JSON]")
	case "response":
		min, max = 3, 4
		err = wantContent(pos, *bodyFile, min, max, "PEER REQUEST_ID STATUS [RESULT_JSON]")
	case "":
		err = fmt.Errorf("%w: want message, request or response", errUsage)
	default:
		err = fmt.Errorf("%w: unknown send kind %q (want message, request or response)", errUsage, sub)
	}
	if err != nil {
		return err
	}
	if !*reliable && (*ttl != 0 || *noWait) {
		return fmt.Errorf("%w: --ttl and --no-wait apply to --reliable sends", errUsage)
	}
	if *interrupt && sub == "response" {
		return fmt.Errorf("%w: --interrupt applies to messages and requests", errUsage)
	}
	if *ttl < 0 {
		return fmt.Errorf("%w: --ttl must be positive", errUsage)
	}
	waitGiven := false // --wait 0s too
	flags.Visit(func(f *flag.Flag) { waitGiven = waitGiven || f.Name == "wait" })
	if waitGiven && (*wait <= 0 || sub != "request") {
		return fmt.Errorf("%w: --wait applies to requests only and must be positive", errUsage)
	}
	var dl time.Time
	if *deadline != "" {
		if sub != "request" {
			return fmt.Errorf("%w: --deadline applies to requests only", errUsage)
		}
		if dl, err = node.ParseDeadline(*deadline, time.Now()); err != nil {
			return fmt.Errorf("%w: --deadline: %v", errUsage, err)
		}
	}
	content := ""
	switch {
	case *bodyFile != "":
		arg := *bodyFile
		if arg != "-" {
			arg = "@" + arg
		}
		content, err = e.readInput("--body-file", arg)
	case len(pos) == max:
		content, err = e.readInput("the "+map[string]string{"message": "body", "request": "params", "response": "result"}[sub], pos[max-1])
	}
	if err != nil {
		return err
	}
	// JSON arguments are checked here, so a bad one is the same usage
	// error whether or not a daemon runs.
	if sub != "message" && content != "" && !json.Valid([]byte(content)) {
		return fmt.Errorf("%w: %s %q is not valid JSON", errUsage, map[string]string{"request": "PARAMS_JSON", "response": "RESULT_JSON"}[sub], short(content))
	}
	mode := node.ModeSend
	if sub == "request" && *wait > 0 {
		mode = node.ModeReplies
	}
	h, b, err := e.openBackend(*homeFlag, mode)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), h.Config.Comms.AckTimeout()+10*time.Second+*wait)
	defer cancel()
	opts := node.SendOptions{Reliable: *reliable, TTL: *ttl, NoWait: *noWait, Wait: *wait, Interrupt: *interrupt, IdempotencyKey: *idemKey, TaskID: *task, Deadline: dl}
	var res node.Sent
	idShown := false // a request waited for prints its id first
	switch sub {
	case "message":
		res, err = b.SendMessage(ctx, pos[0], content, opts)
	case "request":
		// The id first, then the wait: an interrupted (caught before the
		// id shows) or broken wait still leaves the id printed.
		opts.Wait = 0
		sig, stop := interruptibleIf(*wait > 0)
		defer stop()
		if res, err = b.SendRequest(ctx, pos[0], pos[1], json.RawMessage(content), opts); err == nil && *wait > 0 && !res.Replayed {
			if idShown = !*asJSON; idShown {
				fmt.Fprintln(e.stdout, res.ID)
			}
			wctx, wcancel := context.WithTimeout(sig, *wait+30*time.Second)
			if res.Responses, err = node.AwaitSent(wctx, b, res, *wait, dl); sig.Err() != nil {
				err = errInterrupted
			}
			wcancel()
		}
	case "response":
		res, err = b.SendResponse(ctx, pos[0], pos[1], pos[2], json.RawMessage(content), opts)
	}
	if *asJSON {
		return e.printPartial(res, err == nil || res.ID != "", err)
	}
	if err != nil && res.ID == "" {
		return err
	} else if !idShown {
		fmt.Fprintln(e.stdout, res.ID)
	}
	if res.Replayed {
		fmt.Fprintf(e.stderr, "replayed: the first send with this idempotency key (%s); nothing sent again\n", res.Delivery)
	}
	switch res.Delivery {
	case node.DeliveryQueued:
		nodetext.SendQueued(e.stderr, res, b.Daemon)
	case node.DeliveryStored:
		fmt.Fprintln(e.stderr, "stored in the broker (NATS JetStream): the peer gets it when it is back; not acknowledged yet (meerkatd sent shows when it is)")
	}
	for _, r := range res.Responses {
		fmt.Fprintf(e.stdout, "%s %s\n", r.Status, nodetext.EscapeJSON(r.Result, "  "))
	}
	return err
}

// wantContent checks the positional arguments of a send: min without
// the content, max with it; --body-file replaces the last.
func wantContent(pos []string, bodyFile string, min, max int, names string) error {
	switch {
	case bodyFile != "" && len(pos) != max-1:
		return fmt.Errorf("%w: with --body-file want %d argument(s) before it (%s), got %d", errUsage, max-1, names, len(pos))
	case bodyFile == "" && (len(pos) < min || len(pos) > max):
		return fmt.Errorf("%w: want %s, got %d argument(s)", errUsage, names, len(pos))
	}
	return nil
}

// short is s cut for an error message.
func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
