package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// Process tests of meerkatd mcp sessions sharing a home: real processes
// driven over stdio by the minimal MCP client below.

const (
	mcpProtocol    = "2025-11-25" // the revision the client speaks
	mcpCallTimeout = 60 * time.Second
	mcpExitTimeout = 15 * time.Second
	// mcpRuns and mcpAttached are what meerkatd mcp logs at info level
	// (cmd/meerkatd/mcp.go, comms/control) when it starts and takes over.
	mcpRuns     = `msg="running the node in this process"`
	mcpAttached = `msg="attached to the node serving the home"`
	mcpTookOver = `msg="took over the home: serving it in this process"`
	mcpWaits    = `msg="the daemon serving the home went away; waiting for it to come back"`
)

// rpcReply is a JSON-RPC response.
type rpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// mcpProc is a running `meerkatd mcp` and a minimal JSON-RPC client of
// it: one request at a time from the test goroutine, notifications
// ignored.
type mcpProc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *testutil.SyncBuffer
	next   int
	mu     sync.Mutex
	calls  map[int]chan rpcReply // by request id
	notes  []rpcNote             // notifications received, in order
	done   chan struct{}         // closed when the process has exited
}

// rpcNote is a JSON-RPC notification.
type rpcNote struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// startMCP starts `meerkatd mcp --home <n's home> --log-level info`. It
// is stopped (stdin closed, then killed after a bound) when the test ends.
func startMCP(t *testing.T, n *testNode, name string) *mcpProc {
	t.Helper()
	cmd := exec.Command(binary(t), "mcp", "--home", n.home, "--log-level", "info")
	cmd.Env = append(baseEnv(), n.env...)
	p := &mcpProc{t: t, name: name, cmd: cmd, stderr: &testutil.SyncBuffer{}, calls: map[int]chan rpcReply{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		p.readLoop(stdout)
	}()
	go func() {
		<-read // Wait closes stdout: read it to the end first
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr.String())
		}
	})
	return p
}

// readLoop hands each response on stdout to the call waiting for it.
func (p *mcpProc) readLoop(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		var m struct {
			ID     *int   `json:"id"`
			Method string `json:"method"`
			rpcReply
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		if m.ID == nil && m.Method != "" {
			var n rpcNote
			json.Unmarshal(sc.Bytes(), &n)
			p.mu.Lock()
			p.notes = append(p.notes, n)
			p.mu.Unlock()
			continue
		}
		if m.ID == nil || m.Method != "" {
			continue // requests from the server
		}
		p.mu.Lock()
		ch := p.calls[*m.ID]
		delete(p.calls, *m.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- m.rpcReply
		}
	}
}

// send writes one JSON-RPC message.
func (p *mcpProc) send(msg map[string]any) {
	p.t.Helper()
	msg["jsonrpc"] = "2.0"
	b, err := json.Marshal(msg)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("%s: writing to stdin: %v", p.name, err)
	}
}

// request sends a request; its response comes on the channel returned.
func (p *mcpProc) request(method string, params any) <-chan rpcReply {
	p.t.Helper()
	p.next++
	id := p.next
	ch := make(chan rpcReply, 1)
	p.mu.Lock()
	p.calls[id] = ch
	p.mu.Unlock()
	p.send(map[string]any{"id": id, "method": method, "params": params})
	return ch
}

// await waits up to mcpCallTimeout for the response to a request.
func (p *mcpProc) await(method string, ch <-chan rpcReply) rpcReply {
	p.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-p.done:
		p.t.Fatalf("%s exited during %s (%v):\n%s", p.name, method, p.cmd.ProcessState, p.stderr.String())
	case <-time.After(mcpCallTimeout):
		p.t.Fatalf("%s: no answer to %s within %v", p.name, method, mcpCallTimeout)
	}
	return rpcReply{}
}

// call sends a request and waits for its response.
func (p *mcpProc) call(method string, params any) rpcReply {
	p.t.Helper()
	return p.await(method, p.request(method, params))
}

// initialize runs the handshake of protocol revision mcpProtocol.
func (p *mcpProc) initialize() {
	p.t.Helper()
	r := p.call("initialize", map[string]any{
		"protocolVersion": mcpProtocol,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "meerkatd-itest", "version": "0"},
	})
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.ProtocolVersion != mcpProtocol {
		p.t.Fatalf("%s: initialize: %s, error %+v", p.name, r.Result, r.Error)
	}
	p.send(map[string]any{"method": "notifications/initialized"})
}

// tool calls a tool, requires it to succeed and decodes its structured
// result into out (if not nil).
func (p *mcpProc) tool(out any, name string, args map[string]any) {
	p.t.Helper()
	p.toolResult(out, name, p.call("tools/call", toolParams(name, args)))
}

// toolParams are the params of a tools/call.
func toolParams(name string, args map[string]any) map[string]any {
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"name": name, "arguments": args}
}

// toolResult requires r, the response to a tools/call of name, to be a
// success and decodes its structured result into out (if not nil).
func (p *mcpProc) toolResult(out any, name string, r rpcReply) {
	p.t.Helper()
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.IsError {
		p.t.Fatalf("%s: tools/call %s: %s, error %+v", p.name, name, r.Result, r.Error)
	}
	if out != nil {
		if err := json.Unmarshal(res.StructuredContent, out); err != nil {
			p.t.Fatalf("%s: tools/call %s: structured content %s: %v", p.name, name, res.StructuredContent, err)
		}
	}
}

// peers calls list_peers and returns the names of the peers.
func (p *mcpProc) peers() []string {
	p.t.Helper()
	var r struct {
		Peers []struct {
			Name string `json:"name"`
		} `json:"peers"`
	}
	p.tool(&r, "list_peers", nil)
	var names []string
	for _, x := range r.Peers {
		names = append(names, x.Name)
	}
	return names
}

// mcpBatch is the receive_messages result.
type mcpBatch struct {
	Messages []struct {
		Seq  uint64 `json:"seq"`
		Body string `json:"body"`
		Peer string `json:"peer"`
	} `json:"messages"`
	Cursor uint64 `json:"cursor"`
	Epoch  string `json:"epoch"`
}

// waitMessage calls receive_messages after cursor, waiting, until a
// message with body shows, and returns the batch it came in.
func (p *mcpProc) waitMessage(after uint64, body string) mcpBatch {
	p.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		var b mcpBatch
		p.tool(&b, "receive_messages", map[string]any{"after": after, "wait_ms": 2000})
		for _, m := range b.Messages {
			if m.Body == body {
				return b
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: %q not received within %v (last batch %+v)", p.name, body, pollTimeout, b)
		}
	}
}

// waitArrival waits for the arrival event (a notifications/message log
// event, sent to clients of 2025-11-25) of the envelope with id.
func (p *mcpProc) waitArrival(id string) {
	p.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		p.mu.Lock()
		notes := p.notes
		p.mu.Unlock()
		for _, n := range notes {
			var params struct {
				Data struct {
					Event string `json:"event"`
					ID    string `json:"id"`
				} `json:"data"`
			}
			if n.Method == "notifications/message" && json.Unmarshal(n.Params, &params) == nil &&
				params.Data.Event == "arrival" && params.Data.ID == id {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no arrival event for %s within %v (%d notifications)", p.name, id, pollTimeout, len(notes))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop closes stdin, which ends a meerkatd mcp cleanly, and waits for it
// (SIGKILL after a bound). It reports the exit status; -1 if killed.
func (p *mcpProc) stop() int {
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(mcpExitTimeout):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("%s did not exit within %v of its stdin closing; killed", p.name, mcpExitTimeout)
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill ends the process with SIGKILL: it leaves its sockets behind.
func (p *mcpProc) kill() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(mcpExitTimeout):
		p.t.Fatalf("%s did not die within %v of SIGKILL", p.name, mcpExitTimeout)
	}
}

// logs reports whether p's stderr holds line.
func (p *mcpProc) logs(line string) bool { return strings.Contains(p.stderr.String(), line) }

// waitLog waits for line in p's stderr: it is read from its own pipe, so
// it may come in after a response the process wrote later on stdout.
func (p *mcpProc) waitLog(line string) {
	p.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !p.logs(line) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not log %s:\n%s", p.name, line, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two meerkatd mcp started at the same instant on one home end with one
// node: one runs it, the other attaches to it. When the one running it
// goes away (its client closes it, or it is killed and leaves its
// sockets behind), the other keeps answering and takes the home over:
// messages still reach the home and are read through it.
func TestMCPSessionsShareHome(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"closed", "killed"} {
		t.Run(end, func(t *testing.T) {
			alice, bob := twoNodes(t, "uds")
			bob.start()
			procs := []*mcpProc{startMCP(t, alice, "mcp-1"), startMCP(t, alice, "mcp-2")}
			for _, p := range procs {
				p.initialize() // answered once it has attached or started its node
			}
			for _, p := range procs {
				waitUntil(t, p.name+" to say whether it runs the node", func() bool { return p.logs(mcpRuns) || p.logs(mcpAttached) })
			}
			var server, other *mcpProc
			switch {
			case procs[0].logs(mcpRuns) && procs[1].logs(mcpAttached):
				server, other = procs[0], procs[1]
			case procs[1].logs(mcpRuns) && procs[0].logs(mcpAttached):
				server, other = procs[1], procs[0]
			default:
				t.Fatalf("want one process running the node and one attached:\nmcp-1: %s\nmcp-2: %s", procs[0].stderr, procs[1].stderr)
			}
			if s := alice.status(); !s.Daemon {
				t.Fatalf("status with the node in %s: %s", server.name, jsonText(s))
			}
			for _, p := range procs {
				if got := p.peers(); len(got) != 1 || got[0] != "bob" {
					t.Fatalf("%s list_peers: %v", p.name, got)
				}
			}
			bob.ok("send", "message", "alice", "to the first node")
			first := other.waitMessage(0, "to the first node")

			if end == "killed" {
				server.kill()
			} else if code := server.stop(); code != 0 {
				t.Fatalf("%s exited %d after its stdin closed", server.name, code)
			}
			if got := other.peers(); len(got) != 1 || got[0] != "bob" {
				t.Fatalf("%s list_peers after %s ended: %v", other.name, server.name, got)
			}
			other.waitLog(mcpTookOver)
			if s := alice.status(); !s.Daemon {
				t.Fatalf("status after the take-over: %s", jsonText(s))
			}
			var sent struct {
				Delivery string `json:"delivery"`
			}
			other.tool(&sent, "send_message", map[string]any{"peer": "bob", "body": "from the new node"})
			if sent.Delivery != "acked" {
				t.Fatalf("send_message after the take-over: %+v", sent)
			}
			bob.ok("send", "message", "alice", "to the new node")
			other.waitMessage(first.Cursor, "to the new node")
		})
	}
}

// A meerkatd mcp attached to the home's daemon survives a restart of the
// daemon: a call made while the daemon is down waits for it rather than
// take the home (the restarted daemon gets its home back), and its calls
// reach the new daemon. With the SQLite inbox the epoch stays and the
// cursor from before the restart stays valid; with a memory inbox the
// epoch changes, the new inbox is read from after 0, and the arrival
// watcher still reports the first item of the new inbox, whose seq is
// below its old cursor.
func TestMCPSurvivesDaemonRestart(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "memory"} {
		t.Run(store, func(t *testing.T) { testMCPSurvivesDaemonRestart(t, store) })
	}
}

func testMCPSurvivesDaemonRestart(t *testing.T, store string) {
	alice, bob := twoNodes(t, "uds")
	alice.env = append(alice.env, "MEERKAT_STORE_MODE="+store)
	alice.start()
	bob.start()
	p := startMCP(t, alice, "mcp")
	p.initialize()
	p.waitLog(mcpAttached)
	bob.ok("send", "message", "alice", "before the restart")
	bob.ok("send", "message", "alice", "before the restart, again")
	before := p.waitMessage(0, "before the restart, again")
	if before.Epoch == "" || before.Cursor != 2 {
		t.Fatalf("receive_messages before the restart: %+v", before)
	}

	alice.stop()
	inGap := p.request("tools/call", toolParams("list_peers", nil))
	p.waitLog(mcpWaits) // the session knows its node went away
	alice.start()
	var peers struct {
		Peers []struct {
			Name string `json:"name"`
		} `json:"peers"`
	}
	p.toolResult(&peers, "list_peers", p.await("tools/call", inGap))
	if len(peers.Peers) != 1 || peers.Peers[0].Name != "bob" {
		t.Fatalf("list_peers called while the daemon restarted: %+v", peers)
	}
	if got := p.peers(); len(got) != 1 || got[0] != "bob" {
		t.Fatalf("list_peers after the restart: %v", got)
	}
	var sent cliSend
	bob.okJSON(&sent, "send", "message", "alice", "after the restart", "--json")
	p.waitArrival(sent.ID)
	var b mcpBatch
	if store == "sqlite" {
		p.tool(&b, "receive_messages", map[string]any{"after": before.Cursor})
		if b.Epoch != before.Epoch || len(b.Messages) != 1 || b.Messages[0].Body != "after the restart" || b.Messages[0].Seq != 3 {
			t.Fatalf("SQLite inbox: read after the cursor from before the restart: %+v (epoch before %s)", b, before.Epoch)
		}
	} else {
		// The old cursor (2) is beyond the new inbox's one item: refused,
		// not read as "nothing new".
		r := p.call("tools/call", toolParams("receive_messages", map[string]any{"after": before.Cursor}))
		if !strings.Contains(string(r.Result), `"isError":true`) || !strings.Contains(string(r.Result), "bad_argument: after 2:") {
			t.Fatalf("memory inbox: read after the cursor from before the restart: %s, %+v", r.Result, r.Error)
		}
		p.tool(&b, "receive_messages", map[string]any{"after": 0})
		if len(b.Messages) != 1 || b.Messages[0].Body != "after the restart" || b.Messages[0].Seq != 1 {
			t.Fatalf("memory inbox: read from the start after the epoch changed: %+v", b)
		}
	}
	var cli struct {
		Epoch string `json:"epoch"`
	}
	alice.okJSON(&cli, "inbox", "--json")
	if cli.Epoch != b.Epoch {
		t.Fatalf("inbox --json says epoch %q, receive_messages %q", cli.Epoch, b.Epoch)
	}
	if alice.d.exited() || p.logs(mcpTookOver) {
		t.Fatalf("meerkatd mcp took the home over from the restarting daemon:\n%s\ndaemon log:\n%s", p.stderr, alice.d.log())
	}
}

// meerkatd mcp reads [mcp] pairing from the home's configuration (the
// file, or MEERKAT_MCP_PAIRING): "on", the default, lists the pairing
// tools; "off" leaves them out and refuses calls to them.
func TestMCPPairingSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		setup   func(n *testNode)
		pairing bool
	}{
		{"default", func(*testNode) {}, true},
		{"file off", func(n *testNode) {
			path := filepath.Join(n.home, "meerkat.toml")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			if strings.Contains(text, `pairing = "on"`) { // init wrote the default
				text = strings.Replace(text, `pairing = "on"`, `pairing = "off"`, 1)
			} else {
				text += "\n[mcp]\npairing = \"off\"\n"
			}
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"env off", func(n *testNode) { n.env = append(n.env, "MEERKAT_MCP_PAIRING=off") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "alice")
			tc.setup(n)
			p := startMCP(t, n, "mcp")
			p.initialize()
			var list struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			r := p.call("tools/list", map[string]any{})
			if r.Error != nil || json.Unmarshal(r.Result, &list) != nil || len(list.Tools) == 0 {
				t.Fatalf("tools/list: %s %+v", r.Result, r.Error)
			}
			listed := slices.ContainsFunc(list.Tools, func(x struct {
				Name string `json:"name"`
			}) bool {
				return x.Name == "pair_offer"
			})
			if listed != tc.pairing {
				t.Fatalf("pair_offer listed: %v, want %v", listed, tc.pairing)
			}
			if !tc.pairing {
				r := p.call("tools/call", toolParams("pair_offer", nil))
				var res struct {
					IsError bool `json:"isError"`
				}
				json.Unmarshal(r.Result, &res)
				if r.Error == nil && !res.IsError {
					t.Fatalf("pair_offer with pairing off: %s", r.Result)
				}
			}
		})
	}
}
