package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/mcpserver"
)

// remoteNode implements mcpserver.Node through a running daemon's control
// socket. Each call uses its own connection, so a long receive wait does
// not hold up other tools.
type remoteNode struct {
	h    *home
	self mcpserver.Self
}

func (rn *remoteNode) call(ctx context.Context, req ctlRequest, out any) error {
	rb := dialControl(rn.h)
	if rb == nil {
		return fmt.Errorf("the daemon for %s is not running any more", rn.h.dir)
	}
	defer rb.close()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rn.h.cfg.Comms.AckTimeout()+mcpserver.MaxWait+30*time.Second)
		defer cancel()
	}
	stop := context.AfterFunc(ctx, func() { rb.c.SetDeadline(time.Now()) })
	defer stop()
	err := rb.call(ctx, req, out)
	var ce *codedError
	if errors.As(err, &ce) {
		if code, ok := strings.CutPrefix(ce.code, "node:"); ok {
			return &mcpserver.Error{Code: code, Msg: ce.msg}
		}
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (rn *remoteNode) Self() mcpserver.Self { return rn.self }

func (rn *remoteNode) Peers(ctx context.Context) (peers []mcpserver.Peer, err error) {
	err = rn.call(ctx, ctlRequest{Op: "node.peers"}, &peers)
	return peers, err
}

// withSendOptions sets a node.send_* request's delivery fields. A
// time-to-live below a millisecond is sent as one millisecond, not as 0
// (which would mean the default).
func withSendOptions(req ctlRequest, opts mcpserver.SendOptions) ctlRequest {
	req.Reliable = opts.Reliable
	if opts.TTL > 0 {
		req.TTLMS = max(opts.TTL.Milliseconds(), 1)
	}
	return req
}

func (rn *remoteNode) SendMessage(ctx context.Context, peer, body string, opts mcpserver.SendOptions) (s mcpserver.Sent, err error) {
	err = rn.call(ctx, withSendOptions(ctlRequest{Op: "node.send_message", Peer: peer, Body: body}, opts), &s)
	return s, err
}

func (rn *remoteNode) SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts mcpserver.SendOptions) (s mcpserver.Sent, err error) {
	err = rn.call(ctx, withSendOptions(ctlRequest{Op: "node.send_request", Peer: peer, Intent: intent, Params: params}, opts), &s)
	return s, err
}

func (rn *remoteNode) SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts mcpserver.SendOptions) (s mcpserver.Sent, err error) {
	err = rn.call(ctx, withSendOptions(ctlRequest{Op: "node.send_response", Peer: peer, RequestID: requestID, Status: status, Result: result}, opts), &s)
	return s, err
}

func (rn *remoteNode) Outbox(ctx context.Context) (o mcpserver.Outbox, err error) {
	err = rn.call(ctx, ctlRequest{Op: "node.outbox"}, &o)
	return o, err
}

func (rn *remoteNode) DeadLetters(ctx context.Context) (dl []mcpserver.DeadLetter, err error) {
	err = rn.call(ctx, ctlRequest{Op: "node.dead_letters"}, &dl)
	return dl, err
}

func (rn *remoteNode) RetryDeadLetters(ctx context.Context, ids []string, all bool) (n int, err error) {
	err = rn.call(ctx, ctlRequest{Op: "node.retry_dead_letters", IDs: ids, All: all}, &n)
	return n, err
}

func (rn *remoteNode) PairOffer(ctx context.Context) (o mcpserver.PairOffer, err error) {
	err = rn.call(ctx, ctlRequest{Op: "node.pair_offer"}, &o)
	return o, err
}

func (rn *remoteNode) PairAccept(ctx context.Context, line, name string) (p mcpserver.Paired, err error) {
	err = rn.call(ctx, ctlRequest{Op: "node.pair_accept", Body: line, Peer: name}, &p)
	return p, err
}

func (rn *remoteNode) Receive(ctx context.Context, q mcpserver.Query) (mcpserver.Batch, error) {
	// Decode params and result as raw JSON, not into interface values
	// (which would turn every number into a float64).
	var raw struct {
		Messages []struct {
			mcpserver.Message
			Params json.RawMessage `json:"params,omitempty"`
			Result json.RawMessage `json:"result,omitempty"`
		} `json:"messages"`
		Cursor   uint64 `json:"cursor"`
		TimedOut bool   `json:"timed_out"`
		Pending  int    `json:"pending"`
	}
	err := rn.call(ctx, ctlRequest{Op: "node.receive", After: q.After, Limit: q.Limit, Kinds: q.Kinds, Peer: q.From, RequestID: q.RequestID, WaitMS: q.Wait.Milliseconds()}, &raw)
	b := mcpserver.Batch{Cursor: raw.Cursor, TimedOut: raw.TimedOut, Pending: raw.Pending, Messages: make([]mcpserver.Message, 0, len(raw.Messages))}
	for _, m := range raw.Messages {
		msg := m.Message
		msg.Params, msg.Result = nil, nil
		if m.Params != nil {
			msg.Params = m.Params
		}
		if m.Result != nil {
			msg.Result = m.Result
		}
		b.Messages = append(b.Messages, msg)
	}
	return b, err
}

func (rn *remoteNode) Ack(ctx context.Context, ids []string, upTo uint64, filter mcpserver.Query) (int, int, error) {
	var r struct{ Acked, Pending int }
	err := rn.call(ctx, ctlRequest{Op: "node.ack", IDs: ids, UpTo: upTo, Kinds: filter.Kinds, Peer: filter.From, RequestID: filter.RequestID}, &r)
	return r.Acked, r.Pending, err
}

// runMCP serves MCP on stdin/stdout: attached to the home's daemon if one
// runs, else with the node in this process for as long as stdin is open.
func runMCP(e *env, args []string) error {
	flags := e.newFlags("mcp")
	homeFlag := flags.String("home", "", "node home `directory`")
	logLevel := flags.String("log-level", "warn", "stderr log `level`: debug, info, warn or error")
	if err := parseNoArgs(flags, args); err != nil {
		return err
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		return err
	}
	h, err := e.openHome(*homeFlag, nil)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var node mcpserver.Node
	if rb := dialControl(h); rb != nil {
		var self mcpserver.Self
		err := rb.call(ctx, ctlRequest{Op: "node.self"}, &self)
		rb.close()
		if err != nil {
			return fmt.Errorf("attach to the daemon: %w", err)
		}
		log.Info("attached to the running daemon", "home", h.dir)
		node = &remoteNode{h: h, self: self}
	} else {
		n, shutdown, err := e.startServing(ctx, h, log)
		if err != nil {
			return err
		}
		defer shutdown()
		log.Info("running the node in this process", "home", h.dir)
		node = &mcpNode{n: n}
	}
	s := mcpserver.New(node, mcpserver.Options{Version: buildVersion(), Logger: log})
	return s.ServeStdio(ctx, e.stdin, e.stdout)
}
