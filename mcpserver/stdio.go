package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// maxLine bounds one JSON-RPC message from the client. A message body is
// at most 1 MiB on the wire; JSON escaping can make it several times
// longer.
const maxLine = 8 << 20

// JSON-RPC error codes the front end answers with itself.
const (
	codeInvalidRequest = -32600
	codeInvalidParams  = -32602
)

// lockedWriter serialises whole-message writes to the client: mcp-go writes
// each message with one Write call, and so does the front end. With calls
// set, it leaves out the responses to requests the client cancelled.
type lockedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	calls *calls
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.calls != nil {
		if id, ok := responseID(p); ok && l.calls.finish(id) {
			return len(p), nil
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// calls tracks the client's requests that mcp-go is serving, so that the
// response to one the client cancelled (notifications/cancelled) is not
// sent: receivers of a cancellation "SHOULD NOT send a response", and the
// 2026-07-28 client closes a subscriptions/listen stream by cancelling it
// and reports a response that follows as an error. Only requests still in
// flight can be cancelled, so a late cancellation is ignored and cannot
// suppress the response to a later request that reuses the id. It is safe
// for concurrent use; the zero value is not (use newCalls).
type calls struct {
	mu       sync.Mutex
	inflight map[string]bool // idKey → cancelled
	stream   map[string]bool // of inflight, those drain does not wait for (listen streams)
	waiting  map[string]bool // of inflight, the tool calls that wait
}

func newCalls() *calls {
	return &calls{inflight: map[string]bool{}, stream: map[string]bool{}, waiting: map[string]bool{}}
}

// maxWaiting bounds the tool calls that wait (wait_ms) in flight at once:
// each holds one of mcp-go's toolWorkers (and, attached to a daemon, one
// of its control connections) while it waits, and the others must be
// left for the calls that do not. One more is answered at once with an
// error.
const maxWaiting = toolWorkers / 2

// start records a request passed on to mcp-go; stream marks one drain
// does not wait for: a subscriptions/listen request, which lasts until the
// client cancels it. wait marks a tool call that waits, which counts
// towards maxWaiting (and stops waiting once the input ends: drain waits
// for its answer). It reports false, recording nothing, for a call that
// waits when maxWaiting do.
func (c *calls) start(id json.RawMessage, stream, wait bool) bool {
	k, ok := idKey(id)
	if !ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if wait && !c.waiting[k] && len(c.waiting) >= maxWaiting {
		return false
	}
	delete(c.stream, k)
	delete(c.waiting, k)
	if stream {
		c.stream[k] = true
	}
	if wait {
		c.waiting[k] = true
	}
	c.inflight[k] = false
	return true
}

// cancel marks a request the client cancelled, if it is still in flight.
func (c *calls) cancel(id json.RawMessage) {
	if k, ok := idKey(id); ok {
		c.mu.Lock()
		if _, ok := c.inflight[k]; ok {
			c.inflight[k] = true
		}
		c.mu.Unlock()
	}
}

// idle reports whether no request but streams is in flight.
func (c *calls) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inflight) == len(c.stream)
}

// drainGrace is how long the server, once the client has closed its
// input, goes on serving the requests already in flight so that their
// responses are written (a client that pipes its requests and closes
// stdin still gets its answers); past it, or when ctx ends, what is left
// is cancelled. Calls that wait (wait_ms) stop waiting and answer with
// what there is (waitUnlessInputEnds); listen streams are not waited
// for.
// The MCP client stops the server by closing stdin, then waits for it to
// exit.
const drainGrace = 5 * time.Second

// drain waits until no request is in flight, for at most grace or until
// ctx ends.
func (c *calls) drain(ctx context.Context, grace time.Duration) {
	deadline := time.Now().Add(grace)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !c.idle() && time.Now().Before(deadline) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// finish records that the response to id is being written and reports
// whether it must be left out because the client cancelled the request.
func (c *calls) finish(id json.RawMessage) (cancelled bool) {
	k, ok := idKey(id)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cancelled = c.inflight[k]
	delete(c.inflight, k)
	delete(c.stream, k)
	delete(c.waiting, k)
	return cancelled
}

// idKey returns a JSON-RPC id (a string or a number) in a canonical form:
// mcp-go echoes ids after decoding them, so 1 may come back for 1.0.
func idKey(raw json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	switch v := v.(type) {
	case string:
		return "s" + v, true
	case float64:
		if v == 0 {
			v = 0 // -0, which mcp-go echoes as 0
		}
		return "n" + strconv.FormatFloat(v, 'g', -1, 64), true
	}
	return "", false
}

// exactID reports whether a JSON-RPC id (a string or a number) comes
// back unchanged in value once decoded as a float64, as mcp-go does: a
// string, an integer within ±2^53, a fraction or exponent within a
// float64's range (1.5, 2e3: the client's own value is a float too). It
// is false for larger integers (9007199254740993 would come back as
// 9007199254740992) and numbers out of range.
func exactID(raw json.RawMessage) bool {
	t := string(bytes.TrimSpace(raw))
	switch {
	case len(t) == 0 || t[0] != '-' && (t[0] < '0' || t[0] > '9'):
		return true // not a number: idKey's to judge
	case strings.ContainsAny(t, ".eE"):
		_, err := strconv.ParseFloat(t, 64)
		return err == nil
	}
	n, err := strconv.ParseInt(t, 10, 64)
	return err == nil && n >= -(1<<53) && n <= 1<<53
}

// responseID returns the id of a JSON-RPC response (a message with an id
// and a result or an error); ok is false for anything else. It reads only
// as far as it must: mcp-go writes the id before the result.
func responseID(msg []byte) (id json.RawMessage, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	response := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		switch t {
		case "method":
			return nil, false
		case "id":
			if dec.Decode(&id) != nil {
				return nil, false
			}
		case "result", "error":
			response = true
			if id != nil {
				return id, true
			}
			fallthrough
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil, false
			}
		}
	}
	return id, response && id != nil
}

// front reads the client's messages line by line. Tool calls whose
// arguments are not a JSON object are answered here with the protocol's
// invalid-params error (for the tools known reports registered),
// batches and messages too large with invalid-request; everything else
// is passed on to mcp-go through fwd, and its requests and cancellations
// are recorded in c. When in ends it calls ended (calls that wait stop
// waiting), lets the requests in flight finish (c.drain), then closes
// fwd.
func front(ctx context.Context, in io.Reader, fwd *io.PipeWriter, out io.Writer, c *calls, known func(tool string) bool, ended func()) {
	defer fwd.Close()
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(br)
		if errors.Is(err, errLineTooLong) {
			// line is the start of the message: enough, usually, to
			// answer with its id.
			if _, werr := out.Write(rpcError(partialID(line), codeInvalidRequest, "message too large")); werr != nil {
				return
			}
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if n := len(line); line[n-1] != '\n' {
				// The last line, without its newline: mcp-go reads
				// whole lines only, and would drop it.
				line = append(line, '\n')
			}
			if reply := checkCall(line, known); reply != nil {
				if _, werr := out.Write(reply); werr != nil {
					return
				}
			} else if reply := track(line, c); reply != nil {
				if _, werr := out.Write(reply); werr != nil {
					return
				}
			} else if _, werr := fwd.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			ended()
			c.drain(ctx, drainGrace)
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line including its newline (the last line
// may lack it). A line longer than maxLine is discarded up to its
// newline and reported as errLineTooLong, with the start of it that was
// read (at most maxLine bytes).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return line, errLineTooLong
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

// partialID returns the id of the JSON-RPC request that msg (a message
// cut short) starts, if its members before the cut name one: a string or
// a number. Else nil.
func partialID(msg []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(msg))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil // cut short in this member's value
		}
		if t == "id" {
			// A number is whole only if something follows it: one cut
			// off at the end of msg ("12" of 123456) decodes too.
			cut := len(v) > 0 && v[0] != '"' && dec.InputOffset() >= int64(len(msg))
			if _, ok := idKey(v); ok && !cut {
				return v
			}
			return nil
		}
	}
	return nil
}

// track records a request passed on to mcp-go, or a client's cancellation
// of one. A tool call that waits when maxWaiting do is not passed on: the
// reply returned answers it.
func track(line []byte, c *calls) (reply []byte) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &msg) != nil || msg.Method == "" {
		return nil // not a request or notification (a response, a batch, not JSON)
	}
	if len(msg.ID) > 0 && string(msg.ID) != "null" {
		if !c.start(msg.ID, msg.Method == string(mcp.MethodSubscriptionsListen), waits(msg.Method, msg.Params)) {
			return toolErrorReply(msg.ID, fmt.Sprintf("%s: %d calls of this session are waiting already (wait_ms): call again without wait_ms, or once one has returned or been cancelled", node.CodeUnavailable, maxWaiting))
		}
		return nil
	}
	if msg.Method == string(mcp.MethodNotificationCancelled) {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.Params, &p) == nil && len(p.RequestID) > 0 {
			c.cancel(p.RequestID)
		}
	}
	return nil
}

// waits reports whether a request is a tool call that waits (a positive
// wait_ms): once stdin has closed, nobody is left to want what it waits
// for, so the server does not wait for it (calls.drain).
func waits(method string, params json.RawMessage) bool {
	if method != "tools/call" {
		return false
	}
	// The arguments as the tools read them: by the exact key (a struct
	// would also take "WAIT_MS", and the last of two spellings).
	var p struct {
		Arguments map[string]json.RawMessage `json:"arguments"`
	}
	var ms float64
	return json.Unmarshal(params, &p) == nil && json.Unmarshal(p.Arguments["wait_ms"], &ms) == nil && ms > 0
}

// checkCall returns an invalid-params reply for a tools/call request whose
// arguments are not a JSON object (the request is malformed), an
// invalid-request reply for a batch or a request whose id is neither a
// string nor a number, a resource-not-found reply for a
// resources/subscribe naming another resource than the inbox, else nil. Arguments a tool refuses
// are the tool's to answer, with a tool error (invalidAsToolError). A request declaring a protocol version the server does not
// know is left to mcp-go, which answers it with the supported versions
// (negotiation comes before arguments), and so is a call to a tool known
// does not report (nil: every tool), which mcp-go answers as an unknown
// tool whatever its arguments.
func checkCall(line []byte, known func(tool string) bool) []byte {
	if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '[' && json.Valid(t) {
		// MCP has no batches (since 2025-06-18; this server never took
		// them): the array is valid JSON but not a request.
		return rpcError(nil, codeInvalidRequest, "JSON-RPC batches are not supported: send one message per line")
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			URI       string          `json:"uri"`
			Arguments json.RawMessage `json:"arguments"`
			Meta      struct {
				Version string `json:"io.modelcontextprotocol/protocolVersion"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &msg) != nil || len(msg.ID) == 0 {
		return nil
	}
	if msg.Method != "" && !exactID(msg.ID) {
		// mcp-go keeps a numeric id as a float64: 9007199254740993 would
		// come back as 9007199254740992, matching no request the client
		// sent. The reply here carries the id as it came.
		return rpcError(msg.ID, codeInvalidRequest, "a request's numeric id must be an integer within ±2^53 (9007199254740992) or a number a float64 holds; use a string id")
	}
	if _, ok := idKey(msg.ID); !ok && msg.Method != "" {
		// A request whose id is null, an object, an array or a boolean:
		// MCP takes a string or a number (no null), and mcp-go would take
		// a null id for a notification and leave the client waiting.
		return rpcError(nil, codeInvalidRequest, "a request's id must be a string or a number")
	}
	if msg.Method == string(mcp.MethodResourcesSubscribe) && msg.Params.Meta.Version == "" && msg.Params.URI != "" && msg.Params.URI != InboxURI {
		// mcp-go acknowledges any URI; there is one resource to watch.
		// (A 2026-07-28 request, which names its version, is mcp-go's to
		// answer: the method is gone there.)
		return rpcError(msg.ID, mcp.RESOURCE_NOT_FOUND, fmt.Sprintf("unknown resource %q: the one resource to subscribe to is %s", msg.Params.URI, InboxURI))
	}
	if msg.Method != "tools/call" {
		return nil
	}
	if msg.Params.Name == "" {
		// mcp-go would answer "tool '' not found".
		return rpcError(msg.ID, codeInvalidParams, "tools/call needs params.name, the name of the tool to call (tools/list lists them)")
	}
	if v := msg.Params.Meta.Version; v != "" && !mcp.IsValidProtocolVersion(v) {
		return nil
	}
	if known != nil && !known(msg.Params.Name) {
		return nil
	}
	var args map[string]any
	if len(msg.Params.Arguments) > 0 && string(msg.Params.Arguments) != "null" {
		if err := json.Unmarshal(msg.Params.Arguments, &args); err != nil {
			return rpcError(msg.ID, codeInvalidParams, "arguments must be a JSON object")
		}
	}
	return nil
}

// toolErrorReply is the result of a tool call that failed with text, as
// toolError makes it.
func toolErrorReply(id json.RawMessage, text string) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"result":  mcp.NewToolResultError(text),
	})
	return append(b, '\n')
}

func rpcError(id json.RawMessage, code int, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": code, "message": message},
	})
	return append(b, '\n')
}

// serveFiltered runs mcp-go's stdio server behind the front end.
func (s *Server) serveFiltered(ctx context.Context, in io.Reader, out io.Writer, listen func(context.Context, io.Reader, io.Writer) error) error {
	c := newCalls()
	lw := &lockedWriter{w: out, calls: c}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		front(ctx, in, pw, lw, c, func(tool string) bool { return s.mcp.GetTool(tool) != nil }, s.endInput)
	}()
	err := listen(ctx, pr, lw)
	pr.Close() // stops front if it is still forwarding
	if ctx.Err() == nil {
		<-done // in reached EOF: front is finishing
	}
	// Otherwise front may be blocked reading in; it ends when in does
	// (for meerkatd mcp, when the process exits).
	return err
}
