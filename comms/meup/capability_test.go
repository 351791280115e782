package meup

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseCapabilities(t *testing.T) {
	long := strings.Repeat("a", MaxPatternLen)
	tests := []struct {
		name string
		data string
		want string // the capabilities re-encoded, or "" for an error
	}{
		{"objects", `[{"kind":"chat"},{"id":"c2","kind":["a","b"],"payload":{"x":1}}]`, `[{"kind":"chat"},{"id":"c2","kind":["a","b"],"payload":{"x":1}}]`},
		{"mcpx method string", `["mcp/request:tools/*"]`, `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`},
		{"mcpx short kind", `["mcp:tools/list"]`, `[{"kind":"mcp/request","payload":{"method":"tools/list"}}]`},
		{"mcpx kind string", `["chat"]`, `[{"kind":"chat"}]`},
		{"mcpx glob kind string", `["mcp/*"]`, `[{"kind":"mcp/*"}]`},
		{"null payload dropped", `[{"kind":"chat","payload":null}]`, `[{"kind":"chat"}]`},
		{"empty array", `[]`, `[]`},
		{"pattern at limit", `[{"kind":"` + long + `"}]`, `[{"kind":"` + long + `"}]`},
		{"pattern over limit", `[{"kind":"` + long + `a"}]`, ""},
		{"payload pattern over limit", `[{"kind":"x","payload":{"k":"` + long + `a"}}]`, ""},
		{"payload key over limit", `[{"kind":"x","payload":{"` + long + `a":1}}]`, ""},
		{"string over limit", `["` + long + `a"]`, ""},
		{"empty string", `[""]`, ""},
		{"empty method", `["mcp/request:"]`, ""},
		{"no kind", `[":x"]`, ""},
		{"not an array", `{"kind":"chat"}`, ""},
		{"not JSON", `[`, ""},
		{"trailing data", `[] []`, ""},
		{"number", `[1]`, ""},
		{"missing kind", `[{"payload":{}}]`, ""},
		{"unknown field", `[{"kind":"chat","to":["bob"]}]`, ""},
		{"duplicate key", `[{"kind":"chat","kind":"x"}]`, ""},
		{"id not string", `[{"kind":"chat","id":1}]`, ""},
		{"too many", manyCapsJSON(MaxCapabilities + 1), ""},
		{"too large", `[{"kind":"x","payload":{"a":["` + strings.Repeat(long+`","`, MaxCapabilityJSON/MaxPatternLen) + `"]}}]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps, err := ParseCapabilities([]byte(tt.data))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseCapabilities = %v, want an error", caps)
				}
				if ReasonOf(err) != ReasonInvalidEnvelope {
					t.Fatalf("reason %s", ReasonOf(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(caps)
			if string(got) != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := ParseCapabilities([]byte(manyCapsJSON(MaxCapabilities))); err != nil {
		t.Fatalf("MaxCapabilities capabilities: %v", err)
	}
}

func manyCapsJSON(n int) string {
	b, _ := json.Marshal(manyCaps(n))
	return string(b)
}

func TestCapabilityFromString(t *testing.T) {
	c, err := CapabilityFromString("mcp/request:tools/*")
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Kind) != `"mcp/request"` || string(c.Payload) != `{"method":"tools/*"}` {
		t.Fatalf("got %s %s", c.Kind, c.Payload)
	}
	if _, err := CapabilityFromString(""); err == nil {
		t.Fatal("empty string accepted")
	}
}

func caps(t testing.TB, s string) []Capability {
	t.Helper()
	c, err := ParseCapabilities([]byte(s))
	if err != nil {
		t.Fatalf("ParseCapabilities(%s): %v", s, err)
	}
	return c
}

func TestCompileRefuses(t *testing.T) {
	tests := []struct {
		name string
		caps []Capability
	}{
		{"bad regex kind", []Capability{{Kind: json.RawMessage(`"/a(/"`)}}},
		{"bad regex value", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"m":"/[/"}`)}}},
		{"bad glob", []Capability{{Kind: json.RawMessage(`"a[*"`)}}},
		{"bad negated glob", []Capability{{Kind: json.RawMessage(`"!a[*"`)}}},
		{"bad glob key", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"a[*":1}`)}}},
		{"brace alternation", []Capability{{Kind: json.RawMessage(`"mcp/{request,proposal}*"`)}}},
		{"brace alternation in value", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"m":"{a,b}*"}`)}}},
		{"too many wildcards", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"m":"` + strings.Repeat("a*", maxGlobWildcards+1) + `"}`)}}},
		{"too many descendant segments", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$..[?@..[?@..b]]":1}`)}}},
		{"two descendant segments", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$..a..b":1}`)}}},
		{"descendant segment in a filter", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$.a[?@..b]":1}`)}}},
		{"descendant count in a filter", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$[?count(@..*) > 0]":1}`)}}},
		{"root in a filter", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$.a[?count($.a[*]) < 0]":1}`)}}},
		{"root descendants in a filter", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$.a[?count($..*) < 0]":1}`)}}},
		{"root in a comparison", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$.a[?@.b == $.c]":1}`)}}},
		{"root in a quoted name", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$['a$b']":1}`)}}},
		{"bad negated regex", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"path":"!/(/"}`)}}},
		{"negated regex with a large program", []Capability{{Kind: json.RawMessage(`"!/(a|b){300}/"`)}}},
		{"bad JSONPath", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$[":1}`)}}},
		{"bad JSONPath nested", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"a":{"$.b[?":1}}`)}}},
		{"kind number", []Capability{{Kind: json.RawMessage(`5`)}}},
		{"kind object", []Capability{{Kind: json.RawMessage(`{"a":"b"}`)}}},
		{"kind null", []Capability{{Kind: json.RawMessage(`null`)}}},
		{"kind array of numbers", []Capability{{Kind: json.RawMessage(`["a",1]`)}}},
		{"kind empty array", []Capability{{Kind: json.RawMessage(`[]`)}}},
		{"kind empty pattern", []Capability{{Kind: json.RawMessage(`""`)}}},
		{"kind empty pattern in an array", []Capability{{Kind: json.RawMessage(`["chat",""]`)}}},
		{"kind missing", []Capability{{}}},
		{"kind not JSON", []Capability{{Kind: json.RawMessage(`"x`)}}},
		{"payload array", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`[]`)}}},
		{"payload string", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`"*"`)}}},
		{"payload duplicate key", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"a":1,"a":2}`)}}},
		{"pattern too long", []Capability{{Kind: json.RawMessage(`"` + strings.Repeat("a", MaxPatternLen+1) + `"`)}}},
		{"value too long", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"a":"` + strings.Repeat("a", MaxPatternLen+1) + `"}`)}}},
		{"too many", make([]Capability, MaxCapabilities+1)},
		{"regex with a large program", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"m":"/[\\pL\\pN]{1000}/"}`)}}},
		{"regex kind with a large program", []Capability{{Kind: json.RawMessage(`"/(a|b){300}/"`)}}},
		{"JSONPath search", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$..[?search(@.s, @.r)]":1}`)}}},
		{"JSONPath match", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$[?match(@.s, 'a.*')]":1}`)}}},
		{"one bad among good", append(caps(t, `[{"kind":"chat"},{"kind":"mcp/*"}]`), Capability{Kind: json.RawMessage(`"/(/"`)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Compile(tt.caps)
			if err == nil {
				t.Fatal("Compile accepted a malformed set")
			}
			if m != nil {
				t.Fatal("Compile returned a matcher with its error")
			}
			var me *Error
			if !errors.As(err, &me) || me.Reason != ReasonInvalidEnvelope {
				t.Fatalf("error %v is not an *Error", err)
			}
		})
	}
	accepted := []struct {
		name string
		caps []Capability
	}{
		{"wildcards at limit", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"m":"` + strings.Repeat("a**", maxGlobWildcards) + `"}`)}}},
		{"descendant segments at limit", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$..[?@.b]":1}`)}}},
		{"relative count in a filter", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"$.a[?count(@.*) > 1]":1}`)}}},
		{"negated regex", []Capability{{Kind: json.RawMessage(`"x"`), Payload: json.RawMessage(`{"path":"!/^\\/etc\\//"}`)}}},
		{"escaped glob characters", []Capability{{Kind: json.RawMessage(`"a\\*"`)}}},
		{"literal with brackets", []Capability{{Kind: json.RawMessage(`"a[b"`)}}},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compile(tt.caps); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	tests := []struct {
		name    string
		caps    string
		kind    string
		payload string
		want    bool
	}{
		{"number by value", `[{"kind":"x","payload":{"n":5}}]`, "x", `{"n":5.0}`, true},
		{"number exponent", `[{"kind":"x","payload":{"n":0.5E1}}]`, "x", `{"n":50e-1}`, true},
		{"number negative zero", `[{"kind":"x","payload":{"n":0}}]`, "x", `{"n":-0.0}`, true},
		{"number sign", `[{"kind":"x","payload":{"n":5}}]`, "x", `{"n":-5}`, false},
		{"number precision", `[{"kind":"x","payload":{"n":9007199254740993}}]`, "x", `{"n":9007199254740992}`, false},
		{"number huge exponent", `[{"kind":"x","payload":{"n":1e999999999}}]`, "x", `{"n":10e999999998}`, true},
		{"number vs string", `[{"kind":"x","payload":{"n":"5"}}]`, "x", `{"n":5}`, false},
		{"null vs missing", `[{"kind":"x","payload":{"n":null}}]`, "x", `{}`, false},
		{"bool", `[{"kind":"x","payload":{"b":true}}]`, "x", `{"b":true}`, true},
		{"JSONPath selects nothing", `[{"kind":"x","payload":{"$.a.b":"*"}}]`, "x", `{"a":{}}`, false},
		{"JSONPath some node", `[{"kind":"x","payload":{"$.a[*]":3}}]`, "x", `{"a":[1,2,3]}`, true},
		{"JSONPath no node matches", `[{"kind":"x","payload":{"$.a[*]":4}}]`, "x", `{"a":[1,2,3]}`, false},
		{"JSONPath filter", `[{"kind":"x","payload":{"$.a[?@.n > 2].name":"ok"}}]`, "x", `{"a":[{"n":1,"name":"no"},{"n":3,"name":"ok"}]}`, true},
		{"JSONPath object value", `[{"kind":"x","payload":{"$.a":{"b":1}}}]`, "x", `{"a":{"b":1,"c":2}}`, true},
		{"deep key at top", `[{"kind":"x","payload":{"**":"v"}}]`, "x", `{"k":"v"}`, true},
		{"deep key in array", `[{"kind":"x","payload":{"**":"v"}}]`, "x", `{"k":[["v"]]}`, true},
		{"deep key missing", `[{"kind":"x","payload":{"**":"v"}}]`, "x", `{"k":["w"]}`, false},
		// * may match no characters inside a value (as the reference
		// matcher's globs do); only an empty value matches no glob.
		{"star matches none after a prefix", `[{"kind":"x","payload":{"v":"read_*"}}]`, "x", `{"v":"read_"}`, true},
		{"star alone never matches empty", `[{"kind":"x","payload":{"v":"*"}}]`, "x", `{"v":""}`, false},
		{"kind star matches none after a slash", `[{"kind":"mcp/*"}]`, "mcp/", ``, true},
		{"key glob", `[{"kind":"x","payload":{"arg_*":"yes"}}]`, "x", `{"arg_1":"no","arg_2":"yes"}`, true},
		{"key glob none", `[{"kind":"x","payload":{"arg_*":"yes"}}]`, "x", `{"other":"yes"}`, false},
		{"regex in value", `[{"kind":"x","payload":{"q":"/^SELECT/"}}]`, "x", `{"q":"SELECT 1"}`, true},
		{"regex never matches number", `[{"kind":"x","payload":{"q":"/1/"}}]`, "x", `{"q":1}`, false},
		{"negation never matches number", `[{"kind":"x","payload":{"q":"!a"}}]`, "x", `{"q":1}`, false},
		{"negated literal", `[{"kind":"x","payload":{"q":"!a"}}]`, "x", `{"q":"b"}`, true},
		{"negated regex refuses a match", `[{"kind":"x","payload":{"path":"!/^\\/etc\\//"}}]`, "x", `{"path":"/etc/shadow"}`, false},
		{"negated regex allows another", `[{"kind":"x","payload":{"path":"!/^\\/etc\\//"}}]`, "x", `{"path":"/home/a/etc/x"}`, true},
		{"negated regex is not the literal", `[{"kind":"x","payload":{"path":"!/^\\/etc\\//"}}]`, "x", `{"path":"/^\\/etc\\//"}`, true},
		{"negated regex never matches number", `[{"kind":"x","payload":{"q":"!/a/"}}]`, "x", `{"q":1}`, false},
		{"negated regex kind", `[{"kind":"!/^system\\//"}]`, "chat", ``, true},
		{"negated regex kind refuses", `[{"kind":"!/^mcp\\//"}]`, "mcp/request", ``, false},
		{"one-of numbers", `[{"kind":"x","payload":{"q":[1,2]}}]`, "x", `{"q":2.0}`, true},
		{"array value not matched by equal array", `[{"kind":"x","payload":{"q":[1,2]}}]`, "x", `{"q":[1,2]}`, false},
		{"nested object must be object", `[{"kind":"x","payload":{"p":{}}}]`, "x", `{"p":"s"}`, false},
		{"glob question mark", `[{"kind":"x","payload":{"q":"a?c"}}]`, "x", `{"q":"abc"}`, true},
		{"kind array with regex", `[{"kind":["chat","/^mcp\\//"]}]`, "mcp/response", ``, true},
		{"star kind never empty", `[{"kind":"*"}]`, "", ``, true},
		{"zero capabilities", `[]`, "chat", ``, false},
		{"malformed payload matches no payload pattern", `[{"kind":"x","payload":{}}]`, "x", `{`, false},
		// Two keys that differ only in letter case (U+017F folds to s; U+212A
		// to k): a reader that folds case could take the unchecked one.
		{"host beside hoſt", `[{"kind":"mcp/request","payload":{"params":{"arguments":{"host":"safe.example"}}}}]`, "mcp/request",
			`{"method":"tools/call","params":{"name":"fetch","arguments":{"host":"safe.example","ho\u017ft":"evil.example"}}}`, false},
		{"host alone", `[{"kind":"mcp/request","payload":{"params":{"arguments":{"host":"safe.example"}}}}]`, "mcp/request",
			`{"method":"tools/call","params":{"name":"fetch","arguments":{"host":"safe.example","hosts":"x"}}}`, true},
		{"clash anywhere in the payload", `[{"kind":"x","payload":{"a":1}}]`, "x", `{"a":1,"b":[{"Kind":1,"\u212aind":2}]}`, false},
		{"clash under a kind-only capability", `[{"kind":"x"}]`, "x", `{"id":1,"ID":2}`, true},
		{"empty payload pattern is a payload pattern", `[{"kind":"x","payload":{}}]`, "x", `{"id":1,"ID":2}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Compile(caps(t, tt.caps))
			if err != nil {
				t.Fatal(err)
			}
			e := Envelope{Kind: tt.kind, Payload: json.RawMessage(tt.payload)}
			if got := m.Allows(e); got != tt.want {
				t.Fatalf("Allows = %v, want %v", got, tt.want)
			}
		})
	}
	var zero Matcher
	var nilM *Matcher
	e := Envelope{Kind: "chat"}
	if zero.Allows(e) || nilM.Allows(e) || nilM.Covers(Capability{Kind: json.RawMessage(`"chat"`)}) {
		t.Fatal("the zero or nil Matcher allows something")
	}
}

func TestNumKey(t *testing.T) {
	same := [][]string{
		{"5", "5.0", "50e-1", "0.5E1", "0.5e+1", "5.000", "500E-2"},
		{"0", "-0", "0.0", "0e10", "-0.0E-3"},
		{"-12.5", "-125e-1", "-0.125E2"},
		{"100", "1e2", "1E+2", "0.001e5"},
	}
	for i, group := range same {
		for _, s := range group {
			if numKey(s) != numKey(group[0]) {
				t.Errorf("numKey(%s) = %s, numKey(%s) = %s", s, numKey(s), group[0], numKey(group[0]))
			}
			for j, other := range same {
				if j != i && numKey(s) == numKey(other[0]) {
					t.Errorf("numKey(%s) == numKey(%s)", s, other[0])
				}
			}
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		name string
		held string
		c    string
		want bool
	}{
		{"star kind no payload", `[{"kind":"*"}]`, `{"kind":"mcp/*","payload":{"method":"x"}}`, true},
		{"double star kind", `[{"kind":"**"}]`, `{"kind":"/.*/"}`, true},
		{"star kind with payload", `[{"kind":"*","payload":{"method":"x"}}]`, `{"kind":"chat"}`, false},
		{"same kind", `[{"kind":"chat"}]`, `{"kind":"chat"}`, true},
		{"same glob kind", `[{"kind":"mcp/*"}]`, `{"kind":"mcp/*"}`, true},
		{"glob covers literal", `[{"kind":"mcp/*"}]`, `{"kind":"mcp/request"}`, true},
		{"glob covers literal array", `[{"kind":"mcp/*"}]`, `{"kind":["mcp/request","mcp/proposal"]}`, true},
		{"glob misses one of array", `[{"kind":"mcp/*"}]`, `{"kind":["mcp/request","chat"]}`, false},
		{"narrower glob not proven", `[{"kind":"mcp/*"}]`, `{"kind":"mcp/req*"}`, false},
		{"wider glob", `[{"kind":"mcp/request"}]`, `{"kind":"mcp/*"}`, false},
		{"same negation", `[{"kind":"!chat"}]`, `{"kind":"!chat"}`, true},
		{"negation covers literal", `[{"kind":"!chat"}]`, `{"kind":"mcp/request"}`, true},
		{"negation misses literal", `[{"kind":"!chat"}]`, `{"kind":"chat"}`, false},
		{"regex kind vs literal", `[{"kind":"/^mcp\\//"}]`, `{"kind":"mcp/request"}`, true},
		{"same array kind", `[{"kind":["a","b/*"]}]`, `{"kind":["a","b/*"]}`, true},
		{"other kind", `[{"kind":"chat"}]`, `{"kind":"mcp/request"}`, false},
		{"held no payload", `[{"kind":"mcp/request"}]`, `{"kind":"mcp/request","payload":{"method":"tools/*"}}`, true},
		{"held empty payload", `[{"kind":"mcp/request","payload":{}}]`, `{"kind":"mcp/request"}`, true},
		{"held payload, c none", `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`, `{"kind":"mcp/request"}`, false},
		{"same payload", `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`, `{"kind":"mcp/request","payload":{"method":"tools/*"}}`, true},
		{"narrower payload by extra key", `[{"kind":"mcp/request","payload":{"method":"tools/call"}}]`, `{"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"x"}}}`, true},
		{"nested extra key", `[{"kind":"x","payload":{"p":{"a":1}}}]`, `{"kind":"x","payload":{"p":{"a":1.0,"b":2}}}`, true},
		{"nested missing key", `[{"kind":"x","payload":{"p":{"a":1,"c":3}}}]`, `{"kind":"x","payload":{"p":{"a":1,"b":2}}}`, false},
		{"glob value covers literal", `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`, `{"kind":"mcp/request","payload":{"method":"tools/call"}}`, true},
		{"glob value covers literal and extra key", `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`, `{"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"x"}}}`, true},
		{"glob value misses literal", `[{"kind":"mcp/request","payload":{"method":"tools/*"}}]`, `{"kind":"mcp/request","payload":{"method":"resources/read"}}`, false},
		{"glob value covers literal list", `[{"kind":"x","payload":{"m":"a*"}}]`, `{"kind":"x","payload":{"m":["ab","ac"]}}`, true},
		{"glob value misses one of list", `[{"kind":"x","payload":{"m":"a*"}}]`, `{"kind":"x","payload":{"m":["ab","b"]}}`, false},
		{"narrower glob value not proven", `[{"kind":"x","payload":{"m":"tools/*"}}]`, `{"kind":"x","payload":{"m":"tools/c*"}}`, false},
		{"regex value not proven by a glob", `[{"kind":"x","payload":{"m":"tools/*"}}]`, `{"kind":"x","payload":{"m":"/^tools/call$/"}}`, false},
		{"negation value covers literal", `[{"kind":"x","payload":{"m":"!rm"}}]`, `{"kind":"x","payload":{"m":"ls"}}`, true},
		{"negation value misses its literal", `[{"kind":"x","payload":{"m":"!rm"}}]`, `{"kind":"x","payload":{"m":"rm"}}`, false},
		{"negation value vs a negation not proven", `[{"kind":"x","payload":{"m":"!rm"}}]`, `{"kind":"x","payload":{"m":"!ls"}}`, false},
		{"regex value covers literal", `[{"kind":"x","payload":{"m":"/^t/"}}]`, `{"kind":"x","payload":{"m":"tools"}}`, true},
		{"list value covers literal", `[{"kind":"x","payload":{"n":[1,2]}}]`, `{"kind":"x","payload":{"n":2.0}}`, true},
		{"list value misses literal", `[{"kind":"x","payload":{"n":[1,2]}}]`, `{"kind":"x","payload":{"n":3}}`, false},
		{"glob value vs a number", `[{"kind":"x","payload":{"n":"*"}}]`, `{"kind":"x","payload":{"n":3}}`, false},
		{"glob value vs an object", `[{"kind":"x","payload":{"p":"*"}}]`, `{"kind":"x","payload":{"p":{"a":"b"}}}`, false},
		{"different value", `[{"kind":"x","payload":{"n":5}}]`, `{"kind":"x","payload":{"n":6}}`, false},
		{"one of several held", `[{"kind":"chat"},{"kind":"mcp/*","payload":{"method":"tools/list"}}]`, `{"kind":"mcp/request","payload":{"method":"tools/list"}}`, true},
		{"malformed c", `[{"kind":"*"}]`, `{"kind":"/(/"}`, false},
		{"empty set", `[]`, `{"kind":"chat"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Compile(caps(t, tt.held))
			if err != nil {
				t.Fatal(err)
			}
			c := caps(t, "["+tt.c+"]")[0]
			if got := m.Covers(c); got != tt.want {
				t.Fatalf("Covers = %v, want %v", got, tt.want)
			}
		})
	}
}

func BenchmarkAllows(b *testing.B) {
	m, err := Compile(caps(b, `[
		{"kind":"chat"},
		{"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"read_*"}}},
		{"kind":"mcp/request","payload":{"method":"resources/*","params":{"uri":"/public/**"}}}]`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := Parse([]byte(`{"protocol":"mew/v0.4","id":"e1","from":"alice","kind":"mcp/request",
		"payload":{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"/public/docs/readme.md"}}}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !m.Allows(e) {
			b.Fatal("not allowed")
		}
	}
}

func ExampleMatcher_Allows() {
	caps, err := ParseCapabilities([]byte(`["chat", "mcp/request:tools/*"]`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := Compile(caps)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, text := range []string{
		`{"protocol":"mew/v0.4","id":"1","from":"bob","kind":"mcp/request","payload":{"method":"tools/call"}}`,
		`{"protocol":"mew/v0.4","id":"2","from":"bob","kind":"mcp/request","payload":{"method":"resources/read"}}`,
		`{"protocol":"meup/v0.1","id":"3","from":"bob","kind":"chat","payload":{"text":"hi"}}`,
	} {
		e, err := Parse([]byte(text))
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(e.ID, e.Kind, m.Allows(e))
	}
	// Output:
	// 1 mcp/request true
	// 2 mcp/request false
	// 3 chat true
}

// A compile error names the capability by its index, and a payload key
// that looks like an index is quoted, not read as one.
func TestCompileErrorFields(t *testing.T) {
	for _, tc := range []struct{ caps, field string }{
		{`[{"kind":"chat"},{"kind":"/(/"}]`, "capabilities[1].kind"},
		{`[{"kind":"chat","payload":{"[0]":"/(/"}}]`, `capabilities[0].payload."[0]"`},
		{`[{"kind":"chat","payload":{"text":"/(/"}}]`, "capabilities[0].payload.text"},
	} {
		_, err := Compile(caps(t, tc.caps))
		var e *Error
		if !errors.As(err, &e) || e.Field != tc.field {
			t.Errorf("Compile(%s): %v, want field %s", tc.caps, err, tc.field)
		}
	}
}
