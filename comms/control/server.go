package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/transport"
)

// Server limits and timeouts.
const (
	// DefaultMaxConns bounds the connections served at once.
	DefaultMaxConns = 64
	// A quarter of the connections (at least one) are kept from calls
	// that wait (waitSlot): however many clients wait, a status,
	// release, tell or ack still finds a connection.
	keptFromWaits = 4
	// idleTimeout closes a connection that sends nothing for this long.
	idleTimeout = 5 * time.Minute
	// writeTimeout bounds writing one reply.
	writeTimeout = 30 * time.Second
	// callSlack is what a call may take beyond the wait it asked for
	// (a send's ack timeout is added to it).
	callSlack = 30 * time.Second
)

// Options configure Serve. The zero value is usable.
type Options struct {
	Logger   *slog.Logger // nil: discard
	MaxConns int          // 0: DefaultMaxConns
	// SendTimeout bounds a send's call beyond any wait it asks for (the
	// node's ack timeout plus dialing); 0: one minute.
	SendTimeout time.Duration
	// allowUID, when set, replaces the process's own user id as the one
	// allowed to connect (tests).
	allowUID *uint32
	// peerUID replaces transport.PeerUID (tests).
	peerUID func(net.Conn) (uint32, error)
}

// Serve answers control requests on ln with api until ctx ends or ln is
// closed; it closes ln and returns once every connection has ended.
// Transient accept failures (out of descriptors) back off rather than take
// the socket away.
func Serve(ctx context.Context, ln net.Listener, api node.API, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = time.Minute
	}
	if opts.peerUID == nil {
		opts.peerUID = transport.PeerUID
	}
	uid := uint32(os.Getuid())
	if opts.allowUID != nil {
		uid = *opts.allowUID
	}
	s := &server{api: api, opts: opts, uid: uid, ctx: ctx, slots: make(chan struct{}, opts.MaxConns),
		waits: make(chan struct{}, max(1, opts.MaxConns-max(1, opts.MaxConns/keptFromWaits)))}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	defer s.wg.Wait()
	delay := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.opts.Logger.Warn("control socket accept failed; backing off", "err", err)
			select {
			case <-time.After(delay):
				delay = min(2*delay, time.Second)
				continue
			case <-ctx.Done():
				return nil
			}
		}
		delay = 5 * time.Millisecond
		select {
		case s.slots <- struct{}{}:
		default:
			s.refuse(c, node.CodeUnavailable, "the control socket is busy: too many connections")
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.serveConn(c)
		}()
	}
}

type server struct {
	api   node.API
	opts  Options
	uid   uint32
	ctx   context.Context
	slots chan struct{}
	waits chan struct{} // calls that wait, fewer than slots
	wg    sync.WaitGroup
}

// waitSlot takes one of the slots of calls that wait, if req is one: a
// receive, await_responses, wait_task or space send with a wait, a
// request sent with a wait for its response, or pair_wait. ok false
// means none is free; release gives it back.
func (s *server) waitSlot(req Request) (release func(), ok bool) {
	switch req.Op {
	case OpReceive, OpAwaitResponses, OpWaitTask, OpSpaceSend, OpSendRequest:
		var a struct {
			Wait    time.Duration `json:"wait"`
			Options struct {
				Wait time.Duration `json:"wait"`
			} `json:"options"`
		}
		if json.Unmarshal(req.Args, &a) != nil || a.Wait <= 0 && a.Options.Wait <= 0 {
			return func() {}, true // no wait (bad arguments are handle's to report)
		}
	case OpPairWait:
	default:
		return func() {}, true
	}
	select {
	case s.waits <- struct{}{}:
		return func() { <-s.waits }, true
	default:
		return nil, false
	}
}

// refuse answers c with one error and closes it.
func (s *server) refuse(c net.Conn, code, msg string) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	b, _ := json.Marshal(Response{Code: code, Error: msg})
	c.Write(append(b, '\n'))
	c.Close()
}

func (s *server) serveConn(c net.Conn) {
	uid, err := s.opts.peerUID(c)
	if err != nil || uid != s.uid {
		if err == nil {
			err = fmt.Errorf("uid %d", uid)
		}
		s.opts.Logger.Warn("control socket: refused a process of another user", "peer", err.Error())
		s.refuse(c, node.CodeForbidden, "this control socket serves only the node's own user")
		return
	}
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	pr := &peekReader{c: c}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 0, 64<<10), MaxRequest)
	for {
		c.SetReadDeadline(time.Now().Add(idleTimeout))
		if s.ctx.Err() != nil { // shutdown set a deadline we may have just replaced
			return
		}
		if !sc.Scan() {
			if errors.Is(sc.Err(), bufio.ErrTooLong) {
				s.refuse(c, node.CodeBadArgument, fmt.Sprintf("control request longer than %d bytes", MaxRequest))
			}
			return
		}
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp = Response{Code: node.CodeBadArgument, Error: "malformed control request: " + err.Error()}
		} else {
			c.SetReadDeadline(time.Time{})
			resp = s.call(c, pr, req)
		}
		b, err := json.Marshal(resp)
		if err != nil {
			b, _ = json.Marshal(Response{Code: node.CodeInternal, Error: err.Error()})
		}
		c.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := c.Write(append(b, '\n')); err != nil {
			return
		}
	}
}

// peekReader is a connection's reader that can read ahead one byte while
// a request is handled, to notice a client that hangs up.
type peekReader struct {
	c       net.Conn
	pending []byte // read ahead: returned before anything else
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.pending) > 0 {
		n := copy(b, p.pending)
		p.pending = p.pending[n:]
		return n, nil
	}
	return p.c.Read(b)
}

// call handles req while watching the connection: a client waits for the
// reply without writing, so a read that ends meanwhile (the client closed
// the connection, or its write side) cancels the call, as net/http does.
// Otherwise a call whose client gave up (an interrupted inbox --wait, a
// cancelled MCP wait) would go on, holding one of the MaxConns slots, for
// as long as it may wait.
func (s *server) call(c net.Conn, pr *peekReader, req Request) Response {
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var b [1]byte
		n, err := pr.c.Read(b[:])
		if n > 0 {
			pr.pending = append(pr.pending, b[:n]...) // the next request, early
			return
		}
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			cancel(errHungUp)
		}
	}()
	resp := s.handle(ctx, req)
	c.SetReadDeadline(time.Unix(1, 0)) // end the watch; the next read resets it
	<-watched
	return resp
}

// errHungUp is the cause of a call's context that ends because its
// client closed the connection.
var errHungUp = errors.New("control: the client hung up")

// args decodes a request's arguments into v (absent arguments: v's zero
// value).
func args(req Request, v any) error {
	if len(req.Args) == 0 {
		return nil
	}
	if err := json.Unmarshal(req.Args, v); err != nil {
		return &node.Error{Code: node.CodeBadArgument, Msg: fmt.Sprintf("arguments of %s: %v", req.Op, err)}
	}
	return nil
}

// handle runs one request on the API, within ctx.
func (s *server) handle(ctx context.Context, req Request) Response {
	release, ok := s.waitSlot(req)
	if !ok {
		return Response{Code: node.CodeUnavailable, Error: fmt.Sprintf("%d calls are waiting on this node already (the most at once): ask again without a wait, or once one has returned", cap(s.waits))}
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout+node.MaxWait+callSlack)
	defer cancel()
	var result any
	var err error
	switch req.Op {
	case OpSelf:
		result, err = s.api.Self(ctx)
	case OpStatus:
		result, err = s.api.Status(ctx)
	case OpPeers:
		result, err = s.api.Peers(ctx)
	case OpSendMessage:
		var a SendMessageArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.SendMessage(ctx, a.Peer, a.Body, a.Options)
		}
	case OpSendRequest:
		var a SendRequestArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.SendRequest(ctx, a.Peer, a.Intent, a.Params, a.Options)
		}
	case OpAwaitResponses:
		var a AwaitArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.AwaitResponses(ctx, a.ID, a.Wait, a.Deadline)
		}
	case OpSendResponse:
		var a SendResponseArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.SendResponse(ctx, a.Peer, a.RequestID, a.Status, a.Result, a.Options)
		}
	case OpReceive:
		var q node.Query
		if err = args(req, &q); err == nil {
			result, err = s.api.Receive(ctx, q)
		}
	case OpAck:
		var a node.AckRequest
		if err = args(req, &a); err == nil {
			result, err = s.api.Ack(ctx, a)
		}
	case OpOutbox:
		result, err = s.api.Outbox(ctx)
	case OpRetryOutbox:
		var a RetryOutboxArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.RetryOutbox(ctx, a.Peer)
		}
	case OpDropQueued:
		var a DropQueuedArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.DropQueued(ctx, a.IDs)
		}
	case OpDeadLetters:
		result, err = s.api.DeadLetters(ctx)
	case OpRetryDeadLetters:
		var a DeadLettersArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.RetryDeadLetters(ctx, a.IDs, a.All)
		}
	case OpDropDeadLetters:
		var a DeadLettersArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.DropDeadLetters(ctx, a.IDs, a.All)
		}
	case OpPairOffer:
		var o node.PairOptions
		if err = args(req, &o); err == nil {
			result, err = s.api.PairOffer(ctx, o)
		}
	case OpPairWait:
		var a OfferArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.PairWait(ctx, a.ID)
		}
	case OpPairCancel:
		var a OfferArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.PairCancel(ctx, a.ID)
		}
	case OpPairAccept:
		var a PairAcceptArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.PairAccept(ctx, a.Line, a.Name)
		}
	case OpSpaces:
		result, err = s.api.Spaces(ctx)
	case OpSpaceEdit:
		var e node.SpaceEdit
		if err = args(req, &e); err == nil {
			result, err = s.api.SpaceEdit(ctx, e)
		}
	case OpSpaceSend:
		var m node.SpaceMessage
		if err = args(req, &m); err == nil {
			result, err = s.api.SpaceSend(ctx, m)
		}
	case OpProposals:
		var q node.ProposalQuery
		if err = args(req, &q); err == nil {
			result, err = s.api.Proposals(ctx, q)
		}
	case OpTell: // classes
		var a TellArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.Tell(ctx, a.Body)
		}
	// Slice B: delivery status.
	case OpMessageStatus:
		var a MessageStatusArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.MessageStatus(ctx, a.IDs)
		}
	case OpSentList:
		var q node.SentQuery
		if err = args(req, &q); err == nil {
			result, err = s.api.SentList(ctx, q)
		}
	// Slice C: search.
	case OpSearch:
		var q node.SearchQuery
		if err = args(req, &q); err == nil {
			result, err = s.api.Search(ctx, q)
		}
	// Broadcast and tasks slice.
	case OpBroadcast:
		var a node.BroadcastArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.Broadcast(ctx, a)
		}
	case OpTaskComplete:
		var a TaskCompleteArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.TaskComplete(ctx, a.TaskID, a.Result, a.Options)
		}
	case OpTasks:
		var q node.TaskQuery
		if err = args(req, &q); err == nil {
			result, err = s.api.Tasks(ctx, q)
		}
	case OpWaitTask:
		var a WaitTaskArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.WaitTask(ctx, a.TaskID, a.Wait)
		}
	// Agent cards (slice E).
	case OpCard:
		result, err = s.api.Card(ctx)
	case OpCardEdit:
		var e node.CardEdit
		if err = args(req, &e); err == nil {
			result, err = s.api.CardEdit(ctx, e)
		}
	case OpFetchCard:
		var a PeerArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.FetchCard(ctx, a.Peer)
		}
	case OpDescribePeer:
		var a PeerArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.DescribePeer(ctx, a.Peer, a.Refresh)
		}
	case OpCancelRequest: // slice F
		var a CancelRequestArgs
		if err = args(req, &a); err == nil {
			result, err = s.api.CancelRequest(ctx, a.RequestID, a.Reason, a.Options)
		}
	case OpRequests: // slice F
		var q node.RequestQuery
		if err = args(req, &q); err == nil {
			result, err = s.api.Requests(ctx, q)
		}
	// Slice G: the loop guard.
	case OpLoopGuards:
		result, err = s.api.LoopGuards(ctx)
	case OpLoopRelease:
		var a ReleaseLoopGuardArgs
		if err = args(req, &a); err == nil {
			err = s.api.ReleaseLoopGuard(ctx, a.Peer)
			result = true
		}
	case OpApplyTrust:
		if a, ok := s.api.(trustApplier); ok {
			err = a.ApplyTrust(ctx)
			result = true
			break
		}
		fallthrough
	default:
		err = &node.Error{Code: node.CodeBadArgument, Msg: fmt.Sprintf(unknownOp+" %q", req.Op)}
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		return Response{Code: node.CodeInternal, Error: merr.Error()}
	}
	if err != nil {
		code := node.CodeOf(err)
		msg := node.UserText(err)
		closing := s.ctx.Err() != nil
		switch {
		case closing:
			code, msg = node.CodeUnavailable, "the node is shutting down"
		case errors.Is(context.Cause(ctx), errHungUp):
			// A client may go away mid-call (an interrupted wait, an MCP
			// client that stopped): nobody reads the answer, and the
			// call failed only because it was cancelled.
			s.opts.Logger.Debug("control request ended: the client hung up", "op", req.Op, "err", err)
		case code == node.CodeInternal:
			s.opts.Logger.Error("control request failed", "op", req.Op, "err", err)
		}
		return Response{Code: code, Error: msg, Result: b, Closing: closing}
	}
	return Response{OK: true, Result: b}
}
