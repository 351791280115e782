package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
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
// each message with one Write call, and so does the front end.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// front reads the client's messages line by line. Tool calls whose
// arguments do not fit the tool are answered here with the protocol's
// invalid-params error; everything else is passed on to mcp-go through fwd.
// It closes fwd when in ends.
func front(in io.Reader, fwd *io.PipeWriter, out io.Writer) {
	defer fwd.Close()
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 {
			if reply := checkCall(line); reply != nil {
				if _, werr := out.Write(reply); werr != nil {
					return
				}
			} else if _, werr := fwd.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				out.Write(rpcError(nil, codeInvalidRequest, "message too large"))
				continue
			}
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line including its newline; a line longer than
// maxLine is discarded up to its newline and reported as errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

// checkCall returns an invalid-params reply for a tools/call request whose
// arguments its tool would refuse, else nil.
func checkCall(line []byte) []byte {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &msg) != nil || msg.Method != "tools/call" || len(msg.ID) == 0 {
		return nil
	}
	var args map[string]any
	if len(msg.Params.Arguments) > 0 && string(msg.Params.Arguments) != "null" {
		if err := json.Unmarshal(msg.Params.Arguments, &args); err != nil {
			return rpcError(msg.ID, codeInvalidParams, "arguments must be a JSON object")
		}
	}
	if err := checkArgs(msg.Params.Name, args); err != nil {
		return rpcError(msg.ID, codeInvalidParams, err.Error())
	}
	return nil
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
	lw := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		front(in, pw, lw)
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
