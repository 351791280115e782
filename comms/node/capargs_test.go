package node

import (
	"encoding/json"
	"testing"
)

func TestCapabilityArgs(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want string // "" with ok false: refused
		ok   bool
	}{
		{"none", nil, "", true},
		{"kind pattern", []string{"chat"}, `[{"kind":"chat"}]`, true},
		{"glob and object", []string{"mcp/*", ` {"kind":"mcp/request","payload":{"method":"x"}}`}, `[{"kind":"mcp/*"},{"kind":"mcp/request","payload":{"method":"x"}}]`, true},
		{"array of objects", []string{`[{"kind":"a"}, {"kind":"b"}]`}, `[{"kind":"a"},{"kind":"b"}]`, true},
		// A string is read as rosters read it (and space_grant's strings):
		// a kind and a method.
		{"kind and method", []string{"mcp/request:tools/*"}, `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`, true},
		{"array of a string", []string{`["chat"]`}, "", false},
		{"broken array", []string{`[{"kind":"a"}`}, "", false},
		{"broken object", []string{`{"kind":`}, "", false},
		{"object and junk", []string{`{"kind":"a"} x`}, "", false},
		{"an object, then a broken one", []string{`{"kind":"a"}`, `{bad`}, "", false},
	}
	for _, tc := range tests {
		got, err := CapabilityArgs(tc.in)
		if (err == nil) != tc.ok || string(got) != tc.want {
			t.Errorf("%s: %s, %v; want %s ok=%t", tc.name, got, err, tc.want, tc.ok)
		}
	}
	// A string's fault is said without the protocol's reason.
	if _, err := CapabilityArgs([]string{""}); err == nil || err.Error() != `capability "": capability string empty or longer than 512 bytes` {
		t.Errorf("empty capability string: %v", err)
	}
}

func FuzzCapabilityArgs(f *testing.F) {
	for _, s := range []string{"chat", `{"kind":"x"}`, `[{"kind":"a"}]`, `["x"]`, "[", `"quoted"`} {
		f.Add(s, "mcp/*")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		got, err := CapabilityArgs([]string{a, b})
		if err != nil {
			return
		}
		// Kind patterns, objects and arrays of objects always make a JSON
		// array; what the objects hold is the node's to check.
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(got, &items); err != nil {
			t.Fatalf("%q %q: %s is not a JSON array of objects: %v", a, b, got, err)
		}
	})
}

// A send to many fails, for the command line, when a copy failed: a
// broadcast copy marked failed, a space copy sent but not delivered (not
// one skipped, queued or acked).
func TestCopiesError(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"broadcast, none failed", Broadcasted{Copies: []BroadcastCopy{{Delivery: DeliveryAcked}, {Delivery: DeliveryQueued}}}.CopiesError(), ""},
		{"broadcast, one failed", Broadcasted{Copies: []BroadcastCopy{{Delivery: DeliveryAcked}, {Delivery: DeliveryFailed}}}.CopiesError(), "1 of 2 copies failed (see their notes)"},
		{"space, none failed", SpaceSent{Copies: []SpaceCopy{{Delivery: DeliveryAcked}, {Skipped: "not trusted"}, {Delivery: DeliveryQueued}}}.CopiesError(), ""},
		{"space, one not delivered", SpaceSent{Copies: []SpaceCopy{{Delivery: DeliveryAcked}, {LastError: "peer offline"}, {Skipped: "not addressed"}}}.CopiesError(), "1 of 2 copies failed (see their notes)"},
		{"no copies", SpaceSent{}.CopiesError(), ""},
	} {
		got := ""
		if c.err != nil {
			got = c.err.Error()
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if c.err != nil && CodeOf(c.err) != CodeCopiesFailed {
			t.Errorf("%s: code %s, want %s", c.name, CodeOf(c.err), CodeCopiesFailed)
		}
	}
}
