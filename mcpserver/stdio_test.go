package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// Over stdio: malformed tool calls get the protocol's invalid-params error,
// good ones a result, stdout carries only JSON-RPC messages, and the server
// returns when stdin closes.
func TestStdio(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	f := newFakeNode()
	s := New(f, Options{})
	done := make(chan error, 1)
	go func() {
		done <- s.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(v string) {
		if _, err := io.WriteString(inW, v+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stdout closed")
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil || m["jsonrpc"] != "2.0" {
				t.Fatalf("stdout line is not JSON-RPC: %q", l)
			}
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no reply")
		}
		return nil
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if m := next(); m["id"] != float64(1) || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"body":"no peer"}}}`)
	m := next()
	errObj, _ := m["error"].(map[string]any)
	if m["id"] != float64(2) || errObj["code"] != float64(codeInvalidParams) || !strings.Contains(errObj["message"].(string), "peer") {
		t.Fatalf("malformed call: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"bob","body":"hi"}}}`)
	// The arrival watcher may interleave notifications; find reply 3.
	for {
		m = next()
		if m["id"] == float64(3) {
			break
		}
	}
	res, _ := m["result"].(map[string]any)
	if sc, _ := res["structuredContent"].(map[string]any); sc["message_id"] != "m-1" {
		t.Fatalf("good call: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"send_message","arguments":"peer=bob"}}`)
	if m = next(); m["id"] != float64(4) || m["error"].(map[string]any)["code"] != float64(codeInvalidParams) {
		t.Fatalf("non-object arguments: %v", m)
	}
	// Params reach the node exactly as sent: no float64 round trip.
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"send_request","arguments":{"peer":"bob","intent":"x","params":{"big":9007199254740993,"f":1.0}}}}`)
	for {
		if m = next(); m["id"] == float64(5) {
			break
		}
	}
	f.mu.Lock()
	got := string(f.params[len(f.params)-1])
	f.mu.Unlock()
	if got != `{"big":9007199254740993,"f":1.0}` {
		t.Fatalf("params reached the node as %s", got)
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeStdio after stdin EOF: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ServeStdio did not return after stdin closed")
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
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_message","arguments":{"body":"x"}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"list_peers","arguments":[1]}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"receive_messages","arguments":{"kinds":["x"]}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"b","body":"x","ttl_seconds":-1}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"peer":"b","body":"x","reliable":false,"ttl_seconds":5}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_request","arguments":{"peer":"b","intent":"x","reliable":"no"}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"retry_dead_letters","arguments":{}}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`, 0},
		{`not json`, 0},
	}
	for _, tc := range tests {
		reply := checkCall([]byte(tc.line))
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
	f.Fuzz(func(t *testing.T, line []byte) {
		reply := checkCall(line)
		if reply == nil {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(reply, &m); err != nil || m["jsonrpc"] != "2.0" || m["error"] == nil {
			t.Fatalf("reply %q is not a JSON-RPC error", reply)
		}
	})
}
