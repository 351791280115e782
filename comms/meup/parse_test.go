package meup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// envJSON returns the JSON text of a valid chat envelope changed by mod.
func envJSON(t testing.TB, mod func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"protocol": ProtocolMEW04,
		"id":       "env-1",
		"from":     "alice",
		"kind":     "chat",
		"payload":  map[string]any{"text": "hello"},
	}
	if mod != nil {
		mod(m)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func ids(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// nested returns a chat payload nested to depth levels (the payload
// object itself is level 1).
func nested(depth int) string {
	var b strings.Builder
	b.WriteString(`{"text":"x"`)
	for i := 1; i < depth; i++ {
		b.WriteString(`,"n":{"a":1`)
	}
	for i := 1; i < depth; i++ {
		b.WriteString(`}`)
	}
	b.WriteString(`}`)
	return b.String()
}

func rawEnv(kind, payload string) []byte {
	return []byte(`{"protocol":"mew/v0.4","id":"e1","from":"alice","kind":"` + kind + `","payload":` + payload + `}`)
}

func TestParse(t *testing.T) {
	set := func(k string, v any) func(map[string]any) {
		return func(m map[string]any) { m[k] = v }
	}
	del := func(k string) func(map[string]any) {
		return func(m map[string]any) { delete(m, k) }
	}
	kindPayload := func(kind string, p any, extra ...any) func(map[string]any) {
		return func(m map[string]any) {
			m["kind"] = kind
			if p == nil {
				delete(m, "payload")
			} else {
				m["payload"] = p
			}
			for i := 0; i+1 < len(extra); i += 2 {
				m[extra[i].(string)] = extra[i+1]
			}
		}
	}
	corr := []string{"p1"}
	okCap := []any{map[string]any{"kind": "chat"}}
	base := envJSON(t, nil)
	// padding to reach an exact total size with whitespace
	pad := func(n int) []byte {
		b := append([]byte{}, base[:len(base)-1]...)
		b = append(b, bytes.Repeat([]byte(" "), n-len(base))...)
		return append(b, '}')
	}
	payloadOf := func(n int) string { // a chat payload of exactly n compact bytes
		return `{"text":"` + strings.Repeat("x", n-11) + `"}`
	}
	tests := []struct {
		name   string
		data   []byte
		reason string // "" means accepted
		field  string
	}{
		{"minimal chat", base, "", ""},
		{"every field", envJSON(t, func(m map[string]any) {
			m["ts"] = "2025-08-26T14:00:00Z"
			m["to"] = []string{"bob", "carol"}
			m["correlation_id"] = []string{"x"}
			m["context"] = "workflow-123/step-1"
		}), "", ""},

		// protocols
		{"protocol missing", envJSON(t, del("protocol")), ReasonInvalidEnvelope, "protocol"},
		{"protocol not a string", envJSON(t, set("protocol", 1)), ReasonInvalidEnvelope, "protocol"},
		{"protocol unknown", envJSON(t, set("protocol", "mew/v9")), ReasonUnsupportedProtocol, "protocol"},
		{"meup/v0.1", envJSON(t, set("protocol", ProtocolMEUP01)), "", ""},
		{"meup/v0.2", envJSON(t, set("protocol", ProtocolMEUP02)), "", ""},
		{"mew/v0.3", envJSON(t, set("protocol", ProtocolMEW03)), "", ""},
		{"mcpx/v0.1", envJSON(t, set("protocol", ProtocolMCPx01)), "", ""},

		// JSON text
		{"not JSON", []byte(`{"protocol"`), ReasonInvalidEnvelope, ""},
		{"not an object", []byte(`["x"]`), ReasonInvalidEnvelope, ""},
		{"trailing data", append(append([]byte{}, base...), `{}`...), ReasonInvalidEnvelope, ""},
		{"trailing garbage", append(append([]byte{}, base...), `x`...), ReasonInvalidEnvelope, ""},
		{"trailing whitespace", append(append([]byte{}, base...), " \n\t"...), "", ""},
		{"duplicate top-level key", []byte(`{"protocol":"mew/v0.4","id":"a","id":"b","from":"alice","kind":"chat","payload":{"text":"x"}}`), ReasonInvalidEnvelope, ""},
		{"duplicate payload key", rawEnv("chat", `{"text":"x","text":"y"}`), ReasonInvalidEnvelope, "payload"},
		{"duplicate nested key", rawEnv("chat", `{"text":"x","a":{"b":1,"b":1}}`), ReasonInvalidEnvelope, "payload"},
		{"invalid UTF-8", rawEnv("chat", "{\"text\":\"\xff\"}"), ReasonInvalidEnvelope, ""},
		{"lone surrogate", rawEnv("chat", `{"text":"\ud800"}`), ReasonInvalidEnvelope, ""},
		{"lone low surrogate", rawEnv("chat", `{"text":"\udc00x"}`), ReasonInvalidEnvelope, ""},
		{"surrogate pair", rawEnv("chat", `{"text":"\ud83d\ude00"}`), "", ""},
		{"escaped backslash then u", rawEnv("chat", `{"text":"\\ud800"}`), "", ""},
		{"unknown field", envJSON(t, set("extra", 1)), ReasonInvalidEnvelope, `"extra"`},

		// bounds
		{"size at limit", pad(MaxEnvelopeBytes), "", ""},
		{"size over limit", pad(MaxEnvelopeBytes + 1), ReasonInvalidEnvelope, ""},
		{"payload at limit", rawEnv("chat", payloadOf(MaxPayloadBytes)), "", ""},
		{"payload over limit", rawEnv("chat", payloadOf(MaxPayloadBytes+1)), ReasonInvalidEnvelope, "payload"},
		{"depth at limit", rawEnv("chat", nested(MaxDepth)), "", ""},
		{"depth over limit", rawEnv("chat", nested(MaxDepth+1)), ReasonInvalidEnvelope, "payload"},
		{"id at limit", envJSON(t, set("id", strings.Repeat("i", MaxIDLen))), "", ""},
		{"id over limit", envJSON(t, set("id", strings.Repeat("i", MaxIDLen+1))), ReasonInvalidEnvelope, "id"},
		{"id empty", envJSON(t, set("id", "")), ReasonInvalidEnvelope, "id"},
		{"id missing", envJSON(t, del("id")), ReasonInvalidEnvelope, "id"},
		{"id not a string", envJSON(t, set("id", 7)), ReasonInvalidEnvelope, "id"},
		{"from at limit", envJSON(t, set("from", strings.Repeat("f", MaxIDLen))), "", ""},
		{"from over limit", envJSON(t, set("from", strings.Repeat("f", MaxIDLen+1))), ReasonInvalidEnvelope, "from"},
		{"from control char", envJSON(t, set("from", "al\nice")), ReasonInvalidEnvelope, "from"},
		{"from missing", envJSON(t, del("from")), ReasonInvalidEnvelope, "from"},
		{"to at limit", envJSON(t, set("to", ids(MaxTo, "p"))), "", ""},
		{"to over limit", envJSON(t, set("to", ids(MaxTo+1, "p"))), ReasonInvalidEnvelope, "to"},
		{"to not strings", envJSON(t, set("to", []any{1})), ReasonInvalidEnvelope, "to"},
		{"to a string", envJSON(t, set("to", "bob")), ReasonInvalidEnvelope, "to"},
		{"to entry empty", envJSON(t, set("to", []string{""})), ReasonInvalidEnvelope, "to"},
		{"correlation at limit", envJSON(t, set("correlation_id", ids(MaxCorrelation, "c"))), "", ""},
		{"correlation over limit", envJSON(t, set("correlation_id", ids(MaxCorrelation+1, "c"))), ReasonInvalidEnvelope, "correlation_id"},
		{"correlation id over limit", envJSON(t, set("correlation_id", []string{strings.Repeat("c", MaxIDLen+1)})), ReasonInvalidEnvelope, "correlation_id"},
		{"correlation string in mew", envJSON(t, set("correlation_id", "c")), ReasonInvalidEnvelope, "correlation_id"},
		{"context at limit", envJSON(t, set("context", strings.Repeat("c", MaxContextLen))), "", ""},
		{"context over limit", envJSON(t, set("context", strings.Repeat("c", MaxContextLen+1))), ReasonInvalidEnvelope, "context"},
		{"context not a string", envJSON(t, set("context", map[string]any{})), ReasonInvalidEnvelope, "context"},
		{"ts RFC 3339", envJSON(t, set("ts", "2025-08-26T14:00:00.123+02:00")), "", ""},
		{"ts not RFC 3339", envJSON(t, set("ts", "yesterday")), ReasonInvalidEnvelope, "ts"},
		{"ts not a string", envJSON(t, set("ts", 1)), ReasonInvalidEnvelope, "ts"},

		// kinds
		{"kind at limit", envJSON(t, kindPayload("x/"+strings.Repeat("k", MaxKindLen-2), nil)), "", ""},
		{"kind over limit", envJSON(t, kindPayload("x/"+strings.Repeat("k", MaxKindLen-1), nil)), ReasonInvalidEnvelope, "kind"},
		{"kind missing", envJSON(t, del("kind")), ReasonInvalidEnvelope, "kind"},
		{"kind upper case", envJSON(t, kindPayload("Chat", nil)), ReasonInvalidEnvelope, "kind"},
		{"kind empty segment", envJSON(t, kindPayload("mcp//request", nil)), ReasonInvalidEnvelope, "kind"},
		{"kind leading slash", envJSON(t, kindPayload("/chat", nil)), ReasonInvalidEnvelope, "kind"},
		{"kind trailing slash", envJSON(t, kindPayload("chat/", nil)), ReasonInvalidEnvelope, "kind"},
		{"kind segment starts with dash", envJSON(t, kindPayload("a/-b", nil)), ReasonInvalidEnvelope, "kind"},
		{"kind with colon outside mcpx", envJSON(t, kindPayload("mcp/request:tools/call", map[string]any{"method": "tools/call"})), ReasonInvalidEnvelope, "kind"},
		{"unknown kind, generic", envJSON(t, kindPayload("game/move.v2", map[string]any{"x": 1})), "", ""},
		{"unknown kind without payload", envJSON(t, kindPayload("game/ping", nil)), "", ""},

		// payload shape
		{"payload array", envJSON(t, set("payload", []any{})), ReasonInvalidEnvelope, "payload"},
		{"payload string", envJSON(t, set("payload", "x")), ReasonInvalidEnvelope, "payload"},
		{"payload null", envJSON(t, set("payload", nil)), ReasonInvalidEnvelope, "payload"},
		{"payload not object for unknown kind", envJSON(t, kindPayload("game/move", 3)), ReasonInvalidEnvelope, "payload"},

		// per-kind rules
		{"mcp/request", envJSON(t, kindPayload(KindMCPRequest, map[string]any{"method": "tools/list"})), "", ""},
		{"mcp/request no method", envJSON(t, kindPayload(KindMCPRequest, map[string]any{})), ReasonInvalidEnvelope, "payload.method"},
		{"mcp/request empty method", envJSON(t, kindPayload(KindMCPRequest, map[string]any{"method": ""})), ReasonInvalidEnvelope, "payload.method"},
		{"mcp/request no payload", envJSON(t, kindPayload(KindMCPRequest, nil)), ReasonInvalidEnvelope, "payload"},
		{"mcp/response", envJSON(t, kindPayload(KindMCPResponse, map[string]any{"result": 1}, "correlation_id", corr)), "", ""},
		{"mcp/response error", envJSON(t, kindPayload(KindMCPResponse, map[string]any{"error": map[string]any{}}, "correlation_id", corr)), "", ""},
		{"mcp/response no correlation", envJSON(t, kindPayload(KindMCPResponse, map[string]any{"result": 1})), ReasonInvalidEnvelope, "correlation_id"},
		{"mcp/response no result", envJSON(t, kindPayload(KindMCPResponse, map[string]any{"id": 1}, "correlation_id", corr)), ReasonInvalidEnvelope, "payload"},
		{"mcp/proposal", envJSON(t, kindPayload(KindMCPProposal, map[string]any{"method": "tools/call"})), "", ""},
		{"mcp/proposal method not string", envJSON(t, kindPayload(KindMCPProposal, map[string]any{"method": 1})), ReasonInvalidEnvelope, "payload.method"},
		{"mcp/withdraw", envJSON(t, kindPayload(KindMCPWithdraw, nil, "correlation_id", corr)), "", ""},
		{"mcp/withdraw no correlation", envJSON(t, kindPayload(KindMCPWithdraw, map[string]any{})), ReasonInvalidEnvelope, "correlation_id"},
		{"mcp/reject", envJSON(t, kindPayload(KindMCPReject, map[string]any{"reason": "unsafe"}, "correlation_id", corr)), "", ""},
		{"mcp/reject reason not string", envJSON(t, kindPayload(KindMCPReject, map[string]any{"reason": 1}, "correlation_id", corr)), ReasonInvalidEnvelope, "payload.reason"},
		{"mcp/reject no correlation", envJSON(t, kindPayload(KindMCPReject, nil)), ReasonInvalidEnvelope, "correlation_id"},
		{"capability/grant", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": okCap})), "", ""},
		{"capability/grant no recipient", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"capabilities": okCap})), ReasonInvalidEnvelope, "payload.recipient"},
		{"capability/grant empty", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": []any{}})), ReasonInvalidEnvelope, "payload.capabilities"},
		{"capability/grant not objects", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": []any{"chat"}})), ReasonInvalidEnvelope, "payload.capabilities[0]"},
		{"capability/grant too many", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": manyCaps(MaxCapabilities + 1)})), ReasonInvalidEnvelope, "payload.capabilities"},
		{"capability/grant at limit", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": manyCaps(MaxCapabilities)})), "", ""},
		{"capability/grant no kind", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": []any{map[string]any{"payload": map[string]any{}}}})), ReasonInvalidEnvelope, "payload.capabilities[0].kind"},
		{"capability/grant second without kind", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": []any{map[string]any{"kind": "chat"}, map[string]any{}}})), ReasonInvalidEnvelope, "payload.capabilities[1].kind"},
		{"capability/revoke grant_id", envJSON(t, kindPayload(KindCapabilityRevoke, map[string]any{"recipient": "bob", "grant_id": "g1"})), "", ""},
		{"capability/revoke capabilities", envJSON(t, kindPayload(KindCapabilityRevoke, map[string]any{"recipient": "bob", "capabilities": okCap})), "", ""},
		{"capability/revoke neither", envJSON(t, kindPayload(KindCapabilityRevoke, map[string]any{"recipient": "bob"})), ReasonInvalidEnvelope, "payload"},
		{"capability/revoke grant_id not string", envJSON(t, kindPayload(KindCapabilityRevoke, map[string]any{"recipient": "bob", "grant_id": 1})), ReasonInvalidEnvelope, "payload.grant_id"},
		{"capability/grant-ack", envJSON(t, kindPayload(KindCapabilityGrantAck, nil, "correlation_id", corr)), "", ""},
		{"capability/grant-ack no correlation", envJSON(t, kindPayload(KindCapabilityGrantAck, map[string]any{})), ReasonInvalidEnvelope, "correlation_id"},
		{"space/invite", envJSON(t, kindPayload(KindSpaceInvite, map[string]any{"participant_id": "bob", "key": "ed25519:AAAA", "capabilities": okCap})), "", ""},
		{"space/invite no key", envJSON(t, kindPayload(KindSpaceInvite, map[string]any{"participant_id": "bob"})), ReasonInvalidEnvelope, "payload.key"},
		{"space/invite bad capabilities", envJSON(t, kindPayload(KindSpaceInvite, map[string]any{"participant_id": "bob", "key": "k", "capabilities": "chat"})), ReasonInvalidEnvelope, "payload.capabilities"},
		{"space/kick", envJSON(t, kindPayload(KindSpaceKick, map[string]any{"participant_id": "bob"})), "", ""},
		{"space/kick no participant", envJSON(t, kindPayload(KindSpaceKick, map[string]any{})), ReasonInvalidEnvelope, "payload.participant_id"},
		{"chat no text", envJSON(t, kindPayload(KindChat, map[string]any{"format": "plain"})), ReasonInvalidEnvelope, "payload.text"},
		// Member names are case-sensitive: another spelling of a field is
		// refused, also by Unicode case folding (U+212A KELVIN SIGN folds
		// to k, U+017F LATIN SMALL LETTER LONG S to s).
		{"space/kick field in other case", envJSON(t, kindPayload(KindSpaceKick, map[string]any{"participant_id": "dave", "Participant_ID": "carol"})), ReasonInvalidEnvelope, "payload"},
		{"space/invite key with kelvin sign", envJSON(t, kindPayload(KindSpaceInvite, map[string]any{"participant_id": "dan", "key": "ed25519:AAAA", "\u212aey": "ed25519:BBBB"})), ReasonInvalidEnvelope, "payload"},
		{"capability/grant capabilities with long s", envJSON(t, kindPayload(KindCapabilityGrant, map[string]any{"recipient": "bob", "capabilities": okCap, "capabilitie\u017f": okCap})), ReasonInvalidEnvelope, "payload"},
		{"capability/revoke Grant_Id", envJSON(t, kindPayload(KindCapabilityRevoke, map[string]any{"recipient": "bob", "Grant_Id": "g1", "grant_id": "g2"})), ReasonInvalidEnvelope, "payload"},
		{"mcp/request METHOD", envJSON(t, kindPayload(KindMCPRequest, map[string]any{"method": "tools/list", "METHOD": "tools/call"})), ReasonInvalidEnvelope, "payload"},
		{"chat Text beside text", envJSON(t, kindPayload(KindChat, map[string]any{"text": "hi", "Text": "ho"})), ReasonInvalidEnvelope, "payload"},
		{"chat other members kept", envJSON(t, kindPayload(KindChat, map[string]any{"text": "hi", "format": "plain", "texts": "x"})), "", ""},
		{"unknown kind any case", envJSON(t, kindPayload("x-custom", map[string]any{"Text": "a", "text": "b"})), "", ""},
		{"nested keys in any case", envJSON(t, kindPayload("x-custom", map[string]any{"result": map[string]any{"id": 1, "ID": 2}})), "", ""}, // matches no payload pattern (TestPayloadPatternFoldClash)
		{"chat empty text", envJSON(t, kindPayload(KindChat, map[string]any{"text": ""})), "", ""},
		{"reasoning/thought", envJSON(t, kindPayload(KindReasoningThought, map[string]any{})), "", ""},
		{"reasoning/cancel", envJSON(t, kindPayload("reasoning/cancel", map[string]any{})), "", ""},
		{"reasoning/start no payload", envJSON(t, kindPayload(KindReasoningStart, nil)), ReasonInvalidEnvelope, "payload"},
		{"system/presence", envJSON(t, kindPayload(KindSystemPresence, map[string]any{"event": "join", "participant": map[string]any{"id": "bob"}})), "", ""},
		{"system/presence bad event", envJSON(t, kindPayload(KindSystemPresence, map[string]any{"event": "dance", "participant": map[string]any{"id": "bob"}})), ReasonInvalidEnvelope, "payload.event"},
		{"system/presence no participant id", envJSON(t, kindPayload(KindSystemPresence, map[string]any{"event": "leave", "participant": map[string]any{}})), ReasonInvalidEnvelope, "payload.participant.id"},
		{"system/welcome", envJSON(t, kindPayload(KindSystemWelcome, map[string]any{"you": map[string]any{"id": "bob"}})), "", ""},
		{"system/welcome no you", envJSON(t, kindPayload(KindSystemWelcome, map[string]any{})), ReasonInvalidEnvelope, "payload.you"},
		{"system/error", envJSON(t, kindPayload(KindSystemError, map[string]any{"error": ReasonCapability})), "", ""},
		{"system/error no error", envJSON(t, kindPayload(KindSystemError, map[string]any{})), ReasonInvalidEnvelope, "payload.error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(tt.data)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if err := e.Validate(); err != nil {
					t.Fatalf("Validate after Parse: %v", err)
				}
				return
			}
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("Parse error = %v, want *Error %s", err, tt.reason)
			}
			if me.Reason != tt.reason || me.Field != tt.field {
				t.Fatalf("Parse error = %v (reason %q field %q), want reason %q field %q", err, me.Reason, me.Field, tt.reason, tt.field)
			}
		})
	}
}

func manyCaps(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"kind": fmt.Sprintf("k%d", i)}
	}
	return out
}

func TestParseNormalises(t *testing.T) {
	tests := []struct {
		name, protocol, kind string
		payload              any
		corr                 any
		wantKind             string
		wantCorr             []string
	}{
		{"meup/v0.1 dotted", ProtocolMEUP01, "mcp.request", map[string]any{"method": "tools/list"}, nil, KindMCPRequest, nil},
		{"meup/v0.1 dotted reasoning", ProtocolMEUP01, "reasoning.start", map[string]any{}, nil, KindReasoningStart, nil},
		{"meup/v0.1 dotted grant-ack", ProtocolMEUP01, "capability.grant-ack", nil, "g1", KindCapabilityGrantAck, []string{"g1"}},
		{"meup/v0.1 slash form", ProtocolMEUP01, "mcp/request", map[string]any{"method": "x"}, nil, KindMCPRequest, nil},
		{"meup/v0.1 slash keeps dots", ProtocolMEUP01, "game/move.v2", nil, nil, "game/move.v2", nil},
		{"meup/v0.2 keeps dots", ProtocolMEUP02, "mcp.request", map[string]any{}, nil, "mcp.request", nil},
		{"mew/v0.4 empty lists dropped", ProtocolMEW04, "chat", map[string]any{"text": "x"}, []any{}, KindChat, nil},
		{"mcpx method kind", ProtocolMCPx01, "mcp/request:tools/call", map[string]any{"method": "tools/call"}, nil, KindMCPRequest, nil},
		{"mcpx short method kind", ProtocolMCPx01, "mcp:tools/list", map[string]any{"method": "tools/list"}, nil, KindMCPRequest, nil},
		{"mcpx proposal kind", ProtocolMCPx01, "mcp/proposal:tools/call", map[string]any{"method": "tools/call"}, nil, KindMCPProposal, nil},
		{"mcpx plain kind", ProtocolMCPx01, "mcp/response", map[string]any{"result": 1}, "req-1", KindMCPResponse, []string{"req-1"}},
		{"mcpx list correlation", ProtocolMCPx01, "mcp/response", map[string]any{"result": 1}, []any{"a", "b"}, KindMCPResponse, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := envJSON(t, func(m map[string]any) {
				m["protocol"], m["kind"] = tt.protocol, tt.kind
				if tt.payload == nil {
					delete(m, "payload")
				} else {
					m["payload"] = tt.payload
				}
				if tt.corr != nil {
					m["correlation_id"] = tt.corr
				}
			})
			e, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if e.Protocol != tt.protocol || e.Kind != tt.wantKind || fmt.Sprint(e.CorrelationID) != fmt.Sprint(tt.wantCorr) || (e.CorrelationID == nil) != (tt.wantCorr == nil) {
				t.Fatalf("got protocol %q kind %q correlation %q, want %q %q %q", e.Protocol, e.Kind, e.CorrelationID, tt.protocol, tt.wantKind, tt.wantCorr)
			}
		})
	}
}

func TestParseMCPxRefusals(t *testing.T) {
	tests := []struct {
		name, kind string
		payload    any
		field      string
	}{
		{"method differs", "mcp/request:tools/call", map[string]any{"method": "tools/list"}, "payload.method"},
		{"method missing", "mcp/request:tools/call", map[string]any{}, "payload.method"},
		{"no payload", "mcp:tools/call", nil, "payload.method"},
		{"empty method", "mcp/request:", map[string]any{"method": ""}, "kind"},
		{"method on a response", "mcp/response:tools/call", map[string]any{"result": 1}, "kind"},
		{"method on chat", "chat:hello", map[string]any{"text": "x"}, "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := envJSON(t, func(m map[string]any) {
				m["protocol"], m["kind"] = ProtocolMCPx01, tt.kind
				if tt.payload == nil {
					delete(m, "payload")
				} else {
					m["payload"] = tt.payload
				}
			})
			_, err := Parse(data)
			var me *Error
			if !errors.As(err, &me) || me.Reason != ReasonInvalidEnvelope || me.Field != tt.field {
				t.Fatalf("Parse error = %v, want %s on %s", err, ReasonInvalidEnvelope, tt.field)
			}
		})
	}
}

func TestParseMCPxGrantStrings(t *testing.T) {
	data := envJSON(t, func(m map[string]any) {
		m["protocol"], m["kind"] = ProtocolMCPx01, KindCapabilityGrant
		m["payload"] = map[string]any{"recipient": "bob", "capabilities": []any{"mcp/request:tools/*", "chat", map[string]any{"kind": "mcp/proposal"}}}
	})
	e, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"capabilities":[{"kind":"mcp/request","payload":{"method":"tools/*"}},{"kind":"chat"},{"kind":"mcp/proposal"}],"recipient":"bob"}`
	if string(e.Payload) != want {
		t.Fatalf("payload = %s, want %s", e.Payload, want)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	full := Envelope{
		ID: "e1", TS: "2025-08-26T14:00:00Z", From: "alice", To: []string{"bob"},
		Kind: KindMCPRequest, CorrelationID: []string{"p1", "p2"}, Context: "ctx/1",
		Payload: json.RawMessage(`{ "method": "tools/call", "params": {"name": "<read>&"} }`),
	}
	for _, p := range []string{ProtocolMEUP01, ProtocolMEUP02, ProtocolMEW03, ProtocolMEW04} {
		t.Run(p, func(t *testing.T) {
			data, err := full.Encode(p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse(%s): %v", data, err)
			}
			want := full
			want.Protocol = p
			want.Payload = json.RawMessage(`{"method":"tools/call","params":{"name":"<read>&"}}`)
			if !envelopesEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	t.Run("omits empty fields", func(t *testing.T) {
		e := Envelope{ID: "e1", From: "alice", Kind: "game/ping", To: []string{}}
		data, err := e.Encode(ProtocolMEW04)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"protocol":"mew/v0.4","id":"e1","from":"alice","kind":"game/ping"}`
		if string(data) != want {
			t.Fatalf("Encode = %s, want %s", data, want)
		}
	})
	refusals := []struct {
		name, protocol string
		e              Envelope
		reason         string
	}{
		{"mcpx", ProtocolMCPx01, full, ReasonUnsupportedProtocol},
		{"unknown", "mew/v1.0", full, ReasonUnsupportedProtocol},
		{"empty", "", full, ReasonUnsupportedProtocol},
		{"dotted kind as meup/v0.1", ProtocolMEUP01, Envelope{ID: "e", From: "a", Kind: "game.ping"}, ReasonInvalidEnvelope},
		{"invalid envelope", ProtocolMEW04, Envelope{ID: "e", From: "a", Kind: KindChat}, ReasonInvalidEnvelope},
		{"unnormalised kind", ProtocolMEW04, Envelope{ID: "e", From: "a", Kind: "mcp:tools/call"}, ReasonInvalidEnvelope},
	}
	for _, tt := range refusals {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			_, err := tt.e.Encode(tt.protocol)
			if err == nil || ReasonOf(err) != tt.reason {
				t.Fatalf("Encode error = %v, want %s", err, tt.reason)
			}
		})
	}
	// A dotted kind from meup/v0.2 is written as meup/v0.2 unchanged.
	e := Envelope{ID: "e", From: "a", Kind: "game.ping"}
	if _, err := e.Encode(ProtocolMEUP02); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	ok := Envelope{ID: "e", From: "a", Kind: KindChat, Payload: json.RawMessage(`{"text":"hi"}`)}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		mod   func(e *Envelope)
		field string
	}{
		{"bad protocol", func(e *Envelope) { e.Protocol = "x" }, "protocol"},
		{"dotted seed kind is just a kind", func(e *Envelope) { e.Kind = "mcp:x" }, "kind"},
		{"payload not JSON", func(e *Envelope) { e.Payload = json.RawMessage(`{`) }, "payload"},
		{"payload duplicate key", func(e *Envelope) { e.Payload = json.RawMessage(`{"text":"a","text":"b"}`) }, "payload"},
		{"payload array", func(e *Envelope) { e.Payload = json.RawMessage(`[]`) }, "payload"},
		{"payload too deep", func(e *Envelope) { e.Payload = json.RawMessage(nested(MaxDepth + 1)) }, "payload"},
		{"to entry", func(e *Envelope) { e.To = []string{"a\x00"} }, "to"},
		{"payload over limit once compacted", func(e *Envelope) { e.Payload = spacedChat(MaxPayloadBytes + 1) }, "payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ok
			tt.mod(&e)
			err := e.Validate()
			var me *Error
			if !errors.As(err, &me) || me.Field != tt.field {
				t.Fatalf("Validate error = %v, want field %s", err, tt.field)
			}
		})
	}
	// The bound is on the compacted payload, which Encode writes.
	atLimit := ok
	atLimit.Payload = spacedChat(MaxPayloadBytes)
	if err := atLimit.Validate(); err != nil {
		t.Fatalf("a payload of %d compact bytes with spaces: %v", MaxPayloadBytes, err)
	}
	out, err := atLimit.Encode(ProtocolMEUP02)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil || len(back.Payload) != MaxPayloadBytes || bytes.Contains(out, []byte(`"text" :`)) {
		t.Fatalf("encoded payload of %d bytes (%v), want %d compact bytes", len(back.Payload), err, MaxPayloadBytes)
	}
}

// spacedChat is a chat payload of n bytes once compacted, with spaces
// around its members.
func spacedChat(n int) json.RawMessage {
	return json.RawMessage(`{ "text" : "` + strings.Repeat("x", n-len(`{"text":""}`)) + `" }`)
}

func TestValidKind(t *testing.T) {
	good := []string{"chat", "mcp/request", "capability/grant-ack", "a", "0", "a.b_c-d/e", "x/" + strings.Repeat("k", MaxKindLen-2)}
	bad := []string{"", "/", "a/", "/a", "a//b", "A", "a b", "a/_b", "-a", ".a", "a:b", "*", "x/" + strings.Repeat("k", MaxKindLen-1), "é"}
	for _, k := range good {
		if !ValidKind(k) {
			t.Errorf("ValidKind(%q) = false", k)
		}
	}
	for _, k := range bad {
		if ValidKind(k) {
			t.Errorf("ValidKind(%q) = true", k)
		}
	}
}

func TestIsSystem(t *testing.T) {
	for k, want := range map[string]bool{"system/error": true, "system": true, "systems/x": false, "chat": false} {
		if IsSystem(k) != want {
			t.Errorf("IsSystem(%q) = %v", k, !want)
		}
	}
}

func envelopesEqual(a, b Envelope) bool {
	return a.Protocol == b.Protocol && a.ID == b.ID && a.TS == b.TS && a.From == b.From &&
		fmt.Sprint(a.To) == fmt.Sprint(b.To) && len(a.To) == len(b.To) &&
		a.Kind == b.Kind && fmt.Sprint(a.CorrelationID) == fmt.Sprint(b.CorrelationID) &&
		len(a.CorrelationID) == len(b.CorrelationID) &&
		a.Context == b.Context && bytes.Equal(a.Payload, b.Payload)
}

func ExampleParse() {
	e, err := Parse([]byte(`{"protocol":"meup/v0.1","id":"e1","from":"alice","kind":"mcp.request","correlation_id":"p1","payload":{"method":"tools/list"}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Protocol, e.Kind, e.CorrelationID)
	out, err := e.Encode(ProtocolMEW04)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))

	_, err = Parse([]byte(`{"protocol":"mew/v0.4","id":"e2","from":"alice","kind":"chat","payload":{"text":"a","text":"b"}}`))
	fmt.Println(ReasonOf(err))
	// Output:
	// meup/v0.1 mcp/request [p1]
	// {"protocol":"mew/v0.4","id":"e1","from":"alice","kind":"mcp/request","correlation_id":["p1"],"payload":{"method":"tools/list"}}
	// invalid_envelope
}

// Parse keeps the payload as the envelope holds it, only compacted:
// members in their order, numbers as written, wherever the payload is
// among the envelope's fields and whatever the space around it.
func TestParsePayloadAsGiven(t *testing.T) {
	const head = `"protocol":"mew/v0.4","id":"e1","from":"a","kind":"x"`
	for _, tc := range []struct{ raw, want string }{
		{`{` + head + `,"payload":{"b":1.50,"a":[1,2e3]}}`, `{"b":1.50,"a":[1,2e3]}`},
		{"{ \"payload\" :\t{ \"b\" : 1.50 , \"a\" : [ 1 , 2e3 ] } ,\n" + head + " }", `{"b":1.50,"a":[1,2e3]}`},
		{`{"payload":{"s":"a \" , : } b","n":null,"t":true,"o":{}},` + head + `}`, `{"s":"a \" , : } b","n":null,"t":true,"o":{}}`},
		{`{` + head + `,"payload":{"p":{"payload":{"q":1}}}}`, `{"p":{"payload":{"q":1}}}`},
		{`{` + head + `}`, ``},
	} {
		e, err := Parse([]byte(tc.raw))
		if err != nil || string(e.Payload) != tc.want {
			t.Errorf("Parse(%s): payload %s, %v; want %s", tc.raw, e.Payload, err, tc.want)
		}
	}
}

// decodeStrictMember captures the member of the top-level object only,
// never a member of the same name deeper down.
func TestDecodeStrictMemberTopLevelOnly(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"payload":{"a":1},"x":{"payload":{"q":1}}}`, `{"a":1}`},
		{`{"x":[{"payload":2}],"payload" : "s"}`, `"s"`},
		{`{"x":{"payload":2}}`, ``},
		{`[{"payload":2}]`, ``},
	} {
		_, raw, err := decodeStrictMember([]byte(tc.raw), MaxDepth, "payload")
		if err != nil || string(raw) != tc.want {
			t.Errorf("decodeStrictMember(%s) = %s, %v; want %s", tc.raw, raw, err, tc.want)
		}
	}
}

// BenchmarkParse parses a chat envelope as a space member sends it, and
// one carrying a 200 KiB proposal payload.
func BenchmarkParse(b *testing.B) {
	const head = `{"protocol":"meup/v0.2","id":"9b2f0c1e-4d3a-4b8e-9f1a-2c3d4e5f6a7b","ts":"2026-11-27T12:00:00Z","from":"prop","context":"t1",`
	for _, tc := range []struct{ name, raw string }{
		{"chat", head + `"kind":"chat","payload":{"text":"` + strings.Repeat("x", 100) + `"}}`},
		{"proposal_200k", head + `"kind":"mcp/proposal","to":["orch"],"payload":{"method":"tools/call","params":{"blob":"` + strings.Repeat("x", 200<<10) + `"}}}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			data := []byte(tc.raw)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
