package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/meerkatd/meerkatd/comms/control"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/comms/node/nodetext"
	"github.com/meerkatd/meerkatd/internal/flagdoc"
)

func runBroadcast(e *env, args []string) error {
	flags, homeFlag, asJSON := e.newCmd("broadcast", "")
	group := flags.String("group", "", "only the trusted peers in `group` (trust entry meta \"groups\")")
	var peers stringList
	flags.Var(&peers, "peer", "only this `peer` (name, key or UUID; repeatable)")
	direct := flags.Bool("direct", false, "one attempt per peer instead of a reliable send through the outbox")
	ttl := flags.Duration("ttl", 0, "reliable: give up on a copy not acked within `DUR` (default outbox.default_ttl_secs)")
	task := flags.String("task", "", "send under task `ID`")
	idemKey := flags.String("idempotency-key", "", "make a retry safe: a broadcast with a `KEY` used before prints the first one's result without sending")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want BODY, got %d argument(s)", errUsage, len(pos))
	}
	if *ttl < 0 || *direct && *ttl > 0 {
		return fmt.Errorf("%w: --ttl must be positive and applies to reliable sends (not --direct)", errUsage)
	}
	body, err := e.readInput("the body", pos[0])
	if err != nil {
		return err
	}
	a := node.BroadcastArgs{Body: body, Group: *group, Peers: peers, Direct: *direct, SendOptions: node.SendOptions{TTL: *ttl, TaskID: *task, IdempotencyKey: *idemKey}}
	return e.withBackend(*homeFlag, 2*time.Minute, func(ctx context.Context, b *control.Backend) error {
		res, err := b.Broadcast(ctx, a)
		if *asJSON {
			return e.printPartial(res, err == nil, cmp.Or(err, res.CopiesError()))
		}
		if err != nil {
			return err
		}
		e.noteReplayed(res.Replayed, "broadcast")
		fmt.Fprintln(e.stdout, res.ID)
		if err := nodetext.Broadcast(e.stdout, res); err != nil {
			return err
		}
		return res.CopiesError()
	})
}

func runTask(e *env, args []string) error {
	sub, args := flagdoc.SplitSub(args)
	if sub == "" {
		sub = "list"
	}
	flags, homeFlag, asJSON := e.newCmd("task "+sub, "")
	wait := flags.Duration("wait", 0, "wait: wait up to `DUR` (30s, 5m; at most 10m) for the completion")
	state := flags.String("state", "", "list: only tasks in `state` (open, completed)")
	idemKey := flags.String("idempotency-key", "", "complete: make a retry safe: a completion with a `KEY` used before prints the first one's result and sends nothing")
	pos, err := parseArgs(e, flags, args)
	if err != nil {
		return err
	}
	ar, ok := map[string][2]int{"list": {0, 0}, "complete": {1, 2}, "wait": {1, 1}}[sub]
	if !ok {
		return fmt.Errorf("%w: unknown task subcommand %q (want list, complete or wait)", errUsage, sub)
	}
	if len(pos) < ar[0] || len(pos) > ar[1] {
		return fmt.Errorf("%w: wrong number of arguments for task %s (see meerkatd help task)", errUsage, sub)
	}
	if *wait < 0 || *wait > node.MaxWait || *wait > 0 && sub != "wait" || *idemKey != "" && sub != "complete" {
		return fmt.Errorf("%w: --wait is for task wait only, from 0 (the default: just look) to %v; --idempotency-key is for task complete only", errUsage, node.MaxWait)
	}
	var result json.RawMessage
	if sub == "complete" && len(pos) == 2 {
		s, err := e.readInput("the result", pos[1])
		if err != nil {
			return err
		}
		if !json.Valid([]byte(s)) {
			return fmt.Errorf("%w: RESULT_JSON %q is not valid JSON", errUsage, short(s))
		}
		result = json.RawMessage(s)
	}
	return e.withBackend(*homeFlag, min(*wait, node.MaxWait)+2*time.Minute, func(ctx context.Context, b *control.Backend) error {
		var out any
		var task *node.Task
		var err error
		switch sub {
		case "list":
			var tl node.TaskList
			tl, err = node.AllTasks(ctx, b, node.TaskQuery{State: *state})
			if err == nil && !*asJSON {
				return nodetext.Tasks(e.stdout, tl)
			}
			out = tl.Tasks
		case "complete":
			var res node.TaskCompleted
			res, err = b.TaskComplete(ctx, pos[0], result, node.SendOptions{IdempotencyKey: *idemKey})
			out, task = res, &res.Task
			if err == nil && !*asJSON {
				e.noteReplayed(res.Replayed, "completion")
				if res.Already {
					fmt.Fprintf(e.stderr, "task %s was already completed: its result stays, nothing sent\n", nodetext.Line(pos[0]))
				}
				for _, c := range res.Copies {
					fmt.Fprintf(e.stderr, "told %s: %s %s\n", c.Peer, c.Delivery, nodetext.Line(c.Error+c.LastError))
				}
			}
		case "wait":
			var res node.TaskWaited
			res, err = b.WaitTask(ctx, pos[0], *wait)
			out, task = res, &res.Task
			if err == nil && res.TimedOut {
				// Code timed_out, as the result's timed_out says: the
				// wait ended, the task goes on.
				err = &node.Error{Code: node.CodeTimedOut, Msg: fmt.Sprintf("task %s is still open (wait again later: it resolves only on completion)", nodetext.Line(pos[0]))}
			}
		}
		if *asJSON {
			// A list has no partial result; a task comes with its error.
			return e.printPartial(out, task == nil && err == nil || task != nil && task.ID != "", err)
		}
		if task != nil && task.ID != "" {
			nodetext.Task(e.stdout, *task)
		}
		return err
	})
}
