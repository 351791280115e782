package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// modernMeta is the _meta a 2026-07-28 client puts on every request.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}`

func errorCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// A 2026-07-28 client over stdio, at the wire: no initialize; discover,
// tools, a listen stream for meerkat://inbox that wakes it on arrival with
// updates tagged with the stream's id, and that ends without a response
// when the client cancels it; no log events at any point.
func TestStdioModern(t *testing.T) {
	f := newFakeNode()
	w := startStdio(t, f)

	w.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + modernMeta + `}}`)
	m := w.reply(float64(1))
	var disc struct {
		Result struct {
			SupportedVersions []string `json:"supportedVersions"`
			Capabilities      struct {
				Tools     map[string]any `json:"tools"`
				Resources struct {
					Subscribe bool `json:"subscribe"`
				} `json:"resources"`
				Logging any `json:"logging"`
			} `json:"capabilities"`
			Instructions string         `json:"instructions"`
			ResultType   string         `json:"resultType"`
			Meta         map[string]any `json:"_meta"`
		} `json:"result"`
	}
	remarshal(t, m, &disc)
	r := disc.Result
	if !slices.Contains(r.SupportedVersions, modernEra) || !slices.Contains(r.SupportedVersions, legacyEra) || r.SupportedVersions[0] != modernEra {
		t.Errorf("supportedVersions %v: want %s first, and %s", r.SupportedVersions, modernEra, legacyEra)
	}
	if r.Capabilities.Tools == nil || !r.Capabilities.Resources.Subscribe || r.Capabilities.Logging != nil {
		t.Errorf("capabilities %+v: want tools and resource subscriptions, no logging", r.Capabilities)
	}
	if !strings.Contains(r.Instructions, `"alice"`) {
		t.Errorf("instructions %q do not name the node", r.Instructions)
	}
	if info, _ := r.Meta[mcp.MetaKeyServerInfo].(map[string]any); info["name"] != "meerkatd" {
		t.Errorf("discover _meta %v lacks serverInfo", r.Meta)
	}

	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + modernMeta + `}}`)
	var tools struct {
		Result struct {
			Tools []struct {
				Name         string         `json:"name"`
				OutputSchema map[string]any `json:"outputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	remarshal(t, w.reply(float64(2)), &tools)
	if len(tools.Result.Tools) != 35 || tools.Result.Tools[0].OutputSchema == nil {
		t.Fatalf("tools/list: %+v", tools.Result)
	}

	call := func(id int, args string) map[string]any {
		t.Helper()
		b, _ := json.Marshal(id)
		w.send(`{"jsonrpc":"2.0","id":` + string(b) + `,"method":"tools/call","params":{` + modernMeta + `,` + args + `}}`)
		return w.reply(float64(id))
	}
	if sc := field(call(3, `"name":"send_message","arguments":{"peer":"bob","body":"hi"}`), "result", "structuredContent"); sc["id"] != "m-1" || sc["delivery"] != "acked" {
		t.Errorf("send_message: %v", sc)
	}
	res := field(call(4, `"name":"send_message","arguments":{"peer":"carol","body":"hi"}`), "result")
	if content, _ := res["content"].([]any); res["isError"] != true || len(content) != 1 || !strings.HasPrefix(content[0].(map[string]any)["text"].(string), "unknown_peer: ") {
		t.Errorf("tool error: %v", res)
	}
	if res := field(call(5, `"name":"send_message","arguments":{"body":"no peer"}`), "result"); res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "bad_argument: ") {
		t.Errorf("malformed call: %v", res)
	}

	// A listen stream: acknowledged with what the server will report on
	// (meerkat://inbox only), every message tagged with its id.
	w.send(`{"jsonrpc":"2.0","id":"listen:1","method":"subscriptions/listen","params":{` + modernMeta + `,"notifications":{"resourceSubscriptions":["meerkat://peers","meerkat://inbox","meerkat://nope"],"toolsListChanged":true}}}`)
	ack := w.until(func(m map[string]any) bool { return m["method"] == acked })
	if b, _ := json.Marshal(field(ack, "params")); string(b) != `{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen:1"},"notifications":{"resourceSubscriptions":["meerkat://inbox"]}}` {
		t.Errorf("acknowledgement %s", b)
	}
	f.deliver(node.Message{ID: "x1", Kind: "message", Peer: "bob", Body: "hello"})
	u := w.until(func(m map[string]any) bool { return m["method"] == updated })
	if b, _ := json.Marshal(field(u, "params")); string(b) != `{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen:1"},"uri":"meerkat://inbox"}` {
		t.Errorf("update %s", b)
	}
	// The woken client reads its mail.
	w.send(`{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{` + modernMeta + `,"uri":"meerkat://inbox"}}`)
	contents, _ := field(w.reply(float64(6)), "result")["contents"].([]any)
	if len(contents) != 1 || !strings.Contains(contents[0].(map[string]any)["text"].(string), `"id":"x1"`) {
		t.Errorf("resources/read: %v", contents)
	}

	// Cancelled: no response, and the next arrival goes to the second
	// stream only (streams are notified oldest first, so an update for the
	// first would come before the second's).
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{` + modernMeta + `,"requestId":"listen:1"}}`)
	w.send(`{"jsonrpc":"2.0","id":"listen:2","method":"subscriptions/listen","params":{` + modernMeta + `,"notifications":{"resourceSubscriptions":["meerkat://inbox"]}}}`)
	w.until(func(m map[string]any) bool {
		return m["method"] == acked && field(m, "params", "_meta")[mcp.MetaKeySubscriptionID] == "listen:2"
	})
	waitFor(t, 10*time.Second, func() bool { _, l := w.server.watch.inboxWatchers(); return len(l) == 1 })
	f.deliver(node.Message{ID: "x2", Kind: "message", Peer: "bob", Body: "again"})
	u = w.until(func(m map[string]any) bool { return m["method"] == updated })
	if tag := field(u, "params", "_meta")[mcp.MetaKeySubscriptionID]; tag != "listen:2" {
		t.Errorf("first update after cancelling listen:1 is tagged %v", tag)
	}
	// A subscription that asks for nothing this server reports on is
	// acknowledged empty and ends at once.
	w.send(`{"jsonrpc":"2.0","id":"listen:3","method":"subscriptions/listen","params":{` + modernMeta + `,"notifications":{"resourceSubscriptions":["meerkat://peers"]}}}`)
	w.reply("listen:3")

	// Methods of the other era.
	w.send(`{"jsonrpc":"2.0","id":7,"method":"resources/subscribe","params":{` + modernMeta + `,"uri":"meerkat://inbox"}}`)
	if m := w.reply(float64(7)); errorCode(m) != mcp.METHOD_NOT_FOUND {
		t.Errorf("resources/subscribe in 2026-07-28: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","id":8,"method":"logging/setLevel","params":{` + modernMeta + `,"level":"info"}}`)
	if m := w.reply(float64(8)); errorCode(m) != mcp.METHOD_NOT_FOUND {
		t.Errorf("logging/setLevel in 2026-07-28: %v", m)
	}

	w.close()
	answered := map[any]int{}
	for _, m := range w.seen {
		if m["method"] == logged {
			t.Errorf("log event sent to a 2026-07-28 client: %v", m)
		}
		if m["method"] == nil {
			answered[m["id"]]++
		}
	}
	// listen:2 was open when stdin closed: the server ends it with a
	// response (the client is gone by then; it is harmless).
	if answered["listen:1"] != 0 || answered["listen:2"] != 1 || answered["listen:3"] != 1 {
		t.Errorf("responses to the listens: %v", answered)
	}
}

// Negotiation: initialize settles on a revision of the handshake era (a
// 2026-07-28 or unknown request gets 2025-11-25); requests declaring a
// version the server does not know are refused with the versions it
// supports, before their arguments are looked at; the two eras' methods
// are refused in the other era.
func TestNegotiation(t *testing.T) {
	for _, tc := range []struct{ ask, want string }{
		{"2024-11-05", "2024-11-05"},
		{"2025-03-26", "2025-03-26"},
		{"2025-06-18", "2025-06-18"},
		{"2025-11-25", "2025-11-25"},
		{"2026-07-28", "2025-11-25"},
		{"2099-01-01", "2025-11-25"},
		{"", "2025-03-26"},
	} {
		srv := New(newFakeNode(), Options{})
		m := handle(t, srv, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+tc.ask+`","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
		if got := field(m, "result")["protocolVersion"]; got != tc.want {
			t.Errorf("initialize %q: negotiated %v, want %s", tc.ask, got, tc.want)
		}
		if caps := field(m, "result", "capabilities"); caps["logging"] == nil {
			t.Errorf("initialize %q: no logging capability: %v", tc.ask, caps)
		}
	}

	f := newFakeNode()
	w := startStdio(t, f)
	future := strings.Replace(modernMeta, modernEra, "2099-01-01", 1)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + future + `}}`)
	m := w.reply(float64(1))
	if errorCode(m) != mcp.UNSUPPORTED_PROTOCOL_VERSION {
		t.Fatalf("discover at 2099-01-01: %v", m)
	}
	if sup, _ := field(m, "error", "data")["supported"].([]any); !slices.Contains(sup, any(modernEra)) {
		t.Errorf("unsupported-version error lists %v", sup)
	}
	// Arguments are checked only once the version is settled.
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{` + future + `,"name":"send_message","arguments":{"body":"no peer"}}}`)
	if m := w.reply(float64(2)); errorCode(m) != mcp.UNSUPPORTED_PROTOCOL_VERSION {
		t.Errorf("malformed call at 2099-01-01: %v", m)
	}
	// A 2026-07-28 request must say what the client can do.
	noCaps := strings.Replace(modernMeta, `,"io.modelcontextprotocol/clientCapabilities":{}`, "", 1)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{` + noCaps + `}}`)
	if m := w.reply(float64(3)); errorCode(m) != codeInvalidParams {
		t.Errorf("tools/list without client capabilities: %v", m)
	}
	// The 2026-07-28 methods need its _meta.
	w.send(`{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{}}`)
	if m := w.reply(float64(4)); errorCode(m) != mcp.METHOD_NOT_FOUND {
		t.Errorf("discover without _meta: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","id":5,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["meerkat://inbox"]}}}`)
	if m := w.reply(float64(5)); errorCode(m) != mcp.METHOD_NOT_FOUND {
		t.Errorf("listen without _meta: %v", m)
	}
	w.send(`{"jsonrpc":"2.0","id":6,"method":"initialize","params":{` + modernMeta + `,"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if m := w.reply(float64(6)); errorCode(m) != mcp.METHOD_NOT_FOUND {
		t.Errorf("initialize with 2026-07-28 _meta: %v", m)
	}
	w.close()
}

// handle passes one message to srv's mcp-go server and returns the reply
// as JSON values.
func handle(t *testing.T, srv *Server, msg string) map[string]any {
	t.Helper()
	var m map[string]any
	remarshal(t, srv.MCP().HandleMessage(context.Background(), json.RawMessage(msg)), &m)
	return m
}

func remarshal(t *testing.T, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
}

// field walks nested JSON objects; a missing step yields nil.
func field(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m, _ = m[p].(map[string]any)
	}
	return m
}
