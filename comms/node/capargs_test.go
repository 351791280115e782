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
		// Kind patterns and arrays always make an array; objects are passed
		// on for the node to check, so only their being JSON matters here.
		if json.Valid([]byte(a)) && json.Valid([]byte(b)) && !json.Valid(got) {
			t.Fatalf("%q %q: %s is not JSON", a, b, got)
		}
	})
}
