package meup

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"protocol":"mew/v0.4","id":"e1","from":"alice","kind":"chat","payload":{"text":"hi"}}`,
		`{"protocol":"meup/v0.1","id":"e1","from":"a","to":["b"],"kind":"mcp.request","correlation_id":"c","payload":{"method":"tools/call","params":{"n":5.0}}}`,
		`{"protocol":"mcpx/v0.1","id":"e1","from":"a","kind":"mcp/request:tools/call","payload":{"method":"tools/call"}}`,
		`{"protocol":"mcpx/v0.1","id":"e1","from":"a","kind":"capability/grant","payload":{"recipient":"b","capabilities":["chat"]}}`,
		`{"protocol":"meup/v0.2","id":"e1","from":"a","ts":"2025-08-26T14:00:00Z","kind":"a.b","context":"x/y"}`,
		`{"protocol":"mew/v0.3","id":"e1","from":"a","kind":"system/presence","payload":{"event":"join","participant":{"id":"b"}}}`,
		`{"protocol":"mew/v0.4","id":"e1","from":"a","kind":"chat","payload":{"text":"\ud83d\ude00 <&>"}}`,
		`{"protocol":"mew/v0.4","id":"e1","from":"a","kind":"chat","payload":{"text":"x","text":"y"}}`,
		`[]`, `{}`, `{"protocol":"mew/v0.4"} x`,
		"{ \"payload\" :\t{ \"b\" : 1.50 , \"a\" : [ 1 , 2e3 ] } , \"protocol\":\"mew/v0.4\",\"id\":\"e1\",\"from\":\"a\",\"kind\":\"x\" }",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse(data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse error %v is not an *Error", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Validate after Parse: %v", err)
		}
		// The payload is the envelope's own, compacted (mcpx/v0.1 grants
		// may have theirs rewritten).
		if e.Protocol != ProtocolMCPx01 {
			var members map[string]json.RawMessage
			var want bytes.Buffer
			if err := json.Unmarshal(data, &members); err != nil {
				t.Fatalf("Parse accepted what encoding/json refuses: %v", err)
			}
			if p, ok := members["payload"]; ok {
				if err := json.Compact(&want, p); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(e.Payload, want.Bytes()) {
				t.Fatalf("payload %s, want %s", e.Payload, want.Bytes())
			}
		}
		// Re-encode in the protocol it came in (mcpx/v0.1, which is never
		// written, as meup/v0.2; a dotted kind cannot be meup/v0.1).
		p := e.Protocol
		if p == ProtocolMCPx01 || p == ProtocolMEUP01 {
			p = ProtocolMEUP02
		}
		out, err := e.Encode(p)
		if err != nil {
			t.Fatalf("Encode(%s) of a parsed envelope: %v", p, err)
		}
		e2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Encode()) = %v\n%s", err, out)
		}
		want := e
		want.Protocol = p
		if !envelopesEqual(e2, want) {
			t.Fatalf("round trip changed the envelope:\n got %+v\nwant %+v", e2, want)
		}
		out2, err := e2.Encode(p)
		if err != nil || string(out2) != string(out) {
			t.Fatalf("second Encode differs: %v\n%s\n%s", err, out, out2)
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add([]byte(`[{"kind":"mcp/request","payload":{"method":"tools/*","params":{"name":"!delete_*"}}}]`), []byte(`{"kind":"mcp/request","payload":{"method":"tools/*","params":{"name":"!delete_*","x":1}}}`), "mcp/request", []byte(`{"method":"tools/call","params":{"name":"read"}}`))
	f.Add([]byte(`[{"kind":"*","payload":{"$.a[*].b":"/x+/","**":5}}]`), []byte(`{"kind":"x","payload":{"$.a[*].b":"/x+/","**":5.0}}`), "x", []byte(`{"a":[{"b":"xx"}],"c":{"d":5.0}}`))
	f.Add([]byte(`["mcp/request:tools/*","chat"]`), []byte(`"chat"`), "chat", []byte(`{"text":"hi"}`))
	f.Add([]byte(`[{"kind":["a","/b/"],"payload":{"k*":[1,true,null,{"x":"?"}]}}]`), []byte(`{"kind":"b","payload":{"k*":[1,true,null,{"x":"?"}]}}`), "b", []byte(`{"kx":{"x":"y"}}`))
	f.Add([]byte(`[{"kind":"!chat","payload":{"p":{"a":1}}}]`), []byte(`{"kind":["x","y/z"],"payload":{"p":{"a":1,"b":{"**":"v"}}}}`), "y/z", []byte(`{"p":{"a":1.0,"b":{"c":["v"]}}}`))
	f.Add([]byte(`[{"kind":"!/^system\\//","payload":{"path":"!/^\\/etc\\//"}}]`), []byte(`{"kind":"!/^system\\//"}`), "x/y", []byte(`{"path":"/etc/shadow"}`))
	f.Add([]byte(`[{"kind":"*","payload":{"$..[?@.n > 1]":1,"$.a[?count(@.*) > 1].b":"x"}}]`), []byte(`{"kind":"*"}`), "x", []byte(`{"a":[{"n":2,"b":"x"}]}`))
	f.Add([]byte(`[{"kind":"*","payload":{"**":{"**":{"**":{"zz":"no"}}}}}]`), []byte(`{"kind":"chat"}`), "chat", []byte(`{"a":{"a":{"a":{"a":{"a":"v"}}}}}`))
	f.Fuzz(func(t *testing.T, capsJSON, otherJSON []byte, kind string, payload []byte) {
		caps, err := ParseCapabilities(capsJSON)
		if err != nil {
			// Compile must also cope with capabilities ParseCapabilities
			// would refuse.
			if json.Unmarshal(capsJSON, &caps) != nil {
				return
			}
		}
		m, err := Compile(caps)
		if err != nil {
			return
		}
		e := Envelope{Kind: kind, Payload: payload}
		allowed, used := allowsWithin(e, maxMatchWork, []*Matcher{m})
		if used > maxMatchWork {
			t.Fatalf("matching spent %d units of work, more than %d", used, maxMatchWork)
		}
		if allowed != m.Allows(e) {
			t.Fatal("Allows and allowsWithin disagree")
		}
		// Covers is sound: whatever a covered capability allows, the set
		// allows too.
		others, err := ParseCapabilities(append(append([]byte("["), otherJSON...), ']'))
		if err != nil || len(others) != 1 {
			return
		}
		if !m.Covers(others[0]) {
			return
		}
		one, err := Compile(others)
		if err != nil {
			t.Fatalf("Covers accepted a capability Compile refuses: %v", err)
		}
		if one.Allows(e) && !allowed {
			t.Fatalf("covered capability %s %s allows what the set does not", others[0].Kind, others[0].Payload)
		}
	})
}
