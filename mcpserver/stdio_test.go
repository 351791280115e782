package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// wire is a client speaking raw JSON-RPC lines to ServeStdio.
type wire struct {
	t      *testing.T
	server *Server
	in     *io.PipeWriter
	lines  chan string
	seen   []map[string]any // every message read so far, in order
	done   chan error
	closed bool // close was called
}

// startStdio serves node over pipes and returns the client end. The
// server's arrival watcher is running (and has started long-polling if
// node is a *fakeNode) when it returns.
func startStdio(t *testing.T, api node.API) *wire {
	t.Helper()
	return startStdioWith(t, api, Options{})
}

// startStdioWith is startStdio with a server built with opts.
func startStdioWith(t *testing.T, api node.API, opts Options) *wire {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := New(api, opts)
	w := &wire{t: t, server: s, in: inW, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		w.done <- s.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	// mcp-go's stdio session is process-wide: a server left running would
	// compete with the next test's for its notifications.
	t.Cleanup(func() {
		if !w.closed {
			w.shutdown()
		}
	})
	if f, ok := api.(*fakeNode); ok {
		f.waitWatcher(t, 0)
	}
	return w
}

// waitFor polls ok every millisecond for up to d.
func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

func (w *wire) send(v string) {
	w.t.Helper()
	if _, err := io.WriteString(w.in, v+"\n"); err != nil {
		w.t.Fatal(err)
	}
}

// next returns the next message from the server.
func (w *wire) next() map[string]any {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.t.Fatal("stdout closed")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["jsonrpc"] != "2.0" {
			w.t.Fatalf("stdout line is not JSON-RPC: %q", l)
		}
		w.seen = append(w.seen, m)
		return m
	case <-time.After(20 * time.Second):
		w.t.Fatal("no message from the server")
	}
	return nil
}

// until reads messages until one satisfies ok, and returns it.
func (w *wire) until(ok func(map[string]any) bool) map[string]any {
	w.t.Helper()
	for {
		if m := w.next(); ok(m) {
			return m
		}
	}
}

// reply reads until the response to request id.
func (w *wire) reply(id any) map[string]any {
	w.t.Helper()
	return w.until(func(m map[string]any) bool { return m["method"] == nil && m["id"] == id })
}

// close closes stdin, reads everything the server still writes, and checks
// that ServeStdio returned nil.
func (w *wire) close() {
	w.t.Helper()
	w.closed = true
	if err := w.shutdown(); err != nil {
		w.t.Fatal(err)
	}
}

// shutdown closes stdin, records what the server still writes, and waits
// for ServeStdio to return.
func (w *wire) shutdown() error {
	w.in.Close()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-w.lines:
			if ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					return fmt.Errorf("stdout line is not JSON: %q", l)
				}
				w.seen = append(w.seen, m)
				continue
			}
			select {
			case err := <-w.done:
				if err != nil {
					return fmt.Errorf("ServeStdio after stdin EOF: %w", err)
				}
				return nil
			case <-timeout:
				return errors.New("ServeStdio did not return after stdin closed")
			}
		case <-timeout:
			return errors.New("stdout did not close after stdin closed")
		}
	}
}

// Over stdio: malformed tool calls get the protocol's invalid-params error,
// good ones a result, stdout carries only JSON-RPC messages, and the server
// returns when stdin closes.
func TestStdio(t *testing.T) {
	f := newFakeNode()
	w := startStdio(t, f)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if m := w.next(); m["id"] != float64(1) || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"body":"no peer"}}}`)
	// Arguments the tool refuses: a tool error the model sees.
	m := w.next()
	if res, _ := m["result"].(map[string]any); m["id"] != float64(2) || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "bad_argument: missing required argument \"peer\"") {
		t.Fatalf("malformed call: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"bob","body":"hi"}}}`)
	m = w.reply(float64(3))
	res, _ := m["result"].(map[string]any)
	if sc, _ := res["structuredContent"].(map[string]any); sc["id"] != "m-1" {
		t.Fatalf("good call: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"send_message","arguments":"peer=bob"}}`)
	if m = w.next(); m["id"] != float64(4) || m["error"].(map[string]any)["code"] != float64(codeInvalidParams) {
		t.Fatalf("non-object arguments: %v", m)
	}
	// Params reach the node exactly as sent: no float64 round trip.
	w.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"send_request","arguments":{"peer":"bob","intent":"x","params":{"big":9007199254740993,"f":1.0}}}}`)
	w.reply(float64(5))
	f.mu.Lock()
	got := string(f.params[len(f.params)-1])
	f.mu.Unlock()
	if got != `{"big":9007199254740993,"f":1.0}` {
		t.Fatalf("params reached the node as %s", got)
	}
	w.close()
}

// A request the client cancelled gets no response; a cancellation that
// comes after the response changes nothing, not even for a later request
// with the same id.
func TestStdioCancelledRequest(t *testing.T) {
	f := newFakeNode()
	w := startStdio(t, f)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.reply(float64(1))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"receive_messages","arguments":{"wait_ms":20000}}}`)
	w.send(`{"jsonrpc":"2.0","id":"s","method":"tools/list"}`)
	w.reply("s") // the wait is under way
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}`)
	select {
	case <-f.cancelled: // the handler returned
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call's wait did not end")
	}
	// Late: 8 was answered before its cancellation arrived.
	w.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"list_peers","arguments":{}}}`)
	w.reply(float64(8))
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}`)
	w.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"list_peers","arguments":{}}}`)
	if m := w.reply(float64(8)); m["result"] == nil {
		t.Fatalf("a request reusing a cancelled id: %v", m)
	}
	w.close()
	for _, m := range w.seen {
		if m["id"] == float64(7) {
			t.Fatalf("response to a cancelled request: %v", m)
		}
	}
}

// A client that pipes its requests and closes stdin at once gets an
// answer to its calls that wait too: one with something to return
// returns it, one with nothing stops waiting and says so (rather than
// being cancelled after the drain's grace).
func TestStdioWaitsAnswerAfterStdinCloses(t *testing.T) {
	f := newFakeNode()
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "hi"})
	w := startStdio(t, f)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"receive_messages","arguments":{"wait_ms":20000,"limit":1}}}`)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"receive_messages","arguments":{"wait_ms":20000,"after":5}}}`)
	w.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"wait_task","arguments":{"task_id":"t1","wait_ms":20000}}}`)
	w.close()
	got := map[float64]map[string]any{}
	for _, m := range w.seen {
		if id, ok := m["id"].(float64); ok {
			got[id] = m
		}
	}
	for id, want := range map[float64]int{2: 1, 3: 0} {
		res, _ := got[id]["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		msgs, ok := sc["messages"].([]any)
		if !ok || len(msgs) != want || res["isError"] == true {
			t.Errorf("receive_messages %v after stdin closed: %v, want %d messages", id, got[id], want)
		}
	}
	if res, _ := got[4]["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Errorf("wait_task after stdin closed: %v", got[4])
	}
}

// Tool calls that wait take at most half of the workers: more than that
// many are each answered at once with an error, and a call that does not
// wait is answered while they wait. A wait that ends frees its place.
func TestStdioWaitsLeaveWorkersForOthers(t *testing.T) {
	f := newFakeNode()
	w := startStdio(t, f)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.reply(float64(1))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	const waits = toolWorkers + 8 // enough to take every worker without the bound
	for i := range waits {
		w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"receive_messages","arguments":{"wait_ms":20000}}}`, 100+i))
	}
	refused := 0
	for range waits - maxWaiting {
		m := w.next()
		res, _ := m["result"].(map[string]any)
		id, _ := m["id"].(float64)
		if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "unavailable: 32 calls of this session are waiting already") || id < 100+maxWaiting {
			t.Fatalf("wait %v beyond %d: %v", m["id"], maxWaiting, m)
		}
		refused++
	}
	w.send(`{"jsonrpc":"2.0","id":"peers","method":"tools/call","params":{"name":"list_peers","arguments":{}}}`)
	if m := w.reply("peers"); m["result"] == nil {
		t.Fatalf("list_peers while %d calls wait: %v", maxWaiting, m)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":100}}`)
	select {
	case <-f.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled wait did not end")
	}
	waitFor(t, 10*time.Second, func() bool { // its response is left out, its place freed
		w.send(`{"jsonrpc":"2.0","id":"again","method":"tools/call","params":{"name":"receive_messages","arguments":{"wait_ms":1}}}`)
		m := w.reply("again")
		res, _ := m["result"].(map[string]any)
		return res["isError"] != true
	})
	for i := range maxWaiting {
		w.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, 100+i))
	}
	w.close()
}

func TestResponseID(t *testing.T) {
	for _, tc := range []struct {
		msg, id string // id "": not a response
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, "1"},
		{`{"jsonrpc":"2.0","id":"listen:0","result":{"_meta":{"x":1}}}`, `"listen:0"`},
		{`{"error":{"code":-32602,"message":"x"},"id":2,"jsonrpc":"2.0"}`, "2"},
		{`{"result":{"id":5},"jsonrpc":"2.0","id":3}`, "3"},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"id":4}}`, ""},
		{`{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage"}`, ""},
		{`{"jsonrpc":"2.0","id":6}`, ""},
		{`{"jsonrpc":"2.0","result":{}}`, ""},
		{`[{"jsonrpc":"2.0","id":1,"result":{}}]`, ""},
		{`{"jsonrpc":"2.0","result":{"a":`, ""},
		{`{"jsonrpc":"2.0","id":1,"result":`, "1"}, // read no further than needed
		{`not json`, ""},
	} {
		id, ok := responseID([]byte(tc.msg))
		if ok != (tc.id != "") || (ok && string(id) != tc.id) {
			t.Errorf("responseID(%s) = %s, %v; want %q", tc.msg, id, ok, tc.id)
		}
	}
}

func TestIDKey(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		equal bool
	}{
		{`1`, `1.0`, true},
		{`1`, `"1"`, false},
		{`"a"`, `"a"`, true},
		{`12345678901`, `1.2345678901e10`, true},
	} {
		ka, okA := idKey(json.RawMessage(tc.a))
		kb, okB := idKey(json.RawMessage(tc.b))
		if !okA || !okB || (ka == kb) != tc.equal {
			t.Errorf("idKey(%s) = %q, idKey(%s) = %q; equal want %v", tc.a, ka, tc.b, kb, tc.equal)
		}
	}
	for _, bad := range []string{`null`, `{}`, `[1]`, `true`, ``} {
		if k, ok := idKey(json.RawMessage(bad)); ok {
			t.Errorf("idKey(%s) = %q, want no key", bad, k)
		}
	}
}

func TestCheckCall(t *testing.T) {
	tests := []struct {
		line string
		want int // 0: passed on to mcp-go
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, 0},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"send_message","arguments":{}}}`, 0}, // a notification: no reply possible
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"b","body":"x"}}}`, 0},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_message","arguments":{"body":"x"}}}`, 0}, // the tool's to refuse, with a tool error
		{`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"list_peers","arguments":[1]}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"receive_messages","arguments":{"kinds":["x"]}}}`, 0},                                      // the tool's to refuse, with a tool error
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"b","body":"x","ttl_seconds":-1}}}`, 0},                 // the tool's to refuse, with a tool error
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"b","body":"x","reliable":false,"ttl_seconds":5}}}`, 0}, // the tool's to refuse, with a tool error
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_request","arguments":{"peer":"b","intent":"x","reliable":"no"}}}`, 0},                // the tool's to refuse, with a tool error
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"retry_dead_letters","arguments":{}}}`, 0},                                                 // the tool's to refuse, with a tool error
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`, 0},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pair_accept","arguments":{}}}`, 0}, // not registered: mcp-go's unknown tool
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pair_offer","arguments":{}}}`, 0},
		{`not json`, 0},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call"}`, codeInvalidParams},                                     // no params: no tool named
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{}}}`, codeInvalidParams},           // no name
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"","arguments":{}}}`, codeInvalidParams}, // an empty one
		{`{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, codeInvalidRequest},                                 // MCP: no null id
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":[1],"method":"ping"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"list_peers","arguments":{}}}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":"x","method":"ping"}`, 0},
		{`{"jsonrpc":"2.0","id":-7.5,"method":"ping"}`, 0},
		{`{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, 0},  // 2^53: a float64 holds it
		{`{"jsonrpc":"2.0","id":-9007199254740992,"method":"ping"}`, 0}, // and its negative
		{`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":-9007199254740993,"method":"tools/list"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":12345678901234567890123,"method":"ping"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":2e3,"method":"ping"}`, 0},
		{`{"jsonrpc":"2.0","id":9007199254740993,"result":{}}`, 0},               // a response, never answered
		{`{"jsonrpc":"2.0","id":{"a":1},"result":{}}`, 0},                        // a response, never answered
		{`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`, codeInvalidRequest}, // a batch
		{` [] ` + "\n", codeInvalidRequest},
		{`[{"jsonrpc":"2.0",`, 0}, // not JSON: mcp-go's parse error
		{`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"meerkat://inbox"}}`, 0},
		{`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"meerkat://outbox"}}`, mcp.RESOURCE_NOT_FOUND},
		{`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"file:///etc/passwd"}}`, mcp.RESOURCE_NOT_FOUND},
		{`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{}}`, 0},                                                                               // mcp-go: uri is required
		{`{"jsonrpc":"2.0","method":"resources/subscribe","params":{"uri":"meerkat://outbox"}}`, 0},                                                              // a notification: no reply possible
		{`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"x://y","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, 0}, // mcp-go: gone in that revision
	}
	registered := func(tool string) bool { return tool != "pair_accept" && tool != "pair_offer" && tool != "no_such_tool" }
	for _, tc := range tests {
		reply := checkCall([]byte(tc.line), registered)
		if tc.want == 0 {
			if reply != nil {
				t.Errorf("%s: unexpected reply %s", tc.line, reply)
			}
			continue
		}
		var m struct {
			Error struct{ Code int } `json:"error"`
		}
		if err := json.Unmarshal(reply, &m); err != nil || m.Error.Code != tc.want {
			t.Errorf("%s: reply %s, want code %d", tc.line, reply, tc.want)
		}
	}
}

func FuzzCheckCall(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_message","arguments":{"body":"x"}}}`))
	f.Add([]byte(`{"id":[],"method":"tools/call","params":{"name":"ack_messages","arguments":{"up_to":-1}}}`))
	f.Add([]byte(`{"id":{},"method":"resources/subscribe","params":{"uri":"meerkat://\u0000"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		reply := checkCall(line, nil)
		if reply == nil {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(reply, &m); err != nil || m["jsonrpc"] != "2.0" || m["error"] == nil {
			t.Fatalf("reply %q is not a JSON-RPC error", reply)
		}
	})
}

// A client that writes its requests and closes stdin at once still gets
// the answers to those in flight: the server finishes them before it
// returns (for at most drainGrace).
func TestStdioAnswersAfterStdinCloses(t *testing.T) {
	w := startStdio(t, newFakeNode())
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A call that takes a moment (the fake node's send waits), not one
	// that waits for something to arrive: those are not waited for.
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"slow","body":"hi"}}}`)
	w.close()
	for _, m := range w.seen {
		if m["id"] != float64(2) {
			continue
		}
		res, _ := m["result"].(map[string]any)
		if res == nil || res["isError"] == true {
			t.Fatalf("the call in flight when stdin closed was answered with %v", m)
		}
		return
	}
	t.Fatalf("no answer to the call in flight when stdin closed; got %v", w.seen)
}

// Which requests the server does not wait for once stdin has closed:
// tool calls that wait for something to arrive.
func TestWaits(t *testing.T) {
	for _, tc := range []struct {
		method, params string
		want           bool
	}{
		{"tools/call", `{"name":"receive_messages","arguments":{"wait_ms":300}}`, true},
		{"tools/call", `{"name":"wait_task","arguments":{"task_id":"t","wait_ms":1}}`, true},
		{"tools/call", `{"name":"receive_messages","arguments":{"wait_ms":0}}`, false},
		{"tools/call", `{"name":"receive_messages","arguments":{}}`, false},
		{"tools/call", `{"name":"send_message","arguments":{"peer":"bob","body":"hi"}}`, false},
		{"tools/call", `{"name":"receive_messages","arguments":{"wait_ms":"300"}}`, false}, // refused by its tool anyway
		{"tools/call", `not json`, false},
		// The exact key, as the tool reads it: another spelling is not it.
		{"tools/call", `{"name":"receive_messages","arguments":{"wait_ms":20000,"WAIT_MS":0}}`, true},
		{"tools/call", `{"name":"receive_messages","arguments":{"Wait_Ms":20000}}`, false},
		{"tools/call", `{"name":"receive_messages","arguments":{"wait_ms":0,"wait_ms":300}}`, true},
		{"resources/read", `{"uri":"meerkat://inbox","arguments":{"wait_ms":5}}`, false},
	} {
		if got := waits(tc.method, json.RawMessage(tc.params)); got != tc.want {
			t.Errorf("waits(%s, %s) = %v, want %v", tc.method, tc.params, got, tc.want)
		}
	}
}

// A last request whose line has no newline is answered (mcp-go reads
// whole lines only), at once: the server does not wait out drainGrace
// for a call it never passed on.
func TestStdioLastLineWithoutNewline(t *testing.T) {
	w := startStdio(t, newFakeNode())
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if _, err := io.WriteString(w.in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_peers","arguments":{}}}`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w.close()
	if d := time.Since(start); d >= drainGrace {
		t.Errorf("the server took %v to exit: it waited for an answer it never gave", d)
	}
	for _, m := range w.seen {
		if m["id"] == float64(2) && m["result"] != nil {
			return
		}
	}
	t.Fatalf("no answer to the last line, sent without a newline; got %v", w.seen)
}

// A message longer than maxLine is answered with invalid-request, with
// its id when the start of the message names one, and the next line is
// served as usual.
func TestStdioOversizedLineKeepsID(t *testing.T) {
	w := startStdio(t, newFakeNode())
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.reply(float64(1))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":"big-1","method":"tools/call","params":{"name":"send_message","arguments":{"peer":"bob","body":"` + strings.Repeat("x", maxLine) + `"}}}`)
	m := w.next()
	errObj, _ := m["error"].(map[string]any)
	if m["id"] != "big-1" || errObj["code"] != float64(codeInvalidRequest) {
		t.Fatalf("oversized request: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_peers","arguments":{}}}`)
	if m := w.reply(float64(3)); m["result"] == nil {
		t.Fatalf("after an oversized line: %v", m)
	}
	w.close()
}

func TestPartialID(t *testing.T) {
	for _, tc := range []struct {
		msg, id string // id "": none found
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"body":"xxx`, "7"},
		{`{"id":"a-1","params":{"body":"xx`, `"a-1"`},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"body":"xxx`, ""}, // the id comes after the cut
		{`{"jsonrpc":"2.0","params":{"x":1},"id":2.5,"method":"tools/c`, "2.5"},
		{`{"id":null,"method":"x","params":"xx`, ""},
		{`{"id":{"a":1},"params":"xx`, ""},
		{`{"id":"cut short`, ""},
		{`{"id":123456`, ""}, // maybe cut inside the number
		{`{"id":12`, ""},
		{`{"id":12 `, "12"},
		{`{"id":"a-1"`, `"a-1"`}, // a string is whole with its closing quote
		{`[{"id":1,`, ""},
		{`not json`, ""},
		{``, ""},
	} {
		if got := partialID([]byte(tc.msg)); string(got) != tc.id {
			t.Errorf("partialID(%s) = %s, want %q", tc.msg, got, tc.id)
		}
	}
}

// With pairing off, a call to a pairing tool is a call to an unknown
// tool, whatever its arguments: not a missing argument of a tool that is
// not there. A batch is an invalid request.
func TestStdioUnregisteredToolAndBatch(t *testing.T) {
	w := startStdioWith(t, newFakeNode(), Options{NoPairing: true})
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.reply(float64(1))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pair_accept","arguments":{}}}`)
	m := w.reply(float64(2))
	errObj, _ := m["error"].(map[string]any)
	if msg, _ := errObj["message"].(string); !strings.Contains(msg, "not found") || strings.Contains(msg, "code_line") {
		t.Fatalf("pair_accept with pairing off: %v", m)
	}
	w.send(`[{"jsonrpc":"2.0","id":3,"method":"tools/list"}]`)
	m = w.next()
	if errObj, _ := m["error"].(map[string]any); m["id"] != nil || errObj["code"] != float64(codeInvalidRequest) {
		t.Fatalf("batch: %v", m)
	}
	w.close()
}

// exactID holds an id exactly when its value survives a float64 (how
// mcp-go decodes ids): checked against arbitrary precision.
func TestExactID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{`"x"`, true}, {`""`, true}, {`0`, true}, {`-0`, true}, {`42`, true},
		{`9007199254740992`, true}, {`-9007199254740992`, true},
		{`9007199254740993`, false}, {`-9007199254740993`, false}, {`18446744073709551616`, false},
		{`1.5`, true}, {`-7.25e2`, true}, {`1E308`, true}, {`1e309`, false}, {`-1e400`, false},
	} {
		if got := exactID(json.RawMessage(tc.id)); got != tc.want {
			t.Errorf("exactID(%s) = %v, want %v", tc.id, got, tc.want)
		}
	}
	// Out of a float64's range: refused with the id as sent.
	if reply := checkCall([]byte(`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`), nil); !bytes.Contains(reply, []byte(`"id":1e400`)) {
		t.Fatalf("reply %s does not carry the request's id", reply)
	}
	// -0 is the request mcp-go answers as 0.
	zero, _ := idKey(json.RawMessage(`0`))
	if k, _ := idKey(json.RawMessage(`-0`)); k != zero {
		t.Fatalf("idKey(-0) = %q, not idKey(0) = %q", k, zero)
	}
	// The refusal names the id as it came, not as a float64 would.
	reply := checkCall([]byte(`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`), nil)
	if !bytes.Contains(reply, []byte(`"id":9007199254740993`)) {
		t.Fatalf("reply %s does not carry the request's id", reply)
	}
}

func FuzzExactID(f *testing.F) {
	for _, s := range []string{`1`, `9007199254740993`, `-9007199254740992`, `1.5e3`, `"s"`, `1e400`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		var v any
		dec := json.NewDecoder(strings.NewReader(id))
		dec.UseNumber()
		if !json.Valid([]byte(id)) || dec.Decode(&v) != nil {
			return
		}
		num, ok := v.(json.Number)
		if !ok {
			if _, isString := v.(string); isString && !exactID(json.RawMessage(id)) {
				t.Fatalf("string id %s refused", id)
			}
			return
		}
		exact := exactID(json.RawMessage(id))
		if strings.ContainsAny(num.String(), ".eE") {
			_, err := strconv.ParseFloat(num.String(), 64)
			if exact != (err == nil) {
				t.Fatalf("exactID(%s) = %v, ParseFloat error %v", id, exact, err)
			}
			return
		}
		b, ok := new(big.Int).SetString(num.String(), 10)
		if !ok {
			t.Fatalf("integer literal %s does not parse", id)
		}
		// Exact when a float64 holds the value and the integers around
		// it (|n| <= 2^53): beyond, neighbours collapse into one float.
		limit := new(big.Int).Lsh(big.NewInt(1), 53)
		want := new(big.Int).Abs(b).Cmp(limit) <= 0
		if exact != want {
			t.Fatalf("exactID(%s) = %v, want %v", id, exact, want)
		}
	})
}
