package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/transport"
)

// dialTimeout bounds connecting to the control socket.
const dialTimeout = time.Second

// maxCall bounds a call whose context has no deadline: the longest wait a
// call may ask for, and time for a send (dial, ack timeout) beyond it.
const maxCall = node.MaxWait + 5*time.Minute

// ErrNoDaemon is wrapped by the errors of calls that found no node serving
// the socket (nothing was sent).
var ErrNoDaemon = errors.New("control: no daemon is running")

// ErrConnLost is wrapped by the errors of calls the daemon did not see
// through: it stopped (or crashed) during the call, which may or may not
// have taken effect, closing the connection or answering that it is
// shutting down.
var ErrConnLost = errors.New("control: the daemon went away during the call")

// Client is a node.API on the other end of a control socket. It is safe
// for concurrent use; its zero value is not usable, call [Dial] or
// [NewClient].
type Client struct {
	path string
	uid  int // the user the socket must belong to
}

var _ node.API = (*Client)(nil)

// NewClient returns a client of the control socket at path without
// checking that anything listens there.
func NewClient(path string) *Client { return &Client{path: path, uid: os.Getuid()} }

// Dial returns a client of the control socket at path once a node answers
// there; ErrNoDaemon (wrapped) when none does.
func Dial(ctx context.Context, path string) (*Client, error) {
	c := NewClient(path)
	if _, err := c.Self(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// WaitServing waits up to bound for a node to answer on the control
// socket at path, as for a daemon that was just started, and reports
// whether one does. It stops early on a socket the client must not use.
func WaitServing(path string, bound time.Duration) bool {
	const poll = 100 * time.Millisecond
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := Dial(ctx, path)
		cancel()
		if err == nil || !errors.Is(err, ErrNoDaemon) {
			return err == nil
		}
		if time.Until(deadline) < poll {
			return false
		}
		time.Sleep(poll)
	}
}

// checkSocket refuses a control socket that is not a socket or does not
// belong to the client's user: another user's process could have put it
// there to read what the client sends.
func (c *Client) checkSocket() error {
	fi, err := os.Lstat(c.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &node.Error{Code: node.CodeUnavailable, Msg: "no daemon is running (no control socket " + c.path + ")", Err: ErrNoDaemon}
		}
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return &node.Error{Code: node.CodeForbidden, Msg: c.path + " is not a socket"}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != c.uid {
		return &node.Error{Code: node.CodeForbidden, Msg: fmt.Sprintf("%s belongs to user %d, not to this user: refusing to use it", c.path, st.Uid)}
	}
	return nil
}

// call sends one request and decodes its result into out (also for a
// failed call that carries a partial result).
func (c *Client) call(ctx context.Context, op string, in, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		// A daemon that accepts but never answers (stopped, deadlocked)
		// must not hang the caller: no call takes longer than the
		// longest wait plus a send's own time.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, maxCall)
		defer cancel()
	}
	if in != nil {
		if field, bad := badText(reflect.ValueOf(in), "argument"); bad {
			return &node.Error{Code: node.CodeBadArgument, Msg: "the " + field + " is not valid UTF-8"}
		}
	}
	if err := c.checkSocket(); err != nil {
		return err
	}
	req := Request{Op: op}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		req.Args = b
	}
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(line) >= MaxRequest {
		return &node.Error{Code: node.CodeBodyTooLarge, Msg: fmt.Sprintf("the request is longer than the control socket takes (%d bytes)", MaxRequest)}
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	conn, err := (&net.Dialer{}).DialContext(dctx, "unix", c.path)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &node.Error{Code: node.CodeUnavailable, Msg: "no daemon is running (" + err.Error() + ")", Err: ErrNoDaemon}
	}
	defer conn.Close()
	// The socket file was this user's when checked; the process that
	// answers must be too (the file could have been swapped since).
	if uid, err := transport.PeerUID(conn); err == nil && int(uid) != c.uid {
		return &node.Error{Code: node.CodeForbidden, Msg: fmt.Sprintf("the process at %s runs as user %d, not as this user: refusing to use it", c.path, uid)}
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// Registered after the deadline above, so a context already ended, or
	// ending during the call, always wins.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	_, werr := conn.Write(append(line, '\n'))
	// A server that refuses the connection (another user, too many
	// connections) answers at once and closes it, so the write may fail:
	// its answer is read all the same.
	reply, err := readReply(bufio.NewReaderSize(conn, 64<<10))
	if err != nil {
		if werr != nil {
			err = werr
		}
		return c.broken(ctx, err)
	}
	return parseReply(reply, out)
}

// parseReply decodes one reply line into out (also the partial result of a
// failed call) and returns the call's error.
func parseReply(reply []byte, out any) error {
	var resp Response
	if err := json.Unmarshal(reply, &resp); err != nil {
		return &node.Error{Code: node.CodeInternal, Msg: "control socket: bad response: " + err.Error()}
	}
	if len(resp.Result) > 0 && out != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil && resp.OK {
			return &node.Error{Code: node.CodeInternal, Msg: "control socket: bad result: " + err.Error()}
		}
	}
	if !resp.OK {
		code := resp.Code
		if code == "" {
			code = node.CodeInternal
		}
		if resp.Closing {
			return &node.Error{Code: code, Msg: "the daemon stopped during the call (" + resp.Error + ")" + mayHaveTakenEffect, Err: ErrConnLost}
		}
		return &node.Error{Code: code, Msg: resp.Error}
	}
	return nil
}

// broken reports a connection that failed mid-call.
func (c *Client) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The connection's deadline is ctx's: its timeout may come a moment
	// before ctx reports that it ended.
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return &node.Error{Code: node.CodeUnavailable, Err: ErrConnLost,
		Msg: "the daemon stopped during the call (its control socket closed the connection: " + err.Error() + ")" + mayHaveTakenEffect}
}

// mayHaveTakenEffect ends the message of a call the daemon stopped
// during.
const mayHaveTakenEffect = "; it may or may not have taken effect (one made with an idempotency key can be made again safely)"

// readReply reads one newline-terminated reply of at most MaxReply bytes.
func readReply(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxReply {
			return nil, errors.New("reply too large")
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

// Self implements node.API.
func (c *Client) Self(ctx context.Context) (s node.Self, err error) {
	err = c.call(ctx, OpSelf, nil, &s)
	return s, err
}

// Status implements node.API.
func (c *Client) Status(ctx context.Context) (s node.Status, err error) {
	err = c.call(ctx, OpStatus, nil, &s)
	return s, err
}

// Peers implements node.API.
func (c *Client) Peers(ctx context.Context) (p []node.Peer, err error) {
	err = c.call(ctx, OpPeers, nil, &p)
	return p, err
}

// SendMessage implements node.API.
func (c *Client) SendMessage(ctx context.Context, peer, body string, opts node.SendOptions) (s node.Sent, err error) {
	err = c.call(ctx, OpSendMessage, SendMessageArgs{Peer: peer, Body: body, Options: opts}, &s)
	return s, err
}

// SendRequest implements node.API.
func (c *Client) SendRequest(ctx context.Context, peer, intent string, params json.RawMessage, opts node.SendOptions) (s node.Sent, err error) {
	err = c.call(ctx, OpSendRequest, SendRequestArgs{Peer: peer, Intent: intent, Params: params, Options: opts}, &s)
	return s, err
}

// unknownOp begins the server's answer to an operation it does not have.
const unknownOp = "unknown control operation"

// lacksOp reports whether err is a node's answer to an operation it does
// not have: a node of an earlier version than the client.
func lacksOp(err error) bool {
	return node.CodeOf(err) == node.CodeBadArgument && strings.HasPrefix(node.UserText(err), unknownOp)
}

// AwaitResponses implements node.API.
func (c *Client) AwaitResponses(ctx context.Context, requestID string, wait time.Duration, deadline time.Time) (s node.Sent, err error) {
	err = c.call(ctx, OpAwaitResponses, AwaitArgs{ID: requestID, Wait: wait, Deadline: deadline}, &s)
	if lacksOp(err) {
		// A node of an earlier version: the request went out; only the
		// wait cannot be made (not a usage error, which a script might
		// answer by sending again).
		return s, &node.Error{Code: node.CodeUnavailable, Msg: "the node serving this home is older than this command and cannot wait for request " + requestID + ", which was sent: its responses arrive in the inbox; restart the daemon to wait with --wait"}
	}
	return s, err
}

// SendResponse implements node.API.
func (c *Client) SendResponse(ctx context.Context, peer, requestID, status string, result json.RawMessage, opts node.SendOptions) (s node.Sent, err error) {
	err = c.call(ctx, OpSendResponse, SendResponseArgs{Peer: peer, RequestID: requestID, Status: status, Result: result, Options: opts}, &s)
	return s, err
}

// Receive implements node.API.
func (c *Client) Receive(ctx context.Context, q node.Query) (b node.Batch, err error) {
	err = c.call(ctx, OpReceive, q, &b)
	return b, err
}

// Ack implements node.API.
func (c *Client) Ack(ctx context.Context, a node.AckRequest) (r node.Acked, err error) {
	err = c.call(ctx, OpAck, a, &r)
	return r, err
}

// Outbox implements node.API.
func (c *Client) Outbox(ctx context.Context) (o node.Outbox, err error) {
	err = c.call(ctx, OpOutbox, nil, &o)
	return o, err
}

// RetryOutbox implements node.API.
func (c *Client) RetryOutbox(ctx context.Context, peer string) (n int, err error) {
	err = c.call(ctx, OpRetryOutbox, RetryOutboxArgs{Peer: peer}, &n)
	return n, err
}

// DropQueued implements node.API.
func (c *Client) DropQueued(ctx context.Context, ids []string) (d node.Dropped, err error) {
	err = c.call(ctx, OpDropQueued, DropQueuedArgs{IDs: ids}, &d)
	return d, err
}

// DeadLetters implements node.API.
func (c *Client) DeadLetters(ctx context.Context) (d []node.DeadLetter, err error) {
	err = c.call(ctx, OpDeadLetters, nil, &d)
	return d, err
}

// RetryDeadLetters implements node.API.
func (c *Client) RetryDeadLetters(ctx context.Context, ids []string, all bool) (n int, err error) {
	err = c.call(ctx, OpRetryDeadLetters, DeadLettersArgs{IDs: ids, All: all}, &n)
	return n, err
}

// DropDeadLetters implements node.API.
func (c *Client) DropDeadLetters(ctx context.Context, ids []string, all bool) (n int, err error) {
	err = c.call(ctx, OpDropDeadLetters, DeadLettersArgs{IDs: ids, All: all}, &n)
	return n, err
}

// PairOffer implements node.API.
func (c *Client) PairOffer(ctx context.Context, opts node.PairOptions) (o node.PairOffer, err error) {
	err = c.call(ctx, OpPairOffer, opts, &o)
	return o, err
}

// PairWait implements node.API.
func (c *Client) PairWait(ctx context.Context, id string) (p node.Paired, err error) {
	err = c.call(ctx, OpPairWait, OfferArgs{ID: id}, &p)
	return p, err
}

// PairCancel implements node.API.
func (c *Client) PairCancel(ctx context.Context, which string) (int, error) {
	var raw json.RawMessage
	if err := c.call(ctx, OpPairCancel, OfferArgs{ID: which}, &raw); err != nil {
		return 0, err
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		// A node of an earlier version answers true, having withdrawn
		// only an offer of that handle, if any.
		return 0, &node.Error{Code: node.CodeUnavailable, Msg: "the node serving this home is older than this command and cannot withdraw offers by line or all at once: restart it"}
	}
	return n, nil
}

// PairAccept implements node.API.
func (c *Client) PairAccept(ctx context.Context, line, name string) (p node.Paired, err error) {
	err = c.call(ctx, OpPairAccept, PairAcceptArgs{Line: line, Name: name}, &p)
	return p, err
}

// Spaces implements node.API.
func (c *Client) Spaces(ctx context.Context) (s []node.SpaceInfo, err error) {
	err = c.call(ctx, OpSpaces, nil, &s)
	return s, err
}

// SpaceEdit implements node.API.
func (c *Client) SpaceEdit(ctx context.Context, e node.SpaceEdit) (s node.SpaceInfo, err error) {
	err = c.call(ctx, OpSpaceEdit, e, &s)
	return s, err
}

// SpaceSend implements node.API.
func (c *Client) SpaceSend(ctx context.Context, m node.SpaceMessage) (s node.SpaceSent, err error) {
	err = c.call(ctx, OpSpaceSend, m, &s)
	return s, err
}

// Proposals implements node.API.
func (c *Client) Proposals(ctx context.Context, q node.ProposalQuery) (p node.ProposalsPage, err error) {
	err = c.call(ctx, OpProposals, q, &p)
	return p, err
}
