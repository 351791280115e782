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
