package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/mcpserver"
	"github.com/meerkatd/meerkatd/transport"
)

// The control socket (<home>/control.sock, mode 0600) carries one JSON
// request per line and one JSON response per line. Only the node's own
// user can connect: the socket's mode is the access control.

// Control socket limits.
const (
	maxControlLine   = 8 << 20 // a request carries at most one message body (up to 6× longer once JSON-escaped)
	controlIdle      = 5 * time.Minute
	maxControlWait   = 10 * time.Minute
	controlDialLimit = time.Second
)

type ctlRequest struct {
	Op        string          `json:"op"`
	Peer      string          `json:"peer,omitempty"`
	Body      string          `json:"body,omitempty"`
	Intent    string          `json:"intent,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
	Status    string          `json:"status,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	WaitMS    int64           `json:"wait_ms,omitempty"`
	After     uint64          `json:"after,omitempty"`
	Ack       bool            `json:"ack,omitempty"`
	// node.* operations (meerkatd mcp attached to the daemon)
	Limit int      `json:"limit,omitempty"`
	Kinds []string `json:"kinds,omitempty"`
	From  string   `json:"from,omitempty"`
	IDs   []string `json:"ids,omitempty"`
	UpTo  uint64   `json:"up_to,omitempty"`
	Seqs  []uint64 `json:"seqs,omitempty"` // inbox_ack
	// Reliable sends (send_* and node.send_*).
	Reliable bool  `json:"reliable,omitempty"`
	TTLMS    int64 `json:"ttl_ms,omitempty"`
	NoWait   bool  `json:"no_wait,omitempty"`
	// deadletters_retry, deadletters_drop
	All bool `json:"all,omitempty"`
}

// delivery returns the request's delivery options.
func (r ctlRequest) delivery() deliveryOpts {
	return deliveryOpts{reliable: r.Reliable, ttl: time.Duration(max(r.TTLMS, 0)) * time.Millisecond, noWait: r.NoWait}
}

// sendOptions returns a node.send_* request's options.
func (r ctlRequest) sendOptions() mcpserver.SendOptions {
	d := r.delivery()
	return mcpserver.SendOptions{Reliable: d.reliable, TTL: d.ttl}
}

// ctlDelivery sets a request's delivery fields.
func ctlDelivery(req ctlRequest, d deliveryOpts) ctlRequest {
	req.Reliable, req.TTLMS, req.NoWait = d.reliable, d.ttl.Milliseconds(), d.noWait
	return req
}

type ctlResponse struct {
	OK     bool            `json:"ok"`
	Code   string          `json:"code,omitempty"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// controlServer serves the control socket for a daemon.
type controlServer struct {
	b   *localBackend
	log *slog.Logger
	ctx context.Context
	wg  sync.WaitGroup
}

// serve accepts control connections until ln is closed (or the context
// ends). Transient accept failures (out of descriptors) back off rather than
// take the control socket away. The caller has done s.wg.Add(1) for it.
func (s *controlServer) serve(ln net.Listener) {
	defer s.wg.Done()
	defer ln.Close()
	delay := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("control socket accept failed; backing off", "err", err)
			select {
			case <-time.After(delay):
				delay = min(2*delay, time.Second)
				continue
			case <-s.ctx.Done():
				return
			}
		}
		delay = 5 * time.Millisecond
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
		}()
	}
}

func (s *controlServer) serveConn(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 64<<10), maxControlLine)
	for {
		c.SetReadDeadline(time.Now().Add(controlIdle))
		if s.ctx.Err() != nil { // shutdown set a deadline we may have just replaced
			return
		}
		if !sc.Scan() {
			return
		}
		var req ctlRequest
		var resp ctlResponse
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp = ctlResponse{Code: codeBadArgs, Error: "malformed control request: " + err.Error()}
		} else {
			c.SetReadDeadline(time.Time{})
			resp = s.handle(req)
		}
		b, _ := json.Marshal(resp)
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(append(b, '\n')); err != nil {
			return
		}
	}
}

func (s *controlServer) handle(req ctlRequest) ctlResponse {
	wait := time.Duration(min(max(req.WaitMS, 0), int64(maxControlWait/time.Millisecond))) * time.Millisecond
	ctx, cancel := context.WithTimeout(s.ctx, s.b.n.sendTimeout()+wait)
	defer cancel()
	var result any
	var err error
	switch req.Op {
	case "send_message":
		result, err = s.b.sendMessage(ctx, req.Peer, req.Body, req.delivery())
	case "send_request":
		result, err = s.b.sendRequest(ctx, req.Peer, req.Intent, req.Params, wait, req.delivery())
	case "send_response":
		result, err = s.b.sendResponse(ctx, req.Peer, req.RequestID, req.Status, req.Result, req.delivery())
	case "pair_offer":
		result, _, err = s.b.n.pairing.open(time.Duration(req.TTLMS)*time.Millisecond, req.Peer)
	case "pair_wait":
		result, err = s.b.n.pairing.wait(ctx, req.RequestID)
	case "pair_cancel":
		s.b.n.pairing.cancel(req.RequestID)
		result = true
	case "pair_accept":
		result, err = s.b.n.accept(ctx, req.Body, req.Peer)
	case "outbox":
		result, err = s.b.outbox(ctx)
	case "deadletters":
		result, err = s.b.deadLetters(ctx)
	case "deadletters_retry":
		result, err = s.b.reviveDead(ctx, req.IDs, req.All)
	case "deadletters_drop":
		result, err = s.b.dropDead(ctx, req.IDs, req.All)
	case "inbox":
		result, err = s.b.inbox(ctx, req.After, wait, false) // removal is a separate inbox_ack
	case "inbox_ack":
		result = s.b.n.mail.Ack(req.Seqs...)
	case "status":
		result, err = s.b.status(ctx)
	case "node.self", "node.peers", "node.send_message", "node.send_request", "node.send_response", "node.receive", "node.ack",
		"node.outbox", "node.dead_letters", "node.retry_dead_letters", "node.pair_offer", "node.pair_accept":
		return s.handleNode(ctx, req, wait)
	default:
		err = &codedError{codeBadArgs, fmt.Sprintf("unknown control operation %q", req.Op)}
	}
	if err != nil {
		code := errorCode(err)
		if code == codeInternal {
			s.log.Error("control request failed", "op", req.Op, "err", err)
		}
		b, _ := json.Marshal(result)
		return ctlResponse{Code: code, Error: err.Error(), Result: b}
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		return ctlResponse{Code: codeInternal, Error: merr.Error()}
	}
	return ctlResponse{OK: true, Result: b}
}

// handleNode serves the node.* operations with the same Node the embedded
// MCP server uses; errors carry the MCP tool error codes.
func (s *controlServer) handleNode(ctx context.Context, req ctlRequest, wait time.Duration) ctlResponse {
	m := &mcpNode{n: s.b.n}
	var result any
	var err error
	switch req.Op {
	case "node.self":
		result = m.Self()
	case "node.peers":
		result, err = m.Peers(ctx)
	case "node.send_message":
		result, err = m.SendMessage(ctx, req.Peer, req.Body, req.sendOptions())
	case "node.send_request":
		result, err = m.SendRequest(ctx, req.Peer, req.Intent, req.Params, req.sendOptions())
	case "node.send_response":
		result, err = m.SendResponse(ctx, req.Peer, req.RequestID, req.Status, req.Result, req.sendOptions())
	case "node.receive":
		result, err = m.Receive(ctx, mcpserver.Query{After: req.After, Limit: req.Limit, Kinds: req.Kinds, From: req.Peer, RequestID: req.RequestID, Wait: wait})
	case "node.ack":
		var acked, pending int
		acked, pending, err = m.Ack(ctx, req.IDs, req.UpTo, mcpserver.Query{Kinds: req.Kinds, From: req.Peer, RequestID: req.RequestID})
		result = map[string]int{"acked": acked, "pending": pending}
	case "node.outbox":
		result, err = m.Outbox(ctx)
	case "node.dead_letters":
		result, err = m.DeadLetters(ctx)
	case "node.retry_dead_letters":
		result, err = m.RetryDeadLetters(ctx, req.IDs, req.All)
	case "node.pair_offer":
		result, err = m.PairOffer(ctx)
	case "node.pair_accept":
		result, err = m.PairAccept(ctx, req.Body, req.Peer)
	}
	if err != nil {
		var me *mcpserver.Error
		if errors.As(err, &me) {
			return ctlResponse{Code: "node:" + me.Code, Error: me.Msg}
		}
		if s.ctx.Err() != nil {
			return ctlResponse{Code: codeInternal, Error: "the daemon is shutting down"}
		}
		s.log.Error("control request failed", "op", req.Op, "err", err)
		return ctlResponse{Code: codeInternal, Error: err.Error()}
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		return ctlResponse{Code: codeInternal, Error: merr.Error()}
	}
	return ctlResponse{OK: true, Result: b}
}

// listenControl opens the control socket of home h.
func listenControl(ctx context.Context, h *home) (net.Listener, error) {
	a, err := transport.ParseAddr("uds://" + h.controlPath())
	if err != nil {
		return nil, err
	}
	ln, err := transport.Listen(ctx, a)
	if errors.Is(err, transport.ErrAddrInUse) {
		return nil, fmt.Errorf("a daemon is already running for %s", h.dir)
	}
	return ln, err
}

// remoteBackend talks to a running daemon through its control socket.
type remoteBackend struct {
	c  net.Conn
	br *bufio.Reader
}

// dialControl connects to the daemon of home h, or returns nil if none runs.
func dialControl(h *home) *remoteBackend {
	ctx, cancel := context.WithTimeout(context.Background(), controlDialLimit)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", h.controlPath())
	if err != nil {
		return nil
	}
	return &remoteBackend{c: c, br: bufio.NewReaderSize(c, 64<<10)}
}

func (rb *remoteBackend) close() { rb.c.Close() }

func (rb *remoteBackend) call(ctx context.Context, req ctlRequest, out any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		rb.c.SetDeadline(dl)
	}
	// Registered after the deadline above, so a context already ended,
	// or ending during the call, always wins.
	stop := context.AfterFunc(ctx, func() { rb.c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := rb.c.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("daemon control socket: %w", err)
	}
	line, err := readReply(rb.br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("daemon control socket: %w", err)
	}
	var resp ctlResponse
	if err := json.Unmarshal(line, &resp); err != nil {
		return fmt.Errorf("daemon control socket: bad response: %w", err)
	}
	if len(resp.Result) > 0 && out != nil {
		_ = json.Unmarshal(resp.Result, out) // partial results (a request acked, response missing) are kept
	}
	if !resp.OK {
		return &codedError{resp.Code, resp.Error}
	}
	return nil
}

// maxControlReply bounds one reply from the daemon: an inbox listing of
// large messages is big, but not unbounded.
const maxControlReply = 256 << 20

// readReply reads one newline-terminated reply of at most maxControlReply
// bytes.
func readReply(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxControlReply {
			return nil, errors.New("reply too large")
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

func (rb *remoteBackend) sendMessage(ctx context.Context, peer, body string, d deliveryOpts) (r sendResult, err error) {
	err = rb.call(ctx, ctlDelivery(ctlRequest{Op: "send_message", Peer: peer, Body: body}, d), &r)
	return r, err
}

func (rb *remoteBackend) sendRequest(ctx context.Context, peer, intent string, params json.RawMessage, wait time.Duration, d deliveryOpts) (r sendResult, err error) {
	err = rb.call(ctx, ctlDelivery(ctlRequest{Op: "send_request", Peer: peer, Intent: intent, Params: params, WaitMS: wait.Milliseconds()}, d), &r)
	return r, err
}

func (rb *remoteBackend) sendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, d deliveryOpts) (r sendResult, err error) {
	err = rb.call(ctx, ctlDelivery(ctlRequest{Op: "send_response", Peer: peer, RequestID: requestID, Status: status, Result: result}, d), &r)
	return r, err
}

func (rb *remoteBackend) outbox(ctx context.Context) (o outboxInfo, err error) {
	err = rb.call(ctx, ctlRequest{Op: "outbox"}, &o)
	return o, err
}

func (rb *remoteBackend) deadLetters(ctx context.Context) (d []deadLetterInfo, err error) {
	err = rb.call(ctx, ctlRequest{Op: "deadletters"}, &d)
	return d, err
}

func (rb *remoteBackend) reviveDead(ctx context.Context, ids []string, all bool) (n int, err error) {
	err = rb.call(ctx, ctlRequest{Op: "deadletters_retry", IDs: ids, All: all}, &n)
	return n, err
}

func (rb *remoteBackend) dropDead(ctx context.Context, ids []string, all bool) (n int, err error) {
	err = rb.call(ctx, ctlRequest{Op: "deadletters_drop", IDs: ids, All: all}, &n)
	return n, err
}

// inbox lists, and with ack removes what it received: in two steps, so
// that items are removed only after their listing arrived here intact.
func (rb *remoteBackend) inbox(ctx context.Context, after uint64, wait time.Duration, ack bool) (items []inboxItem, err error) {
	if err = rb.call(ctx, ctlRequest{Op: "inbox", After: after, WaitMS: wait.Milliseconds()}, &items); err != nil || !ack || len(items) == 0 {
		return items, err
	}
	seqs := make([]uint64, 0, len(items))
	for _, it := range items {
		seqs = append(seqs, it.Seq)
	}
	var acked int
	err = rb.call(ctx, ctlRequest{Op: "inbox_ack", Seqs: seqs}, &acked)
	return items, err
}

func (rb *remoteBackend) status(ctx context.Context) (s statusInfo, err error) {
	err = rb.call(ctx, ctlRequest{Op: "status"}, &s)
	return s, err
}
